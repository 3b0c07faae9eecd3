"""A correct average_gradients on a slow rank: rank 1 sleeps 3 s before its first all-reduce (once,
in the judge's average case), so rank 0 waits 3 s in the collective. Under the default case limit
that must pass: a rank that is late but comes is no hung rank."""

from __future__ import annotations

import time

import torch.distributed as dist
from torch import nn

from lecture14.data_parallel import partition_indices, train_step  # noqa: F401  (the suite's own)

_slept = False


def average_gradients(model: nn.Module) -> None:
    global _slept
    if dist.get_rank() == 1 and hasattr(model, "unused") and not _slept:   # the judge's average case only
        _slept = True
        time.sleep(3.0)
    world = dist.get_world_size()
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world
