"""WRONG on purpose (problem 114): a parameter with no gradient gets zeros (so that every rank calls
the same all-reduces), where the statement says grad None is left alone."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from lecture14.data_parallel import partition_indices, train_step  # noqa: F401  (right ones)


def average_gradients(model: nn.Module) -> None:
    for param in model.parameters():
        if param.grad is None:
            param.grad = torch.zeros_like(param)           # WRONG: None must stay None
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= dist.get_world_size()
