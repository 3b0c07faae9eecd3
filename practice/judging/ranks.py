"""The cases that run on real gloo processes (through common.launcher): the ranks' clock, the
student's module inside a rank, and each rank's torch.distributed traffic, counted.

The rule for time: a case has L seconds (--case-limit-s). A rank waits at most L/2 in one collective,
so a rank that is a few seconds late (3 s under the default 10) still meets the others; a rank that
never comes makes the others time out at L/2, and the launcher then needs up to another L/2 (at
most 5 s) and a second to name it. So a case on ranks is stopped by the judge only at L + 3 s.

`counted(fn, *args)` runs the student's function with common.dist_count counting below the names
(ProcessGroup's methods) and returns plain numbers for the judge, with two checks on the counter
itself: the counting methods still in place when the student's code returned, and no operation
that reached a process group without passing through them (`unseen`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from common import dist_count
from common.launcher import launch

RANK_GRACE_S = 3.0         # beyond the case limit: the launcher's report of a rank that stopped responding
RANK_TIMEOUT_S = 5.0       # a rank's wait in one collective; the judge sets it from its case limit
SOLUTION: ModuleType | None = None   # the student's module, loaded in the solution's process before the fork


def collective_wait_s(limit_s: float) -> float:
    """How long a rank waits in one collective under a case limit of `limit_s`."""
    return max(1.0, limit_s / 2)


def solution_in_rank() -> ModuleType:
    """The student's module inside a rank (forked from the solution's process, which loaded it)."""
    if SOLUTION is None:
        raise RuntimeError("no solution loaded in this process")
    return SOLUTION


def run_ranks(worker: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """worker(rank, world_size, *args) on real gloo ranks; a rank that fails raises RankError."""
    return launch(worker, world_size, *args, timeout_s=RANK_TIMEOUT_S)


def counted(fn: Callable[..., Any], *args: Any) -> tuple[Any, dict[str, Any]]:
    """(fn(*args), this rank's traffic during the call, as plain data)."""
    with dist_count.counting() as counts:
        returned = fn(*args)
        intact = dist_count.installed()
    return returned, traffic(counts, intact)


def traffic(counts: dist_count.Counts, intact: bool) -> dict[str, Any]:
    return {"sent_bytes": counts.sent_bytes, "sends": counts.sends, "received_bytes": counts.received_bytes,
            "destinations": sorted(counts.destinations), "collectives": dict(counts.collectives),
            "unseen": counts.unseen, "intact": intact}


HIDDEN_EXPECTED = "all of each rank's torch.distributed traffic seen by the judge's counter"
HINT_HIDDEN = ("the judge counts at ProcessGroup's methods: call torch.distributed's functions, and leave "
               "ProcessGroup, common.dist_count and torch.ops' functional collectives alone")


def hidden_traffic(rank: int, seen: dict[str, Any]) -> str | None:
    """Why the judge cannot trust a rank's counts, in a few words (None when it can)."""
    if not seen["intact"]:
        return f"rank {rank}: the counter was not in place when its code returned"
    if seen["unseen"]:
        return f"rank {rank}: {seen['unseen']} operation(s) on a process group that the counter did not see"
    return None


def check_seen(data: list[dict[str, Any]], *blocks: str) -> None:
    """Fail when some rank's counts cannot be trusted (`blocks`: where in each rank's data they are)."""
    from judging.sandbox import Fail

    for rank, res in enumerate(data):
        for block in blocks:
            hidden = res.get(block) and hidden_traffic(rank, res[block])
            if hidden:
                raise Fail(HIDDEN_EXPECTED, hidden, HINT_HIDDEN)
