"""The one place that starts processes: run `worker(rank, world_size, *args)` on W ranks.

    results = launch(worker, 4, tensor_size)     # a list, one return value per rank, in rank order

Standalone, the parent forks W children (spawn where fork is unsafe: not Linux, NCCL, or more
than one thread per rank), hosts a TCPStore on a port the OS picks (so two scripts started
together never collide), and each child joins a gloo process group (NCCL for workers that put
their tensors on `rank_device()` and say so with backend="auto", when CUDA has a GPU per rank).
Under `torchrun` (RANK, WORLD_SIZE, MASTER_ADDR set) nothing is spawned: this process is one
rank, the group is torchrun's, results are gathered to every rank, and only rank 0 prints.

Failures never hang: a rank that raises ends the run within a fraction of a second with a
`RankError` naming the rank and its exception; a rank stuck in a collective that another rank
skipped fails after `timeout_s`; Ctrl-C and any error take every child down with the parent.
"""

from __future__ import annotations

import atexit
import gc
import os
import pickle
import re
import sys
import time
import traceback
from datetime import timedelta
from multiprocessing import connection
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.cli import quiet_unless_rank0, under_torchrun

DEFAULT_TIMEOUT_S = 30.0  # a lecture script's collectives take milliseconds; 30 s means "stuck"
_STORE_TIMEOUT_S = 60.0


class RankError(RuntimeError):
    """A rank failed: `rank` is its number, `message` its exception, `details` its traceback."""

    def __init__(self, rank: int, message: str, details: str = "") -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.message, self.details = rank, message, details


def choose_backend(world_size: int, backend: str | None = None) -> str:
    """The backend for a run: COURSE_BACKEND if set, else `backend`; "auto" means NCCL when CUDA
    has a device for each rank, else gloo. None means gloo: a worker must declare that it puts
    its tensors on `rank_device()` (by passing backend="auto") before NCCL can be chosen for it.
    """
    backend = os.environ.get("COURSE_BACKEND") or backend or "gloo"
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


def launch(worker: Callable[..., Any], world_size: int, *args: Any, timeout_s: float | None = None,
           threads: int = 1, backend: str | None = None, **kwargs: Any) -> list[Any]:
    """Run worker(rank, world_size, *args, **kwargs) on every rank; return their results in order.

    `threads` is the intra-op thread count of each rank: one by default, because W ranks with
    several threads each on a 2-core laptop spend their time fighting over the cores.
    """
    if int(world_size) != world_size or world_size < 1:
        raise ValueError(f"world size must be an integer >= 1, got {world_size}")
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    if under_torchrun():
        return _launch_in_torchrun(worker, world_size, args, kwargs, timeout_s, threads, backend)
    backend = choose_backend(world_size, backend)
    # fork starts a rank in milliseconds, but only with one thread per rank: a child that asks
    # OpenMP for a team after the parent has used one hangs (GNU libgomp is not fork-safe), and
    # CUDA cannot be used in a forked child. Anything else pays spawn's re-import of torch.
    use_fork = sys.platform.startswith("linux") and backend != "nccl" and threads == 1
    ctx = mp.get_context("fork" if use_fork else "spawn")
    pipes = [ctx.Pipe(duplex=True) for _ in range(world_size)]
    children = [
        ctx.Process(target=_child_main, daemon=True, name=f"rank{rank}",
                    args=(worker, rank, world_size, pipes[rank][1], backend, timeout_s, threads, args, kwargs))
        for rank in range(world_size)
    ]
    store = None
    try:
        for child in children:
            child.start()
        for _, child_end in pipes:
            child_end.close()
        # The store lives in the parent and starts only after the fork, so no thread is forked.
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=_STORE_TIMEOUT_S))
        for parent_end, _ in pipes:
            parent_end.send(store.port)
        return _collect(children, [p for p, _ in pipes])
    finally:
        _stop(children)
        # Shut the store down now: if it lingered (a traceback holding this frame, say), a later
        # fork would copy it, and the child's garbage collector would hang joining its thread.
        store = None


def _collect(children: list[Any], conns: list[Any]) -> list[Any]:
    results: dict[int, Any] = {}
    failures: list[tuple[int, str, str]] = []
    waiting = {c: r for r, c in enumerate(conns)}
    sentinels = {child.sentinel: r for r, child in enumerate(children)}
    grace_until = None
    while waiting and (grace_until is None or time.monotonic() < grace_until):
        ready = connection.wait(list(waiting) + list(sentinels), timeout=0.1 if failures else 1.0)
        for obj in ready:
            if obj in waiting:
                rank = waiting.pop(obj)
                try:
                    status, payload, details = pickle.loads(obj.recv_bytes())
                except EOFError:
                    status, payload, details = "error", "exited without a result", ""
                if status == "ok":
                    results[rank] = payload
                else:
                    failures.append((rank, payload, details))
            elif obj in sentinels:
                rank = sentinels.pop(obj)
                conn = conns[rank]
                if conn in waiting and not conn.poll(0.2):
                    waiting.pop(conn)
                    failures.append((rank, f"process exited with code {children[rank].exitcode} "
                                           "without a result", ""))
        if failures and grace_until is None:
            grace_until = time.monotonic() + 0.5  # the others' errors say who failed first
    if failures:
        raise _first_cause(failures)
    return [results[r] for r in range(len(conns))]


def _first_cause(failures: list[tuple[int, str, str]]) -> RankError:
    """The failure that caused the others: a peer's "connection closed" is only an echo of it."""
    def is_echo(message: str) -> bool:
        return any(s in message for s in ("Connection closed by peer", "Connection reset by peer"))
    failures.sort(key=lambda f: (is_echo(f[1]), f[0]))
    rank, message, details = failures[0]
    short = message.splitlines()[0] if message else "unknown error"
    short = re.sub(r"\[[^\]]*/gloo/[^\]]*\]\s*", "", short)  # drop gloo's source location
    others = [f"rank {r}" for r, _, _ in failures[1:]]
    if others:
        short += f" (then {', '.join(others)} failed too)"
    return RankError(rank, short, details)


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


def _setup_rank(local_rank: int, backend: str, threads: int) -> None:
    """Threads and device of this rank; the rank's identity is already in the environment."""
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if backend == "nccl":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())


def _die_with_parent() -> None:
    """Linux: the kernel kills this rank if the parent dies, even by SIGKILL (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child_main(worker: Callable[..., Any], rank: int, world_size: int, conn: Any, backend: str,
                timeout_s: float, threads: int, args: tuple, kwargs: dict) -> None:
    # What the parent owned at the fork is not ours to collect (its objects' threads did not
    # come along, so destructors that join them would hang): keep the collector off it.
    gc.freeze()
    _die_with_parent()
    try:
        port = conn.recv()
        # torchrun-style environment, so a worker sees what it would see under torchrun.
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size))
        _setup_rank(rank, backend, threads)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=_STORE_TIMEOUT_S))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
        result = worker(rank, world_size, *args, **kwargs)
        # Plain pickle, not torch.multiprocessing's: that one shares a returned tensor through a
        # file descriptor which dies with this process, and the parent's read then fails.
        payload = pickle.dumps(("ok", result, ""))
        gc.collect()  # DDP objects must be gone before the group is (see notes: teardown aborts)
        dist.barrier()
        dist.destroy_process_group()
        conn.send_bytes(payload)
        conn.close()
    except BaseException as err:  # noqa: BLE001 - every failure, Ctrl-C too, goes to the parent
        try:
            message = f"{type(err).__name__}: {err}".strip()
            conn.send_bytes(pickle.dumps(("error", message, traceback.format_exc())))
            conn.close()
        except Exception:
            pass
        os._exit(1)  # skip teardown: peers may be stuck in a collective with us
    os._exit(0)


_torchrun_ready = False
quiet_unless_rank0()  # for a script that imports this before it parses its flags


def _launch_in_torchrun(worker: Callable[..., Any], world_size: int, args: tuple, kwargs: dict,
                        timeout_s: float, threads: int, backend: str | None) -> list[Any]:
    global _torchrun_ready
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not _torchrun_ready:
        backend = choose_backend(int(os.environ.get("LOCAL_WORLD_SIZE", world)), backend)
        # torchrun's own LOCAL_RANK picks the GPU; across nodes it is not the global rank.
        _setup_rank(int(os.environ.get("LOCAL_RANK", rank)), backend, threads)
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        atexit.register(_torchrun_teardown)  # a group left alive aborts the process at exit
        _torchrun_ready = True
    if world != world_size:
        print(f"(torchrun gives {world} ranks; this part asked for {world_size} and runs on {world})")
    try:
        result = worker(rank, world, *args, **kwargs)
    except BaseException as err:
        sys.stderr.write(f"rank {rank} failed: {type(err).__name__}: {err}\n")
        raise
    gc.collect()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, result)
    return gathered


def _torchrun_teardown() -> None:
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
