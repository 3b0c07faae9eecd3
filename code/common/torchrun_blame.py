"""Who is to blame when a rank that torchrun started fails (`common.torchrun_rank`): decided by one
rank from what every rank wrote to torchrun's store, each rank's `Failure` (what it was doing,
never the words of its error) and its heartbeat (a counter, its phase, where its main thread is).

  - a rank's own failure (its code raised) first;
  - else a rank whose heartbeat stopped (stopped by a signal, or its machine gone);
  - else a rank at work outside torch.distributed while the others failed waiting for it;
  - else the lowest rank whose wait failed.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import time
from typing import Any

from common.parent_side import is_stopped
from common.rank_side import HUNG, TORCH, Failure, RankError, short


class Diagnosis:
    """Who is to blame, from what the ranks wrote to the store. `state` is the deciding rank
    (common.torchrun_rank's: its reads of the store, rank, world and timeout); a heartbeat unchanged
    for `stale_s` seconds is a rank that is not running."""

    def __init__(self, state: Any, stale_s: float) -> None:
        self.state, self.stale_s = state, stale_s
        self.errors = self._all("error")
        self.beats = self._all("beat")

    def _all(self, kind: str) -> dict[int, Any]:
        found = {r: self.state._read(f"{kind}/{r}") for r in range(self.state.world)}
        return {r: v for r, v in found.items() if v is not None}

    def _own_error(self) -> RankError | None:
        """A rank's own failure (its code raised), not torch's (a timeout or a lost peer: echoes)."""
        own = [r for r, failure in sorted(self.errors.items()) if failure.cause]
        if not own:
            return None
        failure = self.errors[own[0]]
        return RankError(own[0], short(failure.what), failure.details, kind=failure.kind)

    def verdict(self) -> RankError:
        if (own := self._own_error()) is not None:
            return own
        time.sleep(self.stale_s)  # who is still beating?
        before, self.beats = self.beats, self._all("beat")
        self.errors = self._all("error") or self.errors
        if (own := self._own_error()) is not None:
            return own
        peers = tuple(sorted(self.errors))
        waiters = ", ".join(f"rank {r}" for r in peers) or "the others"
        waited = f"{waiters} timed out after {self.state.timeout_s:g} s waiting for it"
        left = self._all("left")  # ranks that left the group (and stopped beating) at exit
        for rank in range(self.state.world):
            if rank == self.state.rank or rank in left:
                continue  # this process is running: its own helper is what is busy deciding
            if rank not in self.beats or self.beats[rank][0] == before.get(rank, (None,))[0]:
                _, phase, _, _, host, pid = self.beats.get(rank, (None, "starting", None, None, None, None))
                why = "it is stopped: SIGSTOP or Ctrl-Z?" if _end_if_stopped_here(host, pid) else \
                    f"no heartbeat for {self.stale_s:g} s: stopped, or its machine is gone"
                return RankError(rank, f"stopped responding while {phase} ({why}); {waited}",
                                 kind=HUNG, peers=peers)
        for rank, (_, phase, in_collective, location, _, _) in sorted(self.beats.items()):
            if rank not in self.errors and not in_collective:
                return RankError(rank, f"stopped responding while {phase} (at {location}); {waited}",
                                 kind=HUNG, peers=peers)
        rank = min(self.errors) if self.errors else self.state.rank
        failure = self.errors.get(rank, Failure(TORCH, "failed: unknown error"))
        return RankError(rank, f"{short(failure.what)} (timeout {self.state.timeout_s:g} s)", failure.details,
                         kind=failure.kind, peers=tuple(r for r in peers if r != rank))


# Stopped ranks to end once the verdict is printed (end_stopped_ranks, called on the way out).
_STOPPED: list[int] = []


def _end_if_stopped_here(host: str | None, pid: int | None) -> bool:
    """A rank named as stopped, on this machine: end it once the line is out (and say it was
    stopped). torchrun would send it SIGTERM, which a stopped process does not take, and wait 30 s
    before its SIGKILL. Not now: torchrun notices a rank that died within 0.1 s and SIGTERMs the
    others, rank 0 too, which must print the verdict first."""
    if host != socket.gethostname() or pid is None or not is_stopped(pid):
        return False
    if not _STOPPED:   # every way out: run_main's exit (atexit) or _exit_with's os._exit (it calls it)
        atexit.register(end_stopped_ranks)
    _STOPPED.append(pid)
    return True


def end_stopped_ranks() -> None:
    """SIGKILL for the ranks the verdict named as stopped here (after it was printed)."""
    while _STOPPED:
        try:
            os.kill(_STOPPED.pop(), signal.SIGKILL)
        except OSError:
            pass
