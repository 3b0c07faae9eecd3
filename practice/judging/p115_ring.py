"""Problem 115's cases: a ring all-reduce written with send/recv, on real gloo ranks.

Each rank's torch.distributed traffic is counted below the names (judging.ranks.counted): the
bytes it sends, to whom, and any collective it calls, however the calls are spelled. The judge
compares the result with the sum it computes itself from every rank's data, and the bytes with
common.costmodel.collectives's 2(K − 1)N/K per rank (the ring all-reduce's definition). A wrong sum's hint
says what differs: buffers received into that do not match the messages sent (a dtype or a size:
one quick case is float32), or the chunk indices.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from common.costmodel.collectives import algorithm
from judging.engine import Case
from judging.messages import kind, show
from judging.ranks import check_seen, counted, recorded_calls, run_ranks, solution_in_rank
from judging.sandbox import Fail, function

FUNCTIONS = ("ring_allreduce",)
HINT_SUM = "the README: the SUM over the ranks, as dist.all_reduce's default (op=SUM): no division"
HINT_RESULT = (
    "README hint 2: in step s rank r sends chunk (r − s) mod K; reduce-scatter adds, all-gather copies"
)
HINT_IN_PLACE = "the README: sum INTO the tensor passed in (chunks from tensor_split are views of it)"
HINT_BUFFERS = ("README hint 2: receive into a buffer like the chunk that is sent (torch.empty_like(chunk)): "
                "same dtype, same number of elements")
HINT_P2P = "README hint 1: only send/recv (or isend/irecv, batch_isend_irecv), no collective"
HINT_NEIGHBOUR = "README hint 2: every message goes to the same neighbour: (r + 1) mod K in both phases"
HINT_BYTES = "README hint 3: 2(K − 1) messages per rank, each ONE chunk (about N/K elements)"
HINT_DEADLOCK = ("README hint 1: ranks waited for each other. Check the peers: each rank sends to "
                 "(r + 1) % K and receives from (r − 1) % K. A send also waits for its receive on gloo, "
                 "whatever the size: post both at once (batch_isend_irecv) or alternate by parity")
HINT_CHUNKS = ("README hint 2: tensor.tensor_split(K) always gives K chunks; tensor.chunk(K) may give fewer "
               "(N = 5, K = 4: 3)")
ERROR_HINTS = [("IndexError", HINT_CHUNKS), ("Received data size doesn't match", HINT_BUFFERS)]
BARRIERS = ("barrier", "monitored_barrier")     # collectives that move no data: allowed beside the ring


def rank_data(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Integers (exact in any summation order), different on every rank and at every position."""
    return (torch.arange(n, dtype=torch.float64) * (rank + 1) + 100 * rank).to(dtype)


def ring_worker(rank: int, world: int, n: int, dtype_name: str) -> dict[str, Any]:
    tensor = rank_data(rank, n, getattr(torch, dtype_name))
    ring = function(solution_in_rank(), "ring_allreduce")
    returned, seen = counted(ring, tensor)
    return {"result": tensor, "returned": returned, "traffic": seen}


def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(ring_worker, inputs["world_size"], inputs["numbers"], inputs["dtype"])


def _check_traffic(data: list[Any], world: int) -> None:
    check_seen(data, "traffic")
    for rank, res in enumerate(data):
        used = {n: c for n, c in res["traffic"]["collectives"].items() if n not in BARRIERS}
        if used:
            calls = ", ".join(f"{name} ×{count}" for name, count in used.items())
            raise Fail("send/recv only", f"rank {rank} called {calls}", HINT_P2P)
        # A send, a receive or a barrier is one operation of its group; gloo's monitored_barrier runs
        # from none (one rank) to 2(K − 1) (rank 0 hears from and answers every other rank). More
        # operations than that are calls the counter's records do not show (they live in the
        # solution's process).
        ran, calls = res["traffic"]["ran"], recorded_calls(res["traffic"])
        monitored = res["traffic"]["collectives"].get("monitored_barrier", 0)
        if ran is not None and not calls - monitored <= ran <= calls + monitored * (2 * world - 3):
            raise Fail("send/recv only", f"rank {rank}'s group ran {ran} operations; the counter recorded "
                                         f"{calls} sends, receives, barriers", HINT_P2P)


def _check_sum(data: list[Any], expected: torch.Tensor) -> None:
    received = sum(res["traffic"]["received_bytes"] for res in data)
    sent = sum(res["traffic"]["sent_bytes"] for res in data)
    for rank, res in enumerate(data):
        result = res["result"]
        if isinstance(result,
                      torch.Tensor) and result.dtype == expected.dtype and torch.equal(result, expected):
            continue
        returned = res["returned"]
        if isinstance(returned, torch.Tensor) and returned.shape == expected.shape and torch.equal(
                returned.to(expected.dtype), expected):
            raise Fail("the sum in the tensor passed in (in place, like dist.all_reduce)",
                       "the sum returned, the tensor itself not changed", HINT_IN_PLACE)
        got = show(result.tolist()) if isinstance(result, torch.Tensor) else kind(result)
        # what differs chooses the hint: buffers of another size than the messages, the mean, or the indices
        buffers, world = received != sent, len(data)
        mean = isinstance(result, torch.Tensor) and result.shape == expected.shape and torch.allclose(
            result.double() * world, expected.double())
        raise Fail(f"rank {rank}, the sum over the ranks: {show(expected.tolist())}",
                   f"rank {rank}: {got}" + (f" (the ranks received into {received:,} B of buffers for "
                                            f"{sent:,} B sent)" if buffers else f": the sum ÷ {world}"
                                            if mean else ""),
                   HINT_BUFFERS if buffers else HINT_SUM if mean else HINT_RESULT)


def check(inputs: dict[str, Any], data: list[Any]) -> None:
    world, n, dtype = inputs["world_size"], inputs["numbers"], getattr(torch, inputs["dtype"])
    _check_traffic(data, world)
    _check_sum(data, sum(rank_data(r, n, dtype) for r in range(world)))
    to = [res["traffic"]["destinations"] for res in data]
    right, left = [[(r + 1) % world] for r in range(world)], [[(r - 1) % world] for r in range(world)]
    if world > 1 and to not in (right, left):
        raise Fail("every rank sends to one neighbour only (all to the right, or all to the left)",
                   "destinations " + "; ".join(f"rank {r} → {d}" for r, d in enumerate(to)), HINT_NEIGHBOUR)
    elem = torch.tensor([], dtype=dtype).element_size()
    ring = algorithm("ring all-reduce")
    per_rank = ring.busiest_bytes(world, n * elem)     # 2(K − 1)N/K, N in bytes
    sent = [res["traffic"]["sent_bytes"] for res in data]
    chunk_slack = ring.rounds(world) * elem   # a chunk a round, each within one element of N/K
    if sum(sent) != ring.total_bytes(world, n * elem) or any(
            abs(s - per_rank) >= max(chunk_slack, 1) and world > 1 for s in sent):
        raise Fail(f"about 2(K − 1)N/K = {per_rank:,.0f} B per rank, {world * per_rank:,.0f} B in all",
                   "sent " + ", ".join(f"{s:,}" for s in sent) + " B", HINT_BYTES)


def ring(name: str, world: int, n: int, dtype: str = "float64", quick: bool = True) -> Case:
    return Case(name, {"world_size": world, "numbers": n, "dtype": dtype}, collect, check, HINT_RESULT, quick,
                ranks=True)


CASES = [
    ring("2 ranks, 8 numbers", 2, 8),
    ring("3 ranks, 12 numbers (K divides N)", 3, 12),
    ring("4 ranks, 16 numbers", 4, 16),
    ring("3 ranks, 10 numbers (chunks 4, 3, 3)", 3, 10),
    ring("4 ranks, 10 float32 numbers (chunks 3, 3, 2, 2)", 4, 10, "float32"),
    ring("4 ranks, 5 numbers (chunks 2, 1, 1, 1; tensor.chunk(4) gives 3)", 4, 5),
    ring("3 ranks, 1,000 float32 numbers", 3, 1000, "float32", quick=False),
    ring("1 rank: nothing to send, the tensor unchanged", 1, 6),
]
