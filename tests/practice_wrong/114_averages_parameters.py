"""WRONG on purpose (problem 114): each rank steps on its own gradient, then the PARAMETERS are
averaged. With SGD that is the same update (it is linear in the gradient); with Adam it is not."""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from lecture14.data_parallel import average_gradients, partition_indices  # noqa: F401  (right ones)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()                                       # WRONG: a step on this rank's gradient ...
    with torch.no_grad():
        for param in model.parameters():                   # ... then the parameters averaged
            dist.all_reduce(param)
            param /= dist.get_world_size()
    return loss.item()
