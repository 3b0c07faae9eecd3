"""WRONG on purpose (problem 114): train_step returns the loss averaged over the ranks (all-reduced),
not this rank's own loss."""

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
    average_gradients(model)
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)                                  # WRONG: the ranks' mean, not this rank's loss
    return (mean / dist.get_world_size()).item()
