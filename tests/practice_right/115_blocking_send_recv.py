"""A correct ring all-reduce written with blocking dist.send / dist.recv (even ranks send first,
odd ranks receive first, so two blocking calls never face each other). It must pass: torch's
send calls isend inside, and the judge must count that message once."""

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
            outgoing, incoming = chunks[send_c].clone(), torch.empty_like(chunks[recv_c])
            if rank % 2 == 0:
                dist.send(outgoing, right)
                dist.recv(incoming, left)
            else:
                dist.recv(incoming, left)
                dist.send(outgoing, right)
            if phase == 0:
                chunks[recv_c] += incoming
            else:
                chunks[recv_c].copy_(incoming)
