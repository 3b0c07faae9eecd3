"""The helper module beside 115_with_helper/solution.py: one step of the ring."""

from __future__ import annotations

import torch
import torch.distributed as dist


def exchange(outgoing: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Send `outgoing` to the right neighbour and return what the left one sent (shaped like `like`)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    incoming = torch.empty_like(like)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing.clone(), (rank + 1) % world),
                                        dist.P2POp(dist.irecv, incoming, (rank - 1) % world)]):
        work.wait()
    return incoming
