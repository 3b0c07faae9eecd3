"""WRONG on purpose (problem 115): chunks from tensor.chunk(K), which gives fewer than K chunks when
K does not fit N well (N = 5, K = 4: sizes 2, 2, 1); tensor_split(K) always gives K."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.chunk(world))                     # WRONG: maybe fewer than `world` chunks
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase, offset in (("reduce-scatter", 0), ("all-gather", 1)):
        for step in range(world - 1):
            send_c, recv_c = (rank - step + offset) % world, (rank - step - 1 + offset) % world
            incoming = torch.empty_like(chunks[recv_c])
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[send_c].clone(), right),
                                                dist.P2POp(dist.irecv, incoming, left)]):
                work.wait()
            if phase == "reduce-scatter":
                chunks[recv_c] += incoming
            else:
                chunks[recv_c].copy_(incoming)
