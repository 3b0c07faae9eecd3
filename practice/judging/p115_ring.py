"""Problem 115's cases: a ring all-reduce written with send/recv, on real gloo ranks.

Each rank's torch.distributed calls are counted (judging.ranks.counting): the bytes it sends, to
whom, and any collective it calls. The result is compared with dist.all_reduce on a copy of the
same data (called before counting starts), and the bytes with costmodel's 2(K − 1)N/K per rank.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from common.costmodel import ring_allreduce_bytes_per_device
from common.dist_count import counting
from judging.engine import Case, Fail, function, show
from judging.ranks import run_ranks, solution_in_rank

FUNCTIONS = ("ring_allreduce",)
HINT_RESULT = "README hint 2: in step s rank r sends chunk (r − s) mod K; reduce-scatter adds, all-gather copies"
HINT_P2P = "README hint 1: only send/recv (or isend/irecv, batch_isend_irecv), no collective"
HINT_BYTES = "README hint 3: 2(K − 1) messages per rank, each ONE chunk (about N/K elements)"


def rank_data(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Integers (exact in any summation order), different on every rank and at every position."""
    return (torch.arange(n, dtype=torch.float64) * (rank + 1) + 100 * rank).to(dtype)


def ring_worker(rank: int, world: int, path: str, n: int, dtype: torch.dtype) -> dict[str, Any]:
    solution = solution_in_rank(path)
    expected = rank_data(rank, n, dtype)
    dist.all_reduce(expected)                 # the reference, before counting starts
    tensor = rank_data(rank, n, dtype)
    ring = function(solution, "ring_allreduce")
    with counting() as counts:
        returned = ring(tensor)
    return {"result": tensor, "expected": expected, "returned": returned, "sent": counts.sent_bytes,
            "sends": counts.sends, "to": sorted(d for d in counts.destinations if d is not None),
            "collectives": dict(counts.collectives)}


def _check(world: int, n: int, dtype: torch.dtype = torch.float64) -> Any:
    def run(solution: ModuleType) -> None:
        results = run_ranks(ring_worker, world, solution.__file__, n, dtype)
        elem = torch.tensor([], dtype=dtype).element_size()
        for rank, res in enumerate(results):
            if res["collectives"]:
                used = ", ".join(f"dist.{name} ×{count}" for name, count in res["collectives"].items())
                raise Fail("send/recv only", f"rank {rank} called {used}", HINT_P2P)
        for rank, res in enumerate(results):
            if not torch.equal(res["result"], res["expected"]):
                returned = res["returned"]
                if isinstance(returned, torch.Tensor) and torch.equal(returned, res["expected"]):
                    raise Fail("the sum in the tensor passed in (in place, like dist.all_reduce)",
                               "the sum returned, the tensor itself not changed", HINT_RESULT)
                raise Fail(f"rank {rank}: {show(res['expected'].tolist(), 60)} (dist.all_reduce)",
                           show(res["result"].tolist(), 60), HINT_RESULT)
        right = [[(r + 1) % world] for r in range(world)]
        left = [[(r - 1) % world] for r in range(world)]
        to = [res["to"] for res in results]
        if world > 1 and to not in (right, left):
            raise Fail("every rank sends to one neighbour only (all to the right, or all to the left)",
                       "destinations " + "; ".join(f"rank {r} → {d}" for r, d in enumerate(to)), HINT_BYTES)
        per_rank = ring_allreduce_bytes_per_device(world, n * elem)     # 2(K − 1)N/K, N in bytes
        sent = [res["sent"] for res in results]
        chunk_slack = 2 * (world - 1) * elem   # chunks differ from N/K by less than one element each
        if sum(sent) != round(world * per_rank) or any(abs(s - per_rank) >= max(chunk_slack, 1) and world > 1
                                                       for s in sent):
            raise Fail(f"about 2(K − 1)N/K = {per_rank:,.0f} B per rank, {world * per_rank:,.0f} B in all",
                       "sent " + ", ".join(f"{s:,}" for s in sent) + " B", HINT_BYTES)
    return run


CASES = [
    Case("2 ranks, 8 numbers", _check(2, 8), HINT_RESULT),
    Case("3 ranks, 12 numbers (K divides N)", _check(3, 12), HINT_RESULT),
    Case("4 ranks, 16 numbers", _check(4, 16), HINT_RESULT),
    Case("3 ranks, 10 numbers (chunks 4, 3, 3)", _check(3, 10), HINT_RESULT),
    Case("4 ranks, 10 numbers (chunks 3, 3, 2, 2)", _check(4, 10), HINT_RESULT),
    Case("4 ranks, 5 numbers (chunks 2, 1, 1, 1)", _check(4, 5), HINT_RESULT, quick=False),
    Case("3 ranks, 1,000 float32 numbers", _check(3, 1000, torch.float32), HINT_RESULT, quick=False),
    Case("1 rank: nothing to send, the tensor unchanged", _check(1, 6), HINT_RESULT),
]
