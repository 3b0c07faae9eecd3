"""The one place that starts processes: run `worker(rank, world_size, *args)` on W ranks.

    results = launch(worker, 4, tensor_size)     # a list, one return value per rank, in rank order

Standalone, the parent forks W children (spawn where fork is unsafe: not Linux, NCCL, or more
than one thread per rank) and each child joins a gloo process group (NCCL for workers that put
their tensors on `rank_device()` and say so with backend="auto", when CUDA has a GPU per rank).
Nothing listens beyond loopback: the rendezvous store serves a socket the parent bound to
127.0.0.1 on a port the OS picked (so two scripts started together never collide), and gloo is
pinned to the loopback interface. Under torchrun nothing is spawned: this process is one rank of
torchrun's group, and only rank 0 prints (`common.torchrun`, `common.torchrun_rank`).

Every wait has a deadline, the user's `timeout_s` (plus a fixed grace, and a start-up allowance
that grows with W), and whatever stalls is named in one line (`RankError`):
  - a rank that raises: its exception, within a fraction of a second ("out of memory" when it is);
  - a rank killed by a signal: the signal's name (SIGKILL is what the kernel's OOM killer sends);
  - a rank that does not join the group: once the others have waited `timeout_s`, a rank that is
    stopped or does not answer; a slow one after the start-up allowance;
  - a rank that stops responding while the others wait in a collective: after `timeout_s` the
    parent asks every silent rank where it is, and blames the one that is stopped or not waiting
    in torch.distributed (with the line it is stuck at), not the ones left waiting for it;
  - a rank that does not deliver its result within `timeout_s` after another rank did (stopped
    after the others finished, or stuck leaving the group).
What the ranks write to stderr (torch's C++ socket warnings while they wait) is kept from the
terminal unless the run succeeds. Ctrl-C and any error take every child down with the parent;
the kernel kills the children if the parent itself is killed (no orphans). Inside a rank,
`capture_stderr()` keeps what torch's C++ side prints so the worker can return it beside the
part it belongs to. What a child does between the fork and its exit is in `common.rank_side`.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing import connection
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.cli import DEFAULT_TIMEOUT_S
from common.errors import UsageError
from common.machine import check_backend, check_world_size
from common.rank_side import RankError, child_main, is_echo, is_timeout, short
from common.torchrun import check_environment, quiet_unless_rank0, under_torchrun
from common.torchrun_rank import launch_in_torchrun

__all__ = ["RankError", "capture_stderr", "choose_backend", "launch", "launch_expecting_failure",
           "preload_for_ddp", "rank_device", "startup_allowance_s"]

_WHERE_WAIT_S = 1.0   # how long a silent rank has to say where it is before it counts as hung
_GRACE_S = 0.5        # after a first failure, time for the others' reports to arrive
_TORCH_AFTER_S = 5.0  # torch gives up joining this long after the parent's deadline: the parent names
_PHASES = {"started": "started", "joined": "joined", "done": "worker_done"}  # message -> set of ranks


def choose_backend(world_size: int, backend: str | None = None) -> str:
    """The backend for a run: COURSE_BACKEND if set, else `backend`; "auto" means NCCL when CUDA
    has a device for each rank, else gloo. None means gloo: a worker must declare that it puts
    its tensors on `rank_device()` (by passing backend="auto") before NCCL can be chosen for it.
    """
    backend = check_backend(world_size, os.environ.get("COURSE_BACKEND") or backend or "gloo")
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
    return backend


def rank_device() -> torch.device:
    """The device a rank computes on: its GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return torch.device("cpu")


def preload_for_ddp(world_size: int) -> None:
    """Import what DDP's constructor and a first optimizer import (torch._dynamo, 1-1.5 s here) in
    the parent when ranks outnumber cores: forked ranks inherit it instead of paying it one after
    another on shared cores (4 ranks on 2 cores: 5.2 s -> 3.6 s). With a core per rank they import
    it side by side, which is faster than the parent doing it first."""
    if world_size > _cores():
        import torch._dynamo  # noqa: F401


@contextmanager
def capture_stderr() -> Iterator[list[str]]:
    """Inside a rank: keep what is written to file descriptor 2 (torch's and gloo's C++ warnings
    too, which bypass Python) instead of printing it; the list receives the text at the end, for
    the worker to return, so the parent can show it next to the part it belongs to."""
    sys.stderr.flush()
    saved = os.dup(2)
    captured: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.append(tmp.read().decode("utf-8", "replace"))


def launch_expecting_failure(worker: Callable[..., Any], world_size: int, *args: Any, timeout_s: float,
                              **kwargs: Any) -> tuple[float, str | None]:
    """For scripts that show a failure on purpose (a skipped collective): run it, and return the
    seconds until the launcher gave up and its one-line report (None if, wrongly, it succeeded)."""
    start = time.perf_counter()
    try:
        launch(worker, world_size, *args, timeout_s=timeout_s, **kwargs)
        report = None
    except RankError as err:
        report = str(err)
    return time.perf_counter() - start, report


def launch(worker: Callable[..., Any], world_size: int, *args: Any, timeout_s: float | None = None,
           threads: int = 1, backend: str | None = None, **kwargs: Any) -> list[Any]:
    """Run worker(rank, world_size, *args, **kwargs) on every rank; return their results in order.

    `timeout_s` is how long a rank may wait in one collective (DEFAULT_TIMEOUT_S if None), and
    the parent's deadline for every other wait (see the module's docstring).
    `threads` is the intra-op thread count of each rank: one by default, because W ranks with
    several threads each on a 2-core laptop spend their time fighting over the cores.
    Bad arguments raise UsageError before any process starts.
    """
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if not 0 < timeout_s < float("inf"):
        raise UsageError(f"timeout must be a number of seconds > 0, got {timeout_s}")
    check_environment()
    if under_torchrun():
        return launch_in_torchrun(worker, world_size, args, kwargs, timeout_s, threads,
                                  lambda local: choose_backend(local, backend))
    check_world_size(world_size)
    backend = choose_backend(world_size, backend)
    # fork starts a rank in milliseconds, but only with one thread per rank: a child that asks
    # OpenMP for a team after the parent has used one hangs (GNU libgomp is not fork-safe), and
    # CUDA cannot be used in a forked child. Anything else pays spawn's re-import of torch.
    use_fork = sys.platform.startswith("linux") and backend != "nccl" and threads == 1
    start_s = timeout_s + startup_allowance_s(world_size, spawned=not use_fork)
    ctx = mp.get_context("fork" if use_fork else "spawn")
    pipes = [ctx.Pipe(duplex=True) for _ in range(world_size)]
    # torch gives up joining a little after the parent's deadline, so the parent names the rank.
    children = [ctx.Process(target=child_main, daemon=True, name=f"rank{rank}",
                            args=(worker, rank, world_size, pipes[rank][1], backend, timeout_s,
                                  start_s + _TORCH_AFTER_S, threads, args, kwargs))
                for rank in range(world_size)]
    store = None
    try:
        for child in children:
            child.start()
        for _, child_end in pipes:
            child_end.close()
        store = _loopback_store(world_size, start_s)  # after the fork, so no store thread is forked
        for parent_end, _ in pipes:
            parent_end.send(store.port)
        collector = _Collector(children, [p for p, _ in pipes], timeout_s, start_s)
        results = collector.run()
    finally:
        _stop(children)
        # Shut the store down now: if it lingered (a traceback holding this frame, say), a later
        # fork would copy it, and the child's garbage collector would hang joining its thread.
        store = None
    for rank in sorted(collector.stderr):  # what the ranks wrote to stderr, now that no rank is waiting
        sys.stderr.write(collector.stderr[rank])
    return results


def startup_allowance_s(world_size: int, spawned: bool = False) -> float:
    """Seconds W ranks may take to join the group, on top of the user's timeout. Measured here (2
    cores at load 4-6, forked ranks): the last rank joined after 0.04 s at W = 2, 0.1 s at 4, 0.2 s
    at 8, 0.4 s at 16, 0.9 s at 32. gloo connects all W(W-1)/2 pairs, so it grows as W²: W²/100 s
    is 10x what was measured, for a busier machine. Spawned ranks first import torch: the last one
    joined after 3 s at W = 2, 5 s at 4, 18 s at 8, 45 s at 16, 74 s at 32 (load 5-27), and at
    load 10 two ranks under pytest took over 16 s: 30 s, plus 10 s per rank per core. Only a rank
    that is running but has not started waits that long: a stopped one is named once the others
    have waited `timeout_s`."""
    allowance = 5.0 + world_size * world_size / 100
    if spawned:
        allowance += 30.0 + 10.0 * world_size / max(1, _cores())
    return allowance


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _loopback_store(world_size: int, start_s: float) -> Any:
    """The rendezvous store, serving a socket bound to loopback on a port the OS picks: TCPStore
    would otherwise listen on every interface."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(max(128, world_size))
        store = dist.TCPStore("127.0.0.1", listener.getsockname()[1], is_master=True, wait_for_workers=False,
                              master_listen_fd=listener.fileno(), timeout=timedelta(seconds=start_s))
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the socket now and closes it itself
    return store


class _Collector:
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

    def run(self) -> list[Any]:
        pending = self.pending = set(range(len(self.conns)))
        grace_until = None
        while pending and (grace_until is None or time.monotonic() < grace_until):
            self._poll(pending, 0.1 if self.failures else 0.25)
            if self.failures:
                # The others' reports say who failed first; ranks still silent are asked after.
                grace_until = grace_until or time.monotonic() + _GRACE_S
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
        if unjoined:
            if now >= self.began + self.start_s:
                return self._stalled(unjoined, f"did not join the group within {self.start_s:g} s")
            if now >= self.next_look:  # the others have waited timeout_s: a stopped rank is named now
                self.next_look = now + 1.0
                # A spawned rank cannot answer while it imports torch: silent counts once started.
                silent = [r for r in self._ask(unjoined) if r not in self.where
                          and (r in self.started or _is_stopped(self.children[r].pid))]
                if silent and not self.failures:
                    return self._stalled(silent, f"did not join the group within {now - self.began:.0f} s")
        elif self.first_result:
            if now >= self.first_result[0] + self.timeout_s:
                return self._stalled(sorted(pending), f"did not finish within {self.timeout_s:g} s after "
                                                      f"rank {self.first_result[1]} did")
        elif now >= self.next_look:  # every rank silent: no timeout will ever fire
            self.next_look = now + self.timeout_s
            silent = [r for r in self._ask(sorted(pending)) if r not in self.where]
            if silent and len(silent) == len(pending) and not self.failures:
                return self._stalled(silent, "stopped responding, and so did every other rank")
        return None

    def _stalled(self, ranks: list[int], what: str) -> RankError:
        """The error for the first of `ranks` that stalled: silent ones first (asked just before)."""
        rank = sorted(ranks, key=lambda r: (r in self.where, r))[0]
        if _is_stopped(self.children[rank].pid) or (rank in self.started and rank not in self.where):
            why = self._silence(rank)
        elif rank not in self.started:
            why = "it has not started: a spawned rank imports torch first"
        else:
            in_collective, location = self.where[rank]
            why = f"it is {'in torch.distributed, ' if in_collective else ''}at {location}"
        return RankError(rank, f"{what} ({why})")

    def _silence(self, rank: int) -> str:
        if _is_stopped(self.children[rank].pid):
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
        awake = {r for r in ranks if not _is_stopped(self.children[r].pid)}
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
        """Ask each silent rank where its main thread is. The one the others wait for is a rank that
        does not answer (stopped, or holding the interpreter), else one outside torch.distributed."""
        self._ask(silent)
        silent = [r for r in silent if r not in self.failures and r not in self.results]
        for rank in silent:
            if rank not in self.where:
                return rank, self._silence(rank)
        for rank in silent:
            in_collective, location = self.where[rank]
            if not in_collective:
                return rank, f"at {location}"
        return None


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.Signals._value2member_map_ else str(-exitcode)
        hint = " (what the kernel's out-of-memory killer sends)" if -exitcode == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode} without a result"


def _stop(children: list[Any]) -> None:
    """Every child gone within about 2 s: SIGTERM (SIGCONT too, so a stopped rank receives it),
    then SIGKILL for any left."""
    started = [c for c in children if c.pid is not None]
    for child in started:
        if child.is_alive():
            child.terminate()
            try:
                os.kill(child.pid, signal.SIGCONT)
            except OSError:
                pass
    deadline = time.monotonic() + 2.0
    for child in started:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)


def _is_stopped(pid: int | None) -> bool:
    """Linux: the process is stopped (SIGSTOP, Ctrl-Z) or traced; elsewhere we cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


quiet_unless_rank0()  # for a script that imports this before it parses its flags
