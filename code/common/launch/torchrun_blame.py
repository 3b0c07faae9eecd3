"""Who is to blame when a rank that torchrun started fails (`common.launch.torchrun_rank`): decided by one
rank from what every rank wrote to torchrun's store, each rank's `Failure` (what it was doing, and
whether torch lost its connection to a peer) and its heartbeat (a counter, its phase, where its main
thread is, its node and process).

  - a rank's own failure (its code raised) first;
  - else a rank whose heartbeat stopped without a word: no failure of its own written, not left
    the group (killed, stopped by a signal, or its machine gone). A rank that wrote that its
    connection closed, then ended (its agent stops every rank of a node once one died there), is
    one of those that lost the culprit, never the culprit; when several went silent and nothing
    tells them apart, "a rank on node N" is all that is known, and all that is said;
  - else a rank at work outside torch.distributed while the others failed waiting for it;
  - else the lowest rank whose wait failed.

Those that waited are named with what they saw: a lost connection, or a timeout (the timeout only
then: a connection that closed after one second is not a five-second wait).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import time
from typing import Any

from common.launch.parent_side import is_stopped
from common.launch.rank_failure import HUNG, KILLED, LOST, TORCH, Failure, RankError, rank_names, short


class Diagnosis:
    """Who is to blame, from what the ranks wrote to the store. `state` is the deciding rank
    (common.launch.torchrun_rank's: its reads of the store, rank, world and timeout); a heartbeat unchanged
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
        # Ranks that said how they ended: left the group at exit, or ended by a signal (SIGTERM from
        # their agent, once a rank of their node died) or after their failure (written in `errors`).
        spoke = set(self._all("left")) | set(self._all("ended")) | set(self.errors)
        wordless = [r for r in range(self.state.world)
                    if r != self.state.rank and r not in spoke   # this process runs: its helper decides
                    and (r not in self.beats or self.beats[r][0] == before.get(r, (None,))[0])]
        if wordless:
            return self._silent(wordless)
        for rank, beat in sorted(self.beats.items()):
            if rank not in self.errors and not beat[2]:
                return RankError(rank, f"stopped responding while {beat[1]} (at {beat[3]}); "
                                       f"{self._waiters(rank)}", kind=HUNG, peers=self._peers(rank))
        # Only waits that failed: a timeout before a lost connection (the echo of one that may be named)
        rank = min(self.errors, key=lambda r: (self.errors[r].kind == LOST, r), default=self.state.rank)
        failure = self.errors.get(rank, Failure(TORCH, "failed: unknown error"))
        text = short(failure.what)
        if failure.kind == TORCH and failure.in_group_s >= self.state.timeout_s:
            text += f" (timeout {self.state.timeout_s:g} s)"
        return RankError(rank, text, failure.details, kind=failure.kind, peers=self._peers(rank))

    def _silent(self, ranks: list[int]) -> RankError:
        """The culprit among the ranks whose heartbeat stopped without a word: the only one, else one
        stopped here, else "a rank on node N" when they are all of one node, else the lowest."""
        described = {r: self._why_silent(r) for r in ranks}
        stopped = [r for r in ranks if described[r][1] == "stopped"]
        rank = (stopped or ranks)[0]
        nodes = {self._node(r) for r in ranks}
        if len(ranks) > 1 and not stopped and len(nodes) == 1 and None not in nodes:
            return RankError(rank, f"went silent ({rank_names(ranks)}: {described[rank][0]}); "
                                   f"{self._waiters(*ranks)}", kind=HUNG, peers=self._peers(*ranks),
                             also=tuple(ranks[1:]), who=f"a rank on node {nodes.pop()}")
        why, verdict = described[rank]
        also = f"; so did {rank_names(r for r in ranks if r != rank)}" if len(ranks) > 1 else ""
        phase = self.beats.get(rank, (None, "starting"))[1]
        doing = "died" if verdict == "gone" else "stopped responding"
        return RankError(rank, f"{doing} while {phase} ({why}{also}); {self._waiters(*ranks)}",
                         kind=KILLED if verdict == "gone" else HUNG, peers=self._peers(*ranks),
                         who=f"rank {rank}{self._on_node(rank)}")

    def _why_silent(self, rank: int) -> tuple[str, str | None]:
        """Why `rank`'s heartbeat stopped, in words, and "stopped" or "gone" where this machine can
        tell (the rank's process is here), else None."""
        beat = self.beats.get(rank)
        host, pid = (beat[4], beat[5]) if beat else (None, None)
        if _end_if_stopped_here(host, pid):
            return "it is stopped: SIGSTOP or Ctrl-Z?", "stopped"
        if host == socket.gethostname() and pid is not None and _gone(pid):
            return ("its process ended without a word: killed by a signal? SIGKILL is what the kernel's "
                    "out-of-memory killer sends"), "gone"
        if beat is None:
            return f"no heartbeat within {self.stale_s:g} s", None
        return f"no heartbeat for {self.stale_s:g} s: killed, stopped, or its machine is gone", None

    def _node(self, rank: int) -> int | None:
        beat = self.beats.get(rank)
        return beat[6] if beat is not None and len(beat) > 6 else None

    def _on_node(self, rank: int) -> str:
        """" on node N" when the ranks are on more than one node."""
        nodes = {self._node(r) for r in self.beats}
        return f" on node {self._node(rank)}" if len(nodes) > 1 and self._node(rank) is not None else ""

    def _peers(self, *culprits: int) -> tuple[int, ...]:
        return tuple(sorted(r for r in self.errors if r not in culprits))

    def _waiters(self, *culprits: int) -> str:
        """What the ranks that failed because of `culprits` saw: a lost connection, or a timeout."""
        peers = self._peers(*culprits)
        lost = [r for r in peers if self.errors[r].kind == LOST]
        timed_out = [r for r in peers if self.errors[r].kind != LOST]
        said = []
        if lost:
            said.append(f"{rank_names(lost)} lost {'their' if len(lost) > 1 else 'its'} connection to it")
        if timed_out:
            waited = all(self.errors[r].in_group_s >= self.state.timeout_s for r in timed_out)
            how = f"timed out after {self.state.timeout_s:g} s" if waited else "failed"
            said.append(f"{rank_names(timed_out)} {how} waiting for it")
        return "; ".join(said) or f"the others timed out after {self.state.timeout_s:g} s waiting for it"


def _gone(pid: int) -> bool:
    """Linux: process `pid` of this machine has ended (no such process, or a zombie); elsewhere we
    cannot tell."""
    if not os.path.isdir("/proc"):
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


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
    if pid not in _STOPPED:
        _STOPPED.append(pid)
    return True


def end_stopped_ranks() -> None:
    """SIGKILL for the ranks the verdict named as stopped here (after it was printed)."""
    while _STOPPED:
        try:
            os.kill(_STOPPED.pop(), signal.SIGKILL)
        except OSError:
            pass
