"""WRONG on purpose (problem 115): the receive buffer is made float64 whatever the tensor's dtype, so
a float32 tensor's chunks arrive in a buffer of twice their size (gloo: "size doesn't match")."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase in (0, 1):
        for step in range(world - 1):
            send_c, recv_c = (rank - step + phase) % world, (rank - step - 1 + phase) % world
            incoming = torch.zeros(chunks[recv_c].numel(), dtype=torch.float64)   # WRONG: float64 always
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_c].clone(), right),
                                                dist.P2POp(dist.irecv, incoming, left)]):
                work.wait()
            if phase == 0:
                chunks[recv_c] += incoming
            else:
                chunks[recv_c].copy_(incoming)
