"""The one place that starts processes: run `worker(rank, world_size, *args)` on W ranks.

    results = launch(worker, 4, tensor_size)     # a list, one return value per rank, in rank order

Standalone, the parent forks W children (spawn where fork is unsafe: not Linux, NCCL, or more
than one thread per rank) and each child joins a gloo process group (NCCL for workers that put
their tensors on `rank_device()` and say so with backend="auto", when CUDA has a GPU per rank).
Nothing listens beyond loopback: the rendezvous store serves a socket the parent bound to
127.0.0.1 on a port the OS picked (so two scripts started together never collide), and gloo is
pinned to the loopback interface. Under `torchrun` (RANK, WORLD_SIZE, MASTER_ADDR set) nothing is
spawned: this process is one rank, the group is torchrun's, results are gathered to every rank,
and only rank 0 prints.

Failures never hang and name the rank that caused them (`RankError`, one line):
  - a rank that raises: its exception, within a fraction of a second ("out of memory" when it is);
  - a rank killed by a signal: the signal's name (SIGKILL is what the kernel's OOM killer sends);
  - a rank that stops responding while the others wait in a collective: after `timeout_s` the
    parent asks every silent rank where it is, and blames the one that is not waiting in
    torch.distributed (with the line it is stuck at), not the ones left waiting for it.
Ctrl-C and any error take every child down with the parent; the kernel kills the children if the
parent itself is killed (no orphans). Inside a rank, `capture_stderr()` keeps what torch's C++ side
prints (its warnings) so the parent can show it beside the part it belongs to. What a child does
between the fork and its exit is in `common.rank_side`.
"""

from __future__ import annotations

import atexit
import gc
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing import connection
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.cli import DEFAULT_TIMEOUT_S
from common.errors import RunFailure, UsageError
from common.machine import check_backend, check_world_size
from common.rank_side import START_TIMEOUT_S, child_main, describe, setup_rank, short
from common.torchrun import quiet_unless_rank0, under_torchrun

_WHERE_WAIT_S = 1.0       # how long a silent rank has to say where it is before it counts as hung
_GRACE_S = 0.5            # after a first failure, time for the others' reports to arrive


class RankError(RunFailure):
    """A rank failed: `rank` is its number, `message` the cause, `details` its traceback."""

    def __init__(self, rank: int, message: str, details: str = "") -> None:
        super().__init__(f"rank {rank} {message}")
        self.rank, self.message, self.details = rank, message, details


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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if world_size > cores:
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
                              **kwargs: Any) -> tuple[float, RankError | None]:
    """For scripts that show a failure on purpose (a skipped collective): run it, and return the
    seconds until the launcher gave up and its report (None if, wrongly, it succeeded)."""
    start = time.perf_counter()
    try:
        launch(worker, world_size, *args, timeout_s=timeout_s, **kwargs)
        report = None
    except RankError as err:
        report = err
    return time.perf_counter() - start, report


def launch(worker: Callable[..., Any], world_size: int, *args: Any, timeout_s: float | None = None,
           threads: int = 1, backend: str | None = None, **kwargs: Any) -> list[Any]:
    """Run worker(rank, world_size, *args, **kwargs) on every rank; return their results in order.

    `timeout_s` is how long a rank may wait in one collective (DEFAULT_TIMEOUT_S if None).
    `threads` is the intra-op thread count of each rank: one by default, because W ranks with
    several threads each on a 2-core laptop spend their time fighting over the cores.
    Bad arguments raise UsageError before any process starts.
    """
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if not 0 < timeout_s < float("inf"):
        raise UsageError(f"timeout must be a number of seconds > 0, got {timeout_s}")
    if under_torchrun():
        return _launch_in_torchrun(worker, world_size, args, kwargs, timeout_s, threads, backend)
    check_world_size(world_size)
    backend = choose_backend(world_size, backend)
    # fork starts a rank in milliseconds, but only with one thread per rank: a child that asks
    # OpenMP for a team after the parent has used one hangs (GNU libgomp is not fork-safe), and
    # CUDA cannot be used in a forked child. Anything else pays spawn's re-import of torch.
    use_fork = sys.platform.startswith("linux") and backend != "nccl" and threads == 1
    ctx = mp.get_context("fork" if use_fork else "spawn")
    pipes = [ctx.Pipe(duplex=True) for _ in range(world_size)]
    children = [
        ctx.Process(target=child_main, daemon=True, name=f"rank{rank}",
                    args=(worker, rank, world_size, pipes[rank][1], backend, timeout_s, threads, args, kwargs))
        for rank in range(world_size)
    ]
    listener = store = None
    try:
        for child in children:
            child.start()
        for _, child_end in pipes:
            child_end.close()
        # The store lives in the parent and starts only after the fork, so no thread is forked.
        # It serves a socket bound to loopback: TCPStore would otherwise listen on every interface.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(max(128, world_size))
        store = dist.TCPStore("127.0.0.1", listener.getsockname()[1], is_master=True, wait_for_workers=False,
                              master_listen_fd=listener.fileno(), timeout=timedelta(seconds=START_TIMEOUT_S))
        listener.detach()  # the store owns the socket now and closes it itself
        listener = None
        for parent_end, _ in pipes:
            parent_end.send(store.port)
        return _Collector(children, [p for p, _ in pipes], timeout_s).run()
    finally:
        _stop(children)
        # Shut the store down now: if it lingered (a traceback holding this frame, say), a later
        # fork would copy it, and the child's garbage collector would hang joining its thread.
        store = None
        if listener is not None:
            listener.close()


class _Collector:
    """The parent's side of a run: results, failures, and who is to blame."""

    def __init__(self, children: list[Any], conns: list[Any], timeout_s: float) -> None:
        self.children, self.conns, self.timeout_s = children, conns, timeout_s
        self.results: dict[int, Any] = {}
        self.failures: dict[int, tuple[str, str]] = {}   # rank -> (cause, traceback)
        self.where: dict[int, tuple[bool, str]] = {}      # rank -> (in torch.distributed, location)
        self.worker_done: set[int] = set()                # ranks whose worker returned (now in teardown)

    def run(self) -> list[Any]:
        pending = set(range(len(self.conns)))
        grace_until = None
        while pending and (grace_until is None or time.monotonic() < grace_until):
            self._poll(pending, 0.1 if self.failures else 1.0)
            if self.failures and grace_until is None:
                # The others' reports say who failed first. After a timeout, give ranks that began
                # waiting a little later the time to time out too: whoever stays silent is hung.
                timed_out = any(_is_timeout(cause) for cause, _ in self.failures.values())
                grace_until = time.monotonic() + (min(5.0, self.timeout_s) if timed_out else _GRACE_S)
        if self.failures:
            raise self._blame(pending)
        return [self.results[r] for r in range(len(self.conns))]

    def _poll(self, pending: set[int], timeout: float) -> None:
        conns = {self.conns[r]: r for r in pending}
        sentinels = {self.children[r].sentinel: r for r in pending}
        for obj in connection.wait(list(conns) + list(sentinels), timeout=timeout):
            rank = conns.get(obj, sentinels.get(obj))
            if rank not in pending:
                continue
            if obj in conns or self.conns[rank].poll(0.2):
                self._receive(rank, pending)
            else:
                pending.discard(rank)
                self.failures[rank] = (_exit_cause(self.children[rank].exitcode), "")

    def _receive(self, rank: int, pending: set[int]) -> None:
        try:
            message = pickle.loads(self.conns[rank].recv_bytes())
        except (EOFError, OSError):
            message = ("error", _exit_cause(self.children[rank].exitcode), "")
        if message[0] == "where":
            self.where[rank] = message[1]
            return
        if message[0] == "done":
            self.worker_done.add(rank)
            return
        pending.discard(rank)
        if message[0] == "ok":
            self.results[rank] = message[1]
        else:
            self.failures[rank] = (message[1], message[2])

    def _blame(self, pending: set[int]) -> RankError:
        """The failure that caused the others. A peer's "connection closed" is an echo of a rank
        that died; a timeout is an echo of a rank that stopped responding: ask the silent ones."""
        silent = sorted(r for r in pending if self.children[r].is_alive())
        if silent and any(_is_timeout(cause) for cause, _ in self.failures.values()):
            hung = self._find_hung(silent)
            if hung is not None:
                rank, where = hung
                waiters = ", ".join(f"rank {r}" for r in sorted(self.failures))
                return RankError(rank, f"stopped responding ({where}); {waiters} timed out after "
                                       f"{self.timeout_s:g} s waiting for it in a collective")
        # Who was left waiting: ranks still at work that timed out, or lost their peer (the
        # skipper may time out first in its own teardown and exit), or sit silent in a collective.
        waiting = sorted({r for r, (cause, _) in self.failures.items()
                          if r not in self.worker_done and (_is_timeout(cause) or _is_echo(cause))}
                         | {r for r in silent if r not in self.worker_done and self.where.get(r, (False,))[0]})
        skippers = sorted(self.worker_done & (set(self.failures) | set(self.results) | set(silent)))
        if waiting and skippers:
            # A rank whose work was done while others timed out inside it: it skipped a collective.
            names = ", ".join(f"rank {r}" for r in waiting)
            also = f" (so did {', '.join(f'rank {r}' for r in skippers[1:])})" if len(skippers) > 1 else ""
            return RankError(skippers[0], f"finished its work{also} while {names} waited {self.timeout_s:g} s in "
                                          "a collective: a collective it did not call?")
        order = sorted(self.failures, key=lambda r: (_is_echo(self.failures[r][0]), _is_timeout(self.failures[r][0]), r))
        rank = order[0]
        cause, details = self.failures[rank]
        others = [f"rank {r}" for r in order[1:]]
        text = short(cause)
        if _is_timeout(cause):
            text += f" (timeout {self.timeout_s:g} s)"
        if others:
            text += f" (then {', '.join(others)} failed too)"
        return RankError(rank, text, details)

    def _find_hung(self, silent: list[int]) -> tuple[int, str] | None:
        """Ask each silent rank where its main thread is; the first not inside torch.distributed
        (or not answering at all: it holds the interpreter) is the one the others wait for."""
        for rank in silent:
            try:
                self.conns[rank].send_bytes(b"where")
            except OSError:
                pass
        deadline = time.monotonic() + _WHERE_WAIT_S
        pending = set(silent)
        while any(r not in self.where for r in silent) and time.monotonic() < deadline:
            self._poll(pending, 0.05)
        for rank in silent:
            if rank not in self.where:
                return rank, "no answer: it holds the interpreter or is stopped"
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


def _is_echo(cause: str) -> bool:
    return any(s in cause for s in ("Connection closed by peer", "Connection reset by peer", "closed the pipe"))


def _is_timeout(cause: str) -> bool:
    return any(s in cause.lower() for s in ("timed out", "timeout"))


def _stop(children: list[Any]) -> None:
    for child in children:
        if child.is_alive():
            child.terminate()
    deadline = time.monotonic() + 2.0
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)


_torchrun_ready = False
quiet_unless_rank0()  # for a script that imports this before it parses its flags


def _launch_in_torchrun(worker: Callable[..., Any], world_size: int, args: tuple, kwargs: dict,
                        timeout_s: float, threads: int, backend: str | None) -> list[Any]:
    global _torchrun_ready
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not _torchrun_ready:
        backend = choose_backend(int(os.environ.get("LOCAL_WORLD_SIZE", world)), backend)
        # torchrun's own LOCAL_RANK picks the GPU; across nodes it is not the global rank.
        setup_rank(int(os.environ.get("LOCAL_RANK", rank)), backend, threads)
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        atexit.register(_torchrun_teardown)  # a group left alive aborts the process at exit
        _torchrun_ready = True
    if world != world_size:
        print(f"(torchrun gives {world} ranks; this part asked for {world_size} and runs on {world})")
    try:
        result = worker(rank, world, *args, **kwargs)
    except BaseException as err:
        raise RankError(rank, describe(err), traceback.format_exc()) from None
    gc.collect()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, result)
    return gathered


def _torchrun_teardown() -> None:
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
