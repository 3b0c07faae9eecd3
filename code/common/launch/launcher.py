"""The one place that starts processes: run `worker(rank, world_size, *args)` on W ranks.

    results = launch(worker, 4, tensor_size)     # a list, one return value per rank, in rank order

Standalone, the parent forks W children (spawn where fork is unsafe: not Linux, NCCL, or more
than one thread per rank) and each child joins a gloo process group (NCCL for workers that put
their tensors on `rank_device()` and say so with backend="auto", when CUDA has a GPU per rank).
Nothing listens beyond loopback: the rendezvous store serves a socket the parent bound to
127.0.0.1 on a port the OS picked (so two scripts started together never collide), and gloo is
pinned to the loopback interface. Under torchrun nothing is spawned: this process is one rank of
torchrun's group, and only rank 0 prints (`common.launch.torchrun`, `common.launch.torchrun_rank`).

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
terminal unless the run succeeds; when it fails, the blamed rank's own last lines (gloo's "Received
data size doesn't match expected size" before it aborts the rank, NCCL's reason) come with the one
line, in `RankError.said` (`RankError.under`: the lines to print beneath it). A rank that raises is
named, never the ranks that then find their connection to it closed, whatever line they were at.
Ctrl-C and any error take every child down with the parent; the kernel kills the children if the
parent itself is killed (no orphans). What a child does between the fork and its exit (and
`capture_stderr()`, which keeps what torch's C++ side prints inside a rank) is in
`common.launch.rank_side`, what the parent watches meanwhile in
`common.launch.parent_side`.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing import resource_tracker
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.error_types import UsageError
from common.flags import DEFAULT_TIMEOUT_S
from common.launch.machine import check_backend, check_world_size, cores
from common.launch.parent_side import Collector
from common.launch.rank_failure import RankError, last_words
from common.launch.rank_side import child_main
from common.launch.torchrun import check_environment, quiet_unless_rank0, under_torchrun
from common.launch.torchrun_rank import launch_in_torchrun
from common.leftovers import owned_folder
from common.script_end import signals_held

__all__ = ["choose_backend", "launch", "launch_expecting_failure",
           "preload_for_ddp", "rank_device", "startup_allowance_s"]

_TORCH_AFTER_S = 5.0  # torch gives up joining this long after the parent's deadline: the parent names
_SAID_BYTES = 16 * 1024  # the end of a failed rank's stderr, where its last words are


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


def preload_for_ddp(world_size: int, parent_too: bool = False) -> None:
    """Import what DDP's constructor and a first optimizer import (torch._dynamo, 1-1.5 s here) in
    the parent when ranks outnumber cores: forked ranks inherit it instead of paying it one after
    another on shared cores (4 ranks on 2 cores: 5.2 s -> 3.6 s). With a core per rank they import
    it side by side, as fast as the parent doing it first, unless the parent imports it later
    anyway (parent_too: a one-process reference steps its own optimizer): importing it here first
    saves that second import (04_details: 5.7 s -> 4.0-4.4 s)."""
    if parent_too or world_size > cores():
        import torch._dynamo  # noqa: F401


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
        quiet_unless_rank0()  # a script that launches without parsing flags first (cli's parse does it too)
        return launch_in_torchrun(worker, world_size, args, kwargs, timeout_s, threads,
                                  lambda local: choose_backend(local, backend))
    check_world_size(world_size)
    return _run_children(worker, world_size, args, kwargs, timeout_s, threads,
                         choose_backend(world_size, backend))


def _run_children(worker: Callable[..., Any], world_size: int, args: tuple, kwargs: dict, timeout_s: float,
                  threads: int, backend: str) -> list[Any]:
    """A standalone run: W child processes, each writing its stderr to a file of ours (read even
    after the rank died), the rendezvous store here, the parent's deadlines."""
    with owned_folder("course-ranks-") as folder:   # a killed run's folder is removed by the next
        stderr_paths = [os.path.join(folder, f"rank{rank}.stderr") for rank in range(world_size)]
        try:
            return _run_ranks(worker, world_size, args, kwargs, timeout_s, threads, backend, stderr_paths)
        except RankError as err:
            err.said = last_words(_read_end(stderr_paths[err.rank]))
            raise


def _read_end(path: str) -> str:
    """The end of a rank's stderr file ("" if it never made one)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - _SAID_BYTES))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _run_ranks(worker: Callable[..., Any], world_size: int, args: tuple, kwargs: dict, timeout_s: float,
               threads: int, backend: str, stderr_paths: list[str]) -> list[Any]:
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
                                  start_s + _TORCH_AFTER_S, threads, args, kwargs, stderr_paths[rank]))
                for rank in range(world_size)]
    store = None
    if not use_fork:   # multiprocessing's tracker process, which spawn needs: started here, first
        _start_resource_tracker()
    try:
        with _signals_blocked():  # each rank unblocks them once its own handlers are set
            for child in children:
                child.start()
        for _, child_end in pipes:
            child_end.close()
        store = _loopback_store(world_size, start_s)  # after the fork, so no store thread is forked
        for parent_end, _ in pipes:
            parent_end.send(store.port)
        collector = Collector(children, [p for p, _ in pipes], timeout_s, start_s)
        results = collector.run()
    finally:
        _stop(children)
        # Shut the store down now: if it lingered (a traceback holding this frame, say), a later
        # fork would copy it, and the child's garbage collector would hang joining its thread.
        store = None
    for rank in sorted(collector.stderr):  # what the ranks wrote to stderr, now that no rank is waiting
        sys.stderr.write(collector.stderr[rank])
    return results


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held back while ranks are started, in this process and in each new
    rank until its own handlers are set (`rank_side.child_main`). Otherwise a signal to the whole
    process group (a terminal's Ctrl-C) landing during the fork ran Python's handler inside fork's
    own hooks: in this process the KeyboardInterrupt was swallowed ("Exception ignored in
    _releaseLock") and the run went on to exit 0 (5 of 6 tries of 01_ddp_basics), or cut
    `Process.start()` in half, leaving a rank this process did not know about (its traceback came
    after "interrupted"); in a rank still in multiprocessing's bootstrap it printed a traceback.

    Two holds, because a signal for the process may be taken by any thread (torch's own threads
    too), while Python runs its handler in the main thread whatever that thread's mask: here the
    handlers only note the signal, which is raised again once the ranks are started, where it ends
    the run as usual; the mask, inherited by each rank (one thread, the forking one), keeps the
    signal pending there until the rank's own dispositions are in place (it ignores the terminal's
    signals: the parent decides, and ends the ranks). A spawned rank keeps the mask through exec
    too: without it, a Ctrl-C during its import of torch printed multiprocessing's traceback, and
    the parent's SIGTERM there printed a word of the rank's own; held, the signal waits until
    child_main, where the rank ignores it or dies quietly by it (or the parent's SIGKILL 2 s later)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    with signals_held(mask=True):
        yield


def _start_resource_tracker() -> None:
    """multiprocessing's resource tracker, started now if it is not running: its start unblocks
    SIGINT and SIGTERM in this thread (it blocks them around its own spawn, then unblocks them),
    which inside the ranks' hold would hand them to the spawned ranks unheld. It is made with all
    three held, for good: it shares our process group, and a SIGHUP to the group killed it (spawn
    then warned that it "died unexpectedly" and started another)."""
    with signals_held(mask=True):
        resource_tracker.ensure_running()


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
        allowance += 30.0 + 10.0 * world_size / max(1, cores())
    return allowance


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
