"""A failure a script stages on purpose, and the check that the run failed that way and no other.

    seconds, report = skipped_collective(worker, 4, skippers=[1, 2, 3], waiters=[0], timeout_s=1.0,
                                         staged="Part 4: only rank 0 calls all_reduce")

The lesson of a skipped collective is the launcher's report: the rank that skipped is named for
finishing its work while the others waited, until the timeout, in a collective it never called.
A run can fail in other ways while the lesson runs (a rank killed or stopped, a rank that raised);
printing that report as the lesson's result, and its claim as agreeing, would hide a real fault.
So the report is read back (who is blamed, who waited, how long) and anything else ends the script
as the failure it is (RunFailure: exit status 1, the real report in the line).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from common.error_types import RunFailure
from common.launch.launcher import launch_expecting_failure
from common.launch.rank_failure import SKIPPED, RankError

# The most ranks a staged skip runs on. The lesson needs a few; with many more on 2 cores, ranks
# that finished their work may not all report back before the launcher, after the timeout, asks who
# is where, and it then names a busy one as hung (64 ranks here: now and then).
MAX_STAGED_RANKS = 16


def skipped_collective(worker: Callable[..., Any], world_size: int, *, skippers: Iterable[int],
                       waiters: Iterable[int], timeout_s: float, staged: str,
                       **kwargs: Any) -> tuple[float, RankError | None]:
    """Run a worker in which `skippers` skip a collective that `waiters` call; return the seconds
    and the launcher's report, if it is the staged one. None: every rank got through (the
    collective did not hang, which the script reports as its finding). Any other failure, or the
    staged report before the waiters could have timed out, raises RunFailure naming it."""
    seconds, report = launch_expecting_failure(worker, world_size, timeout_s=timeout_s, **kwargs)
    if report is None:
        return seconds, None
    blamed, waiting = _read(report)
    if blamed != set(skippers) or waiting != set(waiters):
        raise RunFailure(f"{staged}, but the run failed otherwise: {report}")
    if seconds < timeout_s:  # the waiters left before their timeout: something else ended the wait
        raise RunFailure(f"{staged}, but the waiting ended after {seconds:.2f} s, before the {timeout_s:g} s "
                         f"timeout; the launcher reported: {report}")
    return seconds, report


def _read(report: RankError) -> tuple[set[int], set[int]]:
    """(ranks blamed for skipping, ranks that waited) in a skipped-collective report, from the
    report's fields, not its words; empty sets for any other report."""
    if report.kind != SKIPPED:
        return set(), set()
    return {report.rank, *report.also}, set(report.peers)
