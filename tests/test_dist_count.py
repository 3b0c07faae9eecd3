"""common.dist_count: what a rank does through torch.distributed, counted on real gloo ranks, and
every wrapped name put back afterwards."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from common.dist_count import COLLECTIVES, POINT_TO_POINT, counting
from common.launcher import launch


def _rank(rank: int, world: int) -> dict:
    before = {n: (getattr(dist, n), getattr(c10d, n)) for n in POINT_TO_POINT + COLLECTIVES}
    with counting() as counts:
        dist.all_reduce(torch.ones(10, dtype=torch.float32))
        dist.all_reduce(torch.ones(6, dtype=torch.bfloat16))
        if rank == 0:
            dist.send(torch.zeros(3, dtype=torch.float64), dst=1)
        else:
            dist.recv(torch.empty(3, dtype=torch.float64), src=0)
        c10d.broadcast(torch.zeros(4), src=0)           # through the other module's name too
    restored = all((getattr(dist, n), getattr(c10d, n)) == before[n] for n in before)
    return {"tensors": counts.tensors, "sent": counts.sent_bytes, "received": counts.received_bytes,
            "to": sorted(counts.destinations), "calls": counts.collective_calls(), "restored": restored}


def test_counting_sees_collectives_and_messages_and_puts_everything_back() -> None:
    r0, r1 = launch(_rank, 2)
    for r in (r0, r1):
        assert r["tensors"] == [("all_reduce", "float32", 40), ("all_reduce", "bfloat16", 12), ("broadcast", "float32", 16)]
        assert r["calls"] == 3 and r["restored"] is True
    assert (r0["sent"], r0["to"], r0["received"]) == (24, [1], 0)
    assert (r1["sent"], r1["to"], r1["received"]) == (0, [], 24)
