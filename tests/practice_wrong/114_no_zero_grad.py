"""WRONG on purpose (problem 114): train_step never clears the gradients, so every step adds the
new gradient to the old ones: the first step is right, the second is not."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from lecture14.data_parallel import average_gradients, partition_indices  # noqa: F401  (right ones)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    loss = loss_fn(model(inputs), targets)                 # WRONG: no optimizer.zero_grad() first
    loss.backward()
    average_gradients(model)
    optimizer.step()
    return loss.item()
