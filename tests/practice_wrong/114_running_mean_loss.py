"""WRONG on purpose (problem 114): train_step returns the running mean of the losses so far (a
logging habit): the first step's loss is right, the later ones are not this step's."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from lecture14.data_parallel import average_gradients, partition_indices  # noqa: F401  (right ones)

_seen: list[float] = []


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    average_gradients(model)
    optimizer.step()
    _seen.append(loss.item())
    return sum(_seen) / len(_seen)                         # WRONG: the mean so far, not this step's
