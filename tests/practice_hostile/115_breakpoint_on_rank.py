"""Problem 115 with a breakpoint() left in rank 1's path (tests/practice/test_practice_processes.py): the rank
must fail at once, named, while the others wait for it in a barrier."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    if dist.get_rank() == 1:
        breakpoint()                                       # line 12
    dist.barrier()
    raise NotImplementedError("only the breakpoint is written")
