"""Problem 115 "solved" with an all-reduce, hidden from the judge's counter a different way on each
world size (tests/practice/test_practice_processes.py):
  2 ranks             torch's own ProcessGroup.allreduce put back on the class, and left there
  3 ranks, 12 numbers the same for one call, then the counting method put back
  3 ranks, 10 numbers a functional collective through torch.ops (no ProcessGroup method at all)
  4 ranks             common.dist_count's counter replaced, at import, by one that counts nothing
Every case must fail, saying its traffic was hidden."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from common import dist_count

TORCH_ALLREDUCE = ProcessGroup.__dict__["allreduce"]      # taken at import, before any counting
_real_counting = dist_count.counting


@contextlib.contextmanager
def _counting_nothing_on_4_ranks() -> Iterator[dist_count.Counts]:
    if dist.get_world_size() == 4:
        yield dist_count.Counts()
    else:
        with _real_counting() as counts:
            yield counts


dist_count.counting = _counting_nothing_on_4_ranks


def ring_allreduce(tensor: torch.Tensor) -> None:
    world, n = dist.get_world_size(), tensor.numel()
    if world == 2:
        ProcessGroup.allreduce = TORCH_ALLREDUCE
        dist.all_reduce(tensor)
    elif world == 3 and n == 12:
        counting_method = ProcessGroup.__dict__["allreduce"]
        ProcessGroup.allreduce = TORCH_ALLREDUCE
        dist.all_reduce(tensor)
        ProcessGroup.allreduce = counting_method
    elif world == 3:
        functional = torch.ops._c10d_functional
        reduced = functional.all_reduce(tensor, "sum", dist.group.WORLD.group_name)
        tensor.copy_(functional.wait_tensor(reduced))
    elif world == 4:
        dist.all_reduce(tensor)
