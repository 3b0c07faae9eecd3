"""A correct ring all-reduce split over two files, as a student's folder may be: the step that
sends one chunk and receives another lives in ring_step.py beside it."""

from __future__ import annotations

import torch
import torch.distributed as dist
from ring_step import exchange


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world))
    for phase in (0, 1):                                   # reduce-scatter adds, all-gather copies
        for step in range(world - 1):
            send_c, recv_c = (rank - step + phase) % world, (rank - step - 1 + phase) % world
            incoming = exchange(chunks[send_c], chunks[recv_c])
            if phase == 0:
                chunks[recv_c] += incoming
            else:
                chunks[recv_c].copy_(incoming)
