"""The cases that run on real gloo processes (through common.launch): the ranks' clock, the
student's module inside a rank, and each rank's torch.distributed traffic, counted.

The rule for time: a case has L seconds (--case-limit-s). A rank waits at most L/2 in one collective,
so a rank that is a few seconds late (3 s under the default 10) still meets the others; a rank that
never comes makes the others time out at L/2, and the launcher then needs up to another L/2 (at
most 5 s) and a second to name it. So a case on ranks is stopped by the judge only at L + 3 s.

`counted(fn, *args)` (or `with watched() as seen:`) runs the student's code with common.dist_count
counting below the names (ProcessGroup's methods) and returns plain numbers for the judge, with
checks on the counter itself: the counting methods still in place when the student's code returned,
no operation that reached a process group without passing through them (`unseen`), and "ran": how
many operations the rank's groups ran in the block, read here from the groups themselves. The
counter's records live in the solution's process and one line can edit them; "ran" is what a
verdict that must not trust them reads (nothing inside no_sync; a ring's operations are its sends
and receives).
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, Callable, Iterator

import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import ProcessGroup

from common import dist_count
from common.launch import launch

RANK_GRACE_S = 3.0         # beyond the case limit: the launcher's report of a rank that stopped responding
RANK_TIMEOUT_S = 5.0       # a rank's wait in one collective; the judge sets it from its case limit
SOLUTION: ModuleType | None = None   # the student's module, loaded in the solution's process before the fork
# Taken when the judge imports this module, before any solution runs: code that edits
# common.dist_count in its process (the counter's records or its functions) leaves these alone.
_SEQUENCE = getattr(ProcessGroup, "_get_sequence_number_for_group", None)
_GROUPS = c10d._world


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


def _group_operations() -> dict[Any, int] | None:
    """How many operations each live process group of this rank has run (its sequence number);
    None where a backend keeps no such number."""
    if _SEQUENCE is None:
        return None
    try:
        return {group: int(_SEQUENCE(group)) for group in list(_GROUPS.pg_map)}
    except (AttributeError, RuntimeError, TypeError):
        return None


def _ran(before: dict[Any, int] | None, after: dict[Any, int] | None) -> int | None:
    if before is None or after is None:
        return None
    return sum(n - before.get(group, 0) for group, n in after.items())


@contextlib.contextmanager
def watched() -> Iterator[dict[str, Any]]:
    """This rank's traffic in the block, as plain data: the dict it gives is filled in when the
    block ends (what the counter recorded, and "ran", read from the groups here)."""
    seen: dict[str, Any] = {}
    before = _group_operations()
    with dist_count.counting() as counts:
        yield seen
        intact = dist_count.installed()
    seen.update(traffic(counts, intact), ran=_ran(before, _group_operations()))


def counted(fn: Callable[..., Any], *args: Any) -> tuple[Any, dict[str, Any]]:
    """(fn(*args), this rank's traffic during the call, as plain data)."""
    with watched() as seen:
        returned = fn(*args)
    return returned, seen


def traffic(counts: dist_count.Counts, intact: bool) -> dict[str, Any]:
    return {"sent_bytes": counts.sent_bytes, "sends": counts.sends, "received_bytes": counts.received_bytes,
            "receives": counts.receives, "destinations": sorted(counts.destinations),
            "collectives": dict(counts.collectives), "unseen": counts.unseen, "intact": intact}


def recorded_calls(seen: dict[str, Any]) -> int:
    """The calls the counter recorded: sends, receives and collectives."""
    return seen["sends"] + seen["receives"] + sum(seen["collectives"].values())


HIDDEN_EXPECTED = "all of each rank's torch.distributed traffic seen by the judge's counter"
HINT_HIDDEN = ("the judge counts at ProcessGroup's methods: call torch.distributed's functions, and leave "
               "ProcessGroup, common.dist_count and torch.ops' functional collectives alone")


def hidden_traffic(rank: int, seen: dict[str, Any]) -> str | None:
    """Why the judge cannot trust a rank's counts, in a few words (None when it can)."""
    if not seen["intact"]:
        return f"rank {rank}: the counter was not in place when its code returned"
    if seen["unseen"]:
        return f"rank {rank}: {seen['unseen']} operation(s) on a process group that the counter did not see"
    if seen.get("ran") and not recorded_calls(seen):      # every call runs at least one operation
        return f"rank {rank}: its process groups ran {seen['ran']} operation(s), the counter recorded no call"
    return None


def check_seen(data: list[dict[str, Any]], *blocks: str) -> None:
    """Fail when some rank's counts cannot be trusted (`blocks`: where in each rank's data they are)."""
    from judging.sandbox import Fail

    for rank, res in enumerate(data):
        for block in blocks:
            hidden = res.get(block) and hidden_traffic(rank, res[block])
            if hidden:
                raise Fail(HIDDEN_EXPECTED, hidden, HINT_HIDDEN)
