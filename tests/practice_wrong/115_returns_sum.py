"""WRONG on purpose (problem 115): the ring runs on a copy and the sum is returned; the tensor passed
in (which dist.all_reduce would change in place) keeps this rank's own numbers."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    total = tensor.clone()                                 # WRONG: works on a copy ...
    chunks = list(total.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase in (0, 1):
        for step in range(world - 1):
            send_c, recv_c = (rank - step + phase) % world, (rank - step - 1 + phase) % world
            incoming = torch.empty_like(chunks[recv_c])
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_c].clone(), right),
                                                dist.P2POp(dist.irecv, incoming, left)]):
                work.wait()
            if phase == 0:
                chunks[recv_c] += incoming
            else:
                chunks[recv_c].copy_(incoming)
    return total                                           # ... and returns it
