"""WRONG on purpose (problem 115): the reduce-scatter goes right and the all-gather goes back left:
the right sum and the right volume, but every rank talks to both neighbours."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):                          # reduce-scatter, to the right
        send_c, recv_c = (rank - step) % world, (rank - step - 1) % world
        incoming = torch.empty_like(chunks[recv_c])
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_c].clone(), right),
                                            dist.P2POp(dist.irecv, incoming, left)]):
            work.wait()
        chunks[recv_c] += incoming
    for step in range(world - 1):                          # WRONG: the all-gather to the left
        send_c, recv_c = (rank + 1 + step) % world, (rank + 2 + step) % world
        incoming = torch.empty_like(chunks[recv_c])
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_c].clone(), left),
                                            dist.P2POp(dist.irecv, incoming, right)]):
            work.wait()
        chunks[recv_c].copy_(incoming)
