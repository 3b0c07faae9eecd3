"""A rank's side of `common.launch.launch`: what each child process does between the fork and its
exit. It joins the group (within the start-up time the parent gives it, then the user's timeout
for collectives), runs the worker, and reports each phase over its pipe: "started" (it can answer
questions), "joined" (the group is formed), "done" (the worker returned: the parent can tell a rank
that skipped a collective from the ranks waiting in it), then the result, or a `Failure`
(`common.launch.rank_failure`: what the rank was doing when it failed, when, the error in one
line). A helper thread answers the parent's "where are you?" with the main thread's innermost frame outside
torch, so a hung rank can be named. What the rank writes to file descriptor 2 (torch's C++ socket
warnings while it waits for a peer, gloo's reason before it aborts the process) goes to a file the
parent names, which outlives the rank: the parent prints one line, and under it the blamed rank's
own last words (COURSE_DEBUG=1 leaves everything on the terminal). The kernel kills the rank if the
parent dies (no orphans).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from common.launch.loopback import loopback_interface
from common.launch.rank_failure import failure_of
from common.script_end import ENDING_SIGNALS

_KEPT_STDERR = 64 * 1024  # the end of what a rank wrote to fd 2 is what matters; a runaway log is cut


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


def setup_rank(local_rank: int, backend: str, threads: int) -> None:
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

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl: nobody will read our result
        os._exit(1)


def _own_signals() -> None:
    """A rank's dispositions, set before the signals the launcher held back reach it. SIGTERM (the
    parent's clean-up) kills it at once: the parent's "SIGTERM cleans up" is not ours. Ctrl-C and a
    closed terminal reach the whole process group; the parent decides what they mean and ends the
    ranks itself, so a rank ignores them: a rank that raised KeyboardInterrupt or died of SIGHUP
    first would print a traceback, or be blamed for the run's end."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, ENDING_SIGNALS)   # held back by the launcher


def where_main_thread() -> tuple[bool, str]:
    """(inside torch.distributed?, the innermost frame outside torch) of the main thread."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    in_collective, location = False, "unknown"
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/torch/distributed/" in path:
            in_collective = True
        elif location == "unknown" and "/torch/" not in path:
            location = f"{frame.f_code.co_name} ({os.path.basename(path)}:{frame.f_lineno})"
        frame = frame.f_back
    return in_collective, location


def _answer_where(conn: Any, lock: threading.Lock) -> None:
    """A rank's helper thread: tells the parent where the main thread is, when asked."""
    try:
        while conn.recv_bytes() == b"where":
            _send(conn, lock, ("where", where_main_thread()))
    except (EOFError, OSError):
        pass


def child_main(worker: Callable[..., Any], rank: int, world_size: int, conn: Any, backend: str,
               timeout_s: float, start_s: float, threads: int, args: tuple, kwargs: dict,
               stderr_path: str | None = None) -> None:
    """The child process: `start_s` bounds joining the group, `timeout_s` each collective after;
    its file descriptor 2 goes to `stderr_path` (a file of the parent's, read even if this rank
    dies: gloo writes why it aborts a process there and nowhere else)."""
    # What the parent owned at the fork is not ours to collect (its objects' threads did not
    # come along, so destructors that join them would hang): keep the collector off it.
    gc.freeze()
    _own_signals()
    _die_with_parent()
    lock = threading.Lock()
    stderr_text = _fold_stderr(stderr_path)
    joined_at = None
    try:
        port = conn.recv()
        threading.Thread(target=_answer_where, args=(conn, lock), daemon=True).start()
        _send(conn, lock, ("started",))
        _torchrun_environment(port, rank, world_size)
        setup_rank(rank, backend, threads)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=start_s))
        _init_group(backend, rank, world_size, timeout_s, start_s, store)
        joined_at = time.monotonic()
        _send(conn, lock, ("joined",))
        result = worker(rank, world_size, *args, **kwargs)
        _send(conn, lock, ("done",))  # the parent can tell a rank that skipped a collective from the waiters
        # Plain pickle, not torch.multiprocessing's: that one shares a returned tensor through a
        # file descriptor which dies with this process, and the parent's read then fails.
        payload = pickle.dumps(result)
        gc.collect()  # DDP objects must be gone before the group is (see notes: teardown aborts)
        dist.barrier()
        dist.destroy_process_group()
        _send(conn, lock, ("ok", payload, stderr_text()))
    except BaseException as err:  # noqa: BLE001 - every failure, Ctrl-C too, goes to the parent
        try:
            _send(conn, lock, ("error", failure_of(err, traceback.format_exc() + stderr_text(), joined_at)))
        except Exception:  # noqa: BLE001 - the parent may be gone
            pass
        os._exit(1)  # skip teardown: peers may be stuck in a collective with us
    os._exit(0)


def _torchrun_environment(port: int, rank: int, world_size: int) -> None:
    """torchrun-style environment, so a worker sees what it would see under torchrun; gloo on the
    loopback interface whatever the host name resolves to."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size),
                      GLOO_SOCKET_IFNAME=loopback_interface())


def _send(conn: Any, lock: threading.Lock, message: tuple) -> None:
    with lock:  # the helper thread answers "where" on the same pipe
        conn.send_bytes(pickle.dumps(message))


def _fold_stderr(path: str | None = None) -> Callable[[], str]:
    """Send this rank's file descriptor 2 to a file (`path`, else an anonymous one); return a
    function that reads it back. torch's C++ side writes its warnings there directly, bypassing
    Python (sys.stderr goes there too)."""
    if os.environ.get("COURSE_DEBUG"):
        return lambda: ""  # debugging: everything stays on the terminal, as it happens
    sys.stderr.flush()
    tmp = open(path, "w+b") if path else tempfile.TemporaryFile()   # open as long as the rank lives
    os.dup2(tmp.fileno(), 2)

    def text() -> str:
        sys.stderr.flush()
        size = os.fstat(tmp.fileno()).st_size
        data = os.pread(tmp.fileno(), _KEPT_STDERR, max(0, size - _KEPT_STDERR))
        return data.decode("utf-8", "replace")
    return text


def _init_group(backend: str, rank: int, world_size: int, timeout_s: float, start_s: float,
                store: Any) -> None:
    """Join the group within `start_s` (the parent names a rank that does not join before torch
    gives up), then give collectives the user's timeout (torch >= 2.3; older ones keep start_s)."""
    set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    start = max(timeout_s, start_s) if set_timeout else timeout_s
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=start))
    if set_timeout:
        set_timeout(timedelta(seconds=timeout_s))


