"""Problem 115, wrong: a right ring, and beside it an all_reduce whose record it deletes from the
judge's counter in one line. The process group's own operation count still shows it."""

import torch
import torch.distributed as dist

from common import dist_count


def ring_allreduce(tensor: torch.Tensor) -> None:
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1:
        return
    chunks = list(tensor.tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(2 * (world - 1)):
        send_index = (rank - step) % world
        recv_index = (rank - step - 1) % world
        incoming = torch.empty_like(chunks[recv_index])
        ops = [dist.P2POp(dist.isend, chunks[send_index].clone(), right), dist.P2POp(dist.irecv, incoming, left)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        if step < world - 1:
            chunks[recv_index] += incoming
        else:
            chunks[recv_index].copy_(incoming)
    dist.all_reduce(torch.zeros(1))
    dist_count._active[-1].collectives.pop("all_reduce")     # the one line
