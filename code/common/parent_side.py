"""The parent's side of `common.launcher.launch`, what `common.rank_side` is to each rank: it reads
what the ranks report, keeps the deadlines no rank can keep for itself, and names the rank to
blame when the run fails (see launcher's docstring for the promises).
"""

from __future__ import annotations

import pickle
import signal
import time
from multiprocessing import connection
from typing import Any

from common.rank_side import RankError, is_echo, is_timeout, short

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

    def __init__(self, children: list[Any], conns: list[Any], timeout_s: float, start_s: float | None = None) -> None:
        self.children, self.conns, self.timeout_s = children, conns, timeout_s
        self.start_s = timeout_s if start_s is None else start_s
        self.results: dict[int, Any] = {}
        self.failures: dict[int, tuple[str, str]] = {}   # rank -> (cause, traceback)
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
                timed_out = any(is_timeout(cause) for cause, _ in self.failures.values())
                grace_until = grace_until or time.monotonic() + (min(5.0, self.timeout_s) if timed_out else _GRACE_S)
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
                self.failures[rank] = (_exit_cause(self.children[rank].exitcode), "")

    def _receive(self, rank: int) -> None:
        try:
            message = pickle.loads(self.conns[rank].recv_bytes())
        except (EOFError, OSError):
            message = ("error", _exit_cause(self.children[rank].exitcode), "")
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
            self.failures[rank] = (message[1], message[2])

    def _watch(self, pending: set[int]) -> RankError | None:
        """The parent's deadlines, for a stall no rank reports (see the class docstring)."""
        now = time.monotonic()
        unjoined = sorted(pending - self.joined - self.worker_done)
        if unjoined and now >= self.began + self.start_s:
            return self._stalled(unjoined, f"did not join the group within {self.start_s:g} s")
        if unjoined and now >= self.next_look:  # the others have waited timeout_s: a stopped rank is named now
            self.next_look = now + 1.0
            # A spawned rank cannot answer while it imports torch: silence counts once it has
            # started, and twice in a row (a loaded machine may be slow to answer once).
            silent = {r for r in self._ask(unjoined) if r not in self.where}
            named = [r for r in sorted(silent) if is_stopped(self.children[r].pid)
                     or (r in self.started and r in self.silent_before)]
            self.silent_before = silent
            if named:
                return self._stalled(named, f"did not join the group within {now - self.began:.0f} s")
        elif not unjoined and self.first_result and now >= self.first_result[0] + self.timeout_s:
            return self._stalled(sorted(pending), f"did not finish within {self.timeout_s:g} s after "
                                                  f"rank {self.first_result[1]} did")
        elif not unjoined and not self.first_result and now >= self.next_look:
            self.next_look = now + self.timeout_s  # every rank silent: no timeout will ever fire
            silent = [r for r in self._ask(sorted(pending)) if r not in self.where]
            if silent and len(silent) == len(pending):
                return self._stalled(silent, "stopped responding, and so did every other rank")
        return None

    def _stalled(self, ranks: list[int], what: str) -> RankError | None:
        """The error for the rank most likely to be stuck among `ranks`, asked where they are first;
        None when a rank reported a failure meanwhile (the failures then say who is to blame)."""
        self._ask(ranks)
        ranks = [r for r in ranks if r in self.pending]
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
        return RankError(rank, f"{what} ({why})")

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
        """The failure that caused the others. A peer's "connection closed" is an echo of a rank
        that died; a timeout is an echo of a rank that stopped responding: ask the silent ones."""
        silent = sorted(r for r in pending if self.children[r].is_alive())
        if silent and any(is_timeout(cause) for cause, _ in self.failures.values()):
            hung = self._find_hung(silent)
            if hung is not None:
                rank, where = hung
                waiters = ", ".join(f"rank {r}" for r in sorted(self.failures))
                return RankError(rank, f"stopped responding ({where}); {waiters} timed out after "
                                       f"{self.timeout_s:g} s waiting for it in a collective")
        # Who was left waiting: ranks still at work that timed out, or lost their peer (the
        # skipper may time out first in its own teardown and exit), or sit silent in a collective.
        waiting = sorted({r for r, (cause, _) in self.failures.items()
                          if r not in self.worker_done and (is_timeout(cause) or is_echo(cause))}
                         | {r for r in silent if r not in self.worker_done and self.where.get(r, (False,))[0]})
        skippers = sorted(self.worker_done & (set(self.failures) | set(self.results) | set(silent)))
        if waiting and skippers:
            # A rank whose work was done while others timed out inside it: it skipped a collective.
            names = ", ".join(f"rank {r}" for r in waiting)
            also = f" (so did {', '.join(f'rank {r}' for r in skippers[1:])})" if len(skippers) > 1 else ""
            return RankError(skippers[0], f"finished its work{also} while {names} waited {self.timeout_s:g} s in "
                                          "a collective: a collective it did not call?")
        order = sorted(self.failures, key=lambda r: (is_echo(self.failures[r][0]), is_timeout(self.failures[r][0]), r))
        rank = order[0]
        cause, details = self.failures[rank]
        others = [f"rank {r}" for r in order[1:]]
        text = short(cause)
        if is_timeout(cause):
            text += f" (timeout {self.timeout_s:g} s)"
        if others:
            text += f" (then {', '.join(others)} failed too)"
        return RankError(rank, text, details)

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


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.Signals._value2member_map_ else str(-exitcode)
        hint = " (what the kernel's out-of-memory killer sends)" if -exitcode == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode} without a result"


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.Signals._value2member_map_ else str(-exitcode)
        hint = " (what the kernel's out-of-memory killer sends)" if -exitcode == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode} without a result"


def is_stopped(pid: int | None) -> bool:
    """Linux: the process is stopped (SIGSTOP, Ctrl-Z) or traced; elsewhere we cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False
