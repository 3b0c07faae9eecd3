"""WRONG on purpose (problem 114): train_step calls loss_fn(targets, outputs); with a symmetric
loss (MSE) nobody would notice."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from lecture14.data_parallel import average_gradients, partition_indices  # noqa: F401  (right ones)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    optimizer.zero_grad()
    loss = loss_fn(targets, model(inputs))         # WRONG: the arguments swapped
    loss.backward()
    average_gradients(model)
    optimizer.step()
    return loss.item()
