"""Problem 114: HW5's three data-parallel functions. Write them; the judge runs the last two on real ranks.

Judge it:  python practice/judge.py 114        (the statement: practice/114_hw5_data_parallel/README.md)
"""

from __future__ import annotations

import random  # noqa: F401  (partition_indices needs a random.Random)
from typing import Callable

import torch
import torch.distributed as dist  # noqa: F401  (average_gradients needs dist.all_reduce)
from torch import nn


def partition_indices(size: int, world_size: int, rank: int, seed: int) -> list[int]:
    """The sample indices (of `size`) that `rank` of `world_size` trains on: a seeded shuffle, sliced."""
    raise NotImplementedError("write partition_indices(size, world_size, rank, seed) in 114's solution.py")


def average_gradients(model: nn.Module) -> None:
    """Replace every parameter's .grad by its mean over all ranks, in place (skip grad None)."""
    raise NotImplementedError("write average_gradients(model) in 114's solution.py")


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """One data-parallel step on this rank's batch; return this rank's loss as a float."""
    raise NotImplementedError("write train_step(model, optimizer, loss_fn, inputs, targets) in 114's "
                              "solution.py")
