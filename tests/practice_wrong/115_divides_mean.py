"""WRONG on purpose (problem 115): divides the result by the world size at the end (an average, not the
sum dist.all_reduce gives)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.tensor_split(world))              # views: writing a chunk writes the tensor
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase, offset in (("reduce-scatter", 0), ("all-gather", 1)):
        for step in range(world - 1):
            send_c, recv_c = (rank - step + offset) % world, (rank - step - 1 + offset) % world
            incoming = torch.empty_like(chunks[recv_c])
            # Both at once: two blocking sends facing each other could wait for ever.
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_c].clone(), right),
                                                dist.P2POp(dist.irecv, incoming, left)]):
                work.wait()
            if phase == "reduce-scatter":
                chunks[recv_c] += incoming                 # add into our copy of that chunk
            else:
                chunks[recv_c].copy_(incoming)             # already complete: overwrite
    tensor /= world
