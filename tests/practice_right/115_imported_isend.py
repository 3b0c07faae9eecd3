"""A correct ring all-reduce spelled with `from torch.distributed import isend, irecv` (both posted,
then both waited for). Rank 1 of 2 also starts 3 s late: a slow rank that does come must pass under
the default case limit."""

from __future__ import annotations

import time

import torch
from torch.distributed import get_rank, get_world_size, irecv, isend


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = get_rank(), get_world_size()
    if world == 2 and rank == 1:
        time.sleep(3.0)                                    # late, but it comes
    chunks = list(tensor.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase in (0, 1):
        for step in range(world - 1):
            send_c, recv_c = (rank - step + phase) % world, (rank - step - 1 + phase) % world
            incoming = torch.empty_like(chunks[recv_c])
            works = [isend(chunks[send_c].clone(), right), irecv(incoming, left)]
            for work in works:
                work.wait()
            if phase == 0:
                chunks[recv_c] += incoming
            else:
                chunks[recv_c].copy_(incoming)
