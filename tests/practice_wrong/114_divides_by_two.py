"""WRONG on purpose (problem 114): average_gradients divides by 2, the world size of the example in
the statement, not by dist.get_world_size(): right on 2 ranks only."""

from __future__ import annotations

import torch.distributed as dist
from torch import nn

from lecture14.data_parallel import partition_indices, train_step  # noqa: F401  (right ones)


def average_gradients(model: nn.Module) -> None:
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
            param.grad /= 2                                # WRONG: the world size may be 3
