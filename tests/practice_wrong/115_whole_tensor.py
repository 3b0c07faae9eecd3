"""WRONG on purpose (problem 115): the whole tensor travels round the ring, K − 1 times: the right
sum, with K − 1 messages of N elements per rank instead of 2(K − 1) of N/K (the same bytes on 2
ranks, half again as many on 3)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world
    passing, total = tensor.clone(), tensor.clone()
    for _ in range(world - 1):                             # WRONG: whole tensors, not chunks
        incoming = torch.empty_like(passing)
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, passing, right),
                                            dist.P2POp(dist.irecv, incoming, left)]):
            work.wait()
        total += incoming
        passing = incoming
    tensor.copy_(total)
