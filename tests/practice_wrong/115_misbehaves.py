"""Problem 115 done badly on real ranks (tests/practice/test_practice_processes.py): one rank crashes, every
rank waits for a message nobody sends (a deadlock), one rank loops for ever while the others wait for
it in a collective (a hung rank, to be named); other sizes are not implemented."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    if tensor.numel() == 8:                      # "2 ranks, 8 numbers": rank 1 crashes
        if rank == 1:
            raise ZeroDivisionError("rank 1's bug")
        dist.recv(torch.empty(4, dtype=tensor.dtype), src=1)
    elif tensor.numel() == 12:                   # "3 ranks, 12 numbers": everyone receives first
        dist.recv(torch.empty(4, dtype=tensor.dtype), src=(rank - 1) % world)
    elif tensor.numel() == 16:                   # "4 ranks, 16 numbers": rank 2 spins, the others wait
        while rank == 2:
            pass
        dist.barrier()
    raise NotImplementedError("only the broken sizes are written")
