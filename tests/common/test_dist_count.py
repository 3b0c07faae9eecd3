"""common.dist_count: what a rank does through torch.distributed, counted on real gloo ranks however
the calls are spelled, traffic that went around the counter noticed, and ProcessGroup put back."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import ProcessGroup
from torch.distributed import P2POp, all_reduce, batch_isend_irecv, irecv, isend

from common import dist_count
from common.dist_count import counting
from common.launch import launch


def _spellings(rank: int, world: int) -> dict:
    before = {m: ProcessGroup.__dict__[m] for m in dist_count.WRAPPED}
    peer = 1 - rank
    with counting() as counts:
        dist.all_reduce(torch.ones(10, dtype=torch.float32))
        all_reduce(torch.ones(6, dtype=torch.bfloat16))                  # imported by name
        if rank == 0:
            dist.send(torch.zeros(3, dtype=torch.float64), dst=1)        # send calls isend inside: once
            isend(torch.zeros(2), peer).wait()
        else:
            dist.recv(torch.empty(3, dtype=torch.float64), src=0)
            irecv(torch.empty(2), peer).wait()
        ops = [P2POp(isend, torch.zeros(5), peer), P2POp(irecv, torch.empty(5), peer)]
        for work in batch_isend_irecv(ops):                              # P2POp with imported names
            work.wait()
        c10d.broadcast(torch.zeros(4), src=0)
        inside = dist_count.installed()
    restored = all(ProcessGroup.__dict__[m] is before[m] for m in before) and not dist_count.installed()
    return {"tensors": counts.tensors, "sent": counts.sent_bytes, "sends": counts.sends,
            "received": counts.received_bytes, "receives": counts.receives, "to": sorted(counts.destinations),
            "calls": counts.collective_calls(),
            "unseen": counts.unseen, "inside": inside, "restored": restored, "same": dist.isend is c10d.isend}


def test_counting_sees_every_spelling_and_puts_everything_back() -> None:
    r0, r1 = launch(_spellings, 2)
    for r in (r0, r1):
        assert r["tensors"] == [("all_reduce", "float32", 40), ("all_reduce", "bfloat16", 12),
                                ("broadcast", "float32", 16)]
        assert r["calls"] == 3 and r["unseen"] == 0 and r["inside"] and r["restored"] and r["same"]
    assert (r0["sent"], r0["sends"], r0["to"], r0["received"]) == (24 + 8 + 20, 3, [1], 20)
    assert (r1["sent"], r1["sends"], r1["to"], r1["received"]) == (20, 1, [0], 24 + 8 + 20)
    assert (r0["receives"], r1["receives"]) == (1, 3)        # irecv in the batch; recv, irecv and the batch's


def _hidden(rank: int, world: int) -> dict:
    import torch.distributed._functional_collectives as functional

    out = {}
    with counting() as counts:
        functional.wait_tensor(functional.all_reduce(torch.ones(4), "sum", dist.group.WORLD))
    out["functional"] = (counts.collective_calls(), counts.unseen)
    with counting() as counts:
        mine = ProcessGroup.__dict__["allreduce"]
        ProcessGroup.allreduce = dist_count._ORIGINALS["allreduce"]     # torch's own method, put back by hand
        dist.all_reduce(torch.ones(4))
        out["replaced"] = not dist_count.installed()
        ProcessGroup.allreduce = mine                                   # ... and the counting one again
        out["reinstalled"] = dist_count.installed()
    out["swapped"] = (counts.collective_calls(), counts.unseen)
    return out


def test_traffic_around_the_counter_is_noticed() -> None:
    for r in launch(_hidden, 2):
        assert r["functional"] == (0, 1)
        assert r["replaced"] and r["reinstalled"] and r["swapped"] == (0, 1)
