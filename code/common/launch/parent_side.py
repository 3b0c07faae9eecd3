"""The parent's side of `common.launch.launch`, what `common.launch.rank_side` is to each rank: it
reads what the ranks report, keeps the deadlines no rank can keep for itself, and names the rank to
blame when the run fails (see launcher's docstring for the promises).
"""

from __future__ import annotations

import pickle
import signal
import time
from multiprocessing import connection
from typing import Any

from common.launch.rank_failure import (
    ECHOES,
    EXITED,
    HUNG,
    KILLED,
    LOST,
    NOT_FINISHED,
    NOT_JOINED,
    SKIPPED,
    TORCH,
    Failure,
    RankError,
    rank_names,
    short,
)

_WHERE_WAIT_S = 1.0   # how long a silent rank has to say where it is before it counts as hung
_GRACE_S = 0.5        # after a first failure, time for the others' reports to arrive
_PHASES = {"started": "started", "joined": "joined", "done": "worker_done"}  # message -> set of ranks


class Collector:
    """The parent's side of a run: each rank's phase, results, failures, and who is to blame.

    Ranks report "started", "joined", "done", then their result or error. The parent keeps its own
    deadlines for the waits no rank reports: joining (a stopped rank is named once the others have
    waited `timeout_s`; a slow one once `start_s` has passed), and the end of a run (once a rank
    has its result, the others have `timeout_s` to deliver theirs). torch's timeouts end the waits
    in between, in collectives; then the silent ranks are asked where they are."""

    def __init__(self, children: list[Any], conns: list[Any], timeout_s: float,
                 start_s: float | None = None) -> None:
        self.children, self.conns, self.timeout_s = children, conns, timeout_s
        self.start_s = timeout_s if start_s is None else start_s
        self.results: dict[int, Any] = {}
        self.failures: dict[int, Failure] = {}           # rank -> what it reported (or its exit)
        self.where: dict[int, tuple[bool, str]] = {}      # rank -> (in torch.distributed, location)
        self.started: set[int] = set()                   # ranks that can answer "where"
        self.joined: set[int] = set()                     # ranks in the group
        self.worker_done: set[int] = set()                # ranks whose worker returned (now in teardown)
        self.stderr: dict[int, str] = {}                  # rank -> what it wrote to fd 2
        self.pending: set[int] = set()                    # ranks with neither result nor failure yet
        self.began = time.monotonic()
        self.first_result: tuple[float, int] | None = None  # (when, rank) the first result came
        self.next_look = self.began + timeout_s
        self.silent_before: set[int] = set()                # ranks that did not answer the last look

    def run(self) -> list[Any]:
        pending = self.pending = set(range(len(self.conns)))
        grace_until = None
        while pending and (grace_until is None or time.monotonic() < grace_until):
            self._poll(pending, 0.1 if self.failures else 0.25)
            if self.failures:
                # The others' reports say who failed first. After a timeout, ranks that began waiting
                # a little later get the time to time out too, so that the silent ones are the hung
                # ones (many ranks on a loaded machine answer "where" slowly); a stopped rank is
                # known at once, so when only stopped ranks are left there is nothing to wait for.
                timed_out = any(self._waited(f) for f in self.failures.values())
                grace = min(5.0, self.timeout_s) if timed_out else _GRACE_S
                grace_until = grace_until or time.monotonic() + grace
                if all(is_stopped(self.children[r].pid) for r in pending):
                    break
            elif pending:
                stall = self._watch(pending)
                if stall is not None:
                    raise stall
        if self.failures:
            raise self._blame(pending)
        return [self.results[r] for r in range(len(self.conns))]

    def _poll(self, ranks: set[int], timeout: float) -> None:
        """Receive what `ranks` (pending ones) send within `timeout`; a rank that ends leaves pending."""
        ranks = ranks & self.pending
        conns = {self.conns[r]: r for r in ranks}
        sentinels = {self.children[r].sentinel: r for r in ranks}
        for obj in connection.wait(list(conns) + list(sentinels), timeout=timeout):
            rank = conns.get(obj, sentinels.get(obj))
            if rank not in self.pending:
                continue
            if obj in conns or self.conns[rank].poll(0.2):
                self._receive(rank)
            else:
                self.pending.discard(rank)
                self.failures[rank] = _exit_failure(self.children[rank].exitcode)

    def _receive(self, rank: int) -> None:
        try:
            message = pickle.loads(self.conns[rank].recv_bytes())
        except (EOFError, OSError):
            message = ("error", _exit_failure(self.children[rank].exitcode))
        kind = message[0]
        if kind == "where":
            self.where[rank] = message[1]
        elif kind in _PHASES:
            getattr(self, _PHASES[kind]).add(rank)
        elif kind == "ok":
            self.pending.discard(rank)
            self.results[rank], self.stderr[rank] = pickle.loads(message[1]), message[2]
            self.first_result = self.first_result or (time.monotonic(), rank)
        else:
            self.pending.discard(rank)
            self.failures[rank] = message[1]

    def _watch(self, pending: set[int]) -> RankError | None:
        """The parent's deadlines, for a stall no rank reports (see the class docstring)."""
        now = time.monotonic()
        unjoined = sorted(pending - self.joined - self.worker_done)
        if unjoined and now >= self.began + self.start_s:
            return self._stalled(unjoined, f"did not join the group within {self.start_s:g} s", NOT_JOINED)
        if unjoined and now >= self.next_look:  # the others waited timeout_s: a stopped rank is named now
            self.next_look = now + 1.0
            # A spawned rank cannot answer while it imports torch: silence counts once it has
            # started, and twice in a row (a loaded machine may be slow to answer once).
            silent = {r for r in self._ask(unjoined) if r not in self.where}
            named = [r for r in sorted(silent) if is_stopped(self.children[r].pid)
                     or (r in self.started and r in self.silent_before)]
            self.silent_before = silent
            if named:
                stall = self._stalled(named, f"did not join the group within {now - self.began:.0f} s",
                                      NOT_JOINED, silent_only=True)
                self.silent_before -= set(self.where)   # those that answered start again from one
                return stall
        elif not unjoined and self.first_result and now >= self.first_result[0] + self.timeout_s:
            return self._stalled(sorted(pending), f"did not finish within {self.timeout_s:g} s after "
                                                  f"rank {self.first_result[1]} did", NOT_FINISHED)
        elif not unjoined and not self.first_result and now >= self.next_look:
            self.next_look = now + self.timeout_s  # every rank silent: no timeout will ever fire
            silent = [r for r in self._ask(sorted(pending)) if r not in self.where]
            if silent and len(silent) == len(pending):
                return self._stalled(silent, "stopped responding, and so did every other rank", HUNG)
        return None

    def _stalled(self, ranks: list[int], what: str, kind: str, silent_only: bool = False) -> RankError | None:
        """The error for the rank most likely to be stuck among `ranks`, asked where they are first;
        None when a rank reported a failure meanwhile (the failures then say who is to blame), or,
        with `silent_only` (named for their silence alone, before any deadline), when each answers
        now: a rank on a loaded machine can miss two looks and still be at work."""
        self._ask(ranks)
        ranks = [r for r in ranks if r in self.pending and not (
            silent_only and r in self.where and not is_stopped(self.children[r].pid))]
        if self.failures or not ranks:
            return None
        rank = min(ranks, key=lambda r: (self._stuck_order(r), r))
        if is_stopped(self.children[rank].pid) or (rank in self.started and rank not in self.where):
            why = self._silence(rank)
        elif rank not in self.started:
            why = "it has not started: a spawned rank imports torch first"
        else:
            in_collective, location = self.where[rank]
            why = f"it is {'in torch.distributed, ' if in_collective else ''}at {location}"
        return RankError(rank, f"{what} ({why})", kind=kind, peers=tuple(sorted(self.joined - {rank})))

    def _stuck_order(self, rank: int) -> int:
        """0 stopped, 1 silent, 2 at work outside torch.distributed, 3 not started, 4 waiting in it."""
        if is_stopped(self.children[rank].pid):
            return 0
        if rank not in self.started:
            return 3
        if rank not in self.where:
            return 1
        return 4 if self.where[rank][0] else 2

    def _silence(self, rank: int) -> str:
        if is_stopped(self.children[rank].pid):
            return "it is stopped: SIGSTOP or Ctrl-Z?"
        return "no answer: it holds the interpreter or is stopped"

    def _ask(self, ranks: list[int]) -> list[int]:
        """Ask `ranks` where their main thread is; wait a little for the answers of those that can
        give one (a stopped process cannot); return `ranks`."""
        for rank in ranks:
            self.where.pop(rank, None)
            try:
                self.conns[rank].send_bytes(b"where")
            except OSError:
                pass
        awake = {r for r in ranks if not is_stopped(self.children[r].pid)}
        deadline = time.monotonic() + _WHERE_WAIT_S
        while any(r not in self.where for r in awake & self.pending) and time.monotonic() < deadline:
            self._poll(awake, 0.05)
        return ranks

    def _blame(self, pending: set[int]) -> RankError:
        """The failure that caused the others, from what each rank was doing and what torch raised
        in it: a rank's own failure (it raised, died or exited) is the cause, never the ranks that
        then found their connection to it closed (LOST), whatever line they were at; without one, a
        failure inside torch (a wait that ran out) is the echo of a rank that stopped responding
        (ask the silent ones) or skipped a collective (its work was done)."""
        if any(f.cause for f in self.failures.values()):
            return self._first_failure()
        silent = sorted(r for r in pending if self.children[r].is_alive())
        if silent and any(self._waited(f) for f in self.failures.values()):
            hung = self._find_hung(silent)
            if hung is not None:
                rank, where = hung
                waiters = sorted(self.failures)
                return RankError(rank, f"stopped responding ({where}); {rank_names(waiters)} timed out after "
                                       f"{self.timeout_s:g} s waiting for it in a collective", kind=HUNG,
                                 peers=tuple(waiters))
        return self._skipped(silent) or self._first_failure()

    def _waited(self, failure: Failure) -> bool:
        """A failure inside torch after at least the timeout in the group: it may be a wait that ran out."""
        return failure.kind == TORCH and failure.in_group_s >= self.timeout_s

    def _skipped(self, silent: list[int]) -> RankError | None:
        """A rank whose work was done while others failed inside torch (or sit silent in a
        collective) waiting for it: it skipped a collective. The skipper may fail first in its own
        teardown and exit, so that its peers lose it instead of timing out."""
        def waits(rank: int) -> bool:  # failed inside torch, or sits silent in a collective
            failure = self.failures.get(rank)
            return failure.kind in ECHOES if failure else self.where.get(rank, (False,))[0]

        waiting = sorted(r for r in set(self.failures) | set(silent)
                         if r not in self.worker_done and waits(r))
        skippers = sorted(self.worker_done & (set(self.failures) | set(self.results) | set(silent)))
        if not (waiting and skippers):
            return None
        also = f" (so did {rank_names(skippers[1:])})" if len(skippers) > 1 else ""
        return RankError(skippers[0], f"finished its work{also} while {rank_names(waiting)} waited "
                                      f"{self.timeout_s:g} s in a collective: a collective it did not call?",
                         kind=SKIPPED, peers=tuple(waiting), also=tuple(skippers[1:]))

    def _first_failure(self) -> RankError:
        """A rank's own failure (the lowest rank's), else the first failure inside torch, a lost
        connection last (the echo of a failure the others may name)."""
        order = sorted(self.failures, key=lambda r: (0, 0.0, r) if self.failures[r].cause
                       else (1 + (self.failures[r].kind == LOST), self.failures[r].at, r))
        rank, failure = order[0], self.failures[order[0]]
        text = short(failure.what)
        if self._waited(failure):
            text += f" (timeout {self.timeout_s:g} s)"
        if order[1:]:
            text += f" (then {rank_names(order[1:])} failed too)"
        return RankError(rank, text, failure.details, kind=failure.kind, peers=tuple(order[1:]))

    def _find_hung(self, silent: list[int]) -> tuple[int, str] | None:
        """Ask each silent rank where its main thread is. The one the others wait for is a stopped
        rank, else one at work outside torch.distributed, else one that does not answer (it holds
        the interpreter; last, because on a loaded machine a waiting rank may just answer late)."""
        self._ask(silent)
        silent = [r for r in silent if r not in self.failures and r not in self.results]
        for rank in silent:
            if is_stopped(self.children[rank].pid):
                return rank, self._silence(rank)
        for rank in silent:
            if rank in self.where and not self.where[rank][0]:
                return rank, f"at {self.where[rank][1]}"
        for rank in silent:
            if rank not in self.where:
                return rank, self._silence(rank)
        return None


def _exit_failure(exitcode: int | None) -> Failure:
    """A rank that ended without a report: killed by a signal, or exited."""
    if exitcode is not None and exitcode < 0:
        known = -exitcode in signal.Signals._value2member_map_
        name = signal.Signals(-exitcode).name if known else str(-exitcode)
        hint = " (what the kernel's out-of-memory killer sends)" if -exitcode == signal.SIGKILL else ""
        return Failure(KILLED, f"was killed by {name}{hint}", at=time.monotonic())
    return Failure(EXITED, f"exited with code {exitcode} without a result", at=time.monotonic())


def is_stopped(pid: int | None) -> bool:
    """Linux: the process is stopped (SIGSTOP, Ctrl-Z) or traced; elsewhere we cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False
