"""A rank's side of `common.launcher.launch`: what each child process does between the fork and
its exit. It joins the group (within the start-up time the parent gives it, then the user's
timeout for collectives), runs the worker, and reports each phase over its pipe: "started" (it
can answer questions), "joined" (the group is formed), "done" (the worker returned: the parent
can tell a rank that skipped a collective from the ranks waiting in it), then the result, or a
`Failure`: what the rank was doing when it failed (its own code raised, or torch did: a collective
that timed out or lost its peer), when, and the error in one line. Who is blamed follows from those
fields and the phases, never from the error's words. A helper thread answers the parent's "where
are you?" with the main thread's innermost frame outside torch, so a hung rank can be named. What
the rank writes to file descriptor 2 (torch's C++ socket warnings while it waits for a peer, six
lines for one stopped rank) goes to a file and comes back with the result or the error, so the
parent prints one line (COURSE_DEBUG=1 leaves it on the terminal). The kernel kills the rank if
the parent dies (no orphans).
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from common.errors import RunFailure
from common.loopback import loopback_interface

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_KEPT_STDERR = 64 * 1024  # the end of what a rank wrote to fd 2 is what matters; a runaway log is cut


# What a failed rank was doing, as the launcher tells it (Failure.kind and RankError.kind): who is
# to blame follows from these and from the ranks' phases, never from an exception's words.
RAISED = "raised"   # the worker's own code raised (the innermost frame is outside torch): a cause
TORCH = "torch"     # torch raised a RuntimeError from its own code: a collective that ran out of time
#                     or lost its peer (the echo of another rank's failure), or an operation that failed;
#                     also a wait of the launcher's own on the other ranks that ran out
KILLED = "killed"   # the process died by a signal (the parent's view): a cause
EXITED = "exited"   # the process ended without a result (the parent's view): a cause
HUNG = "hung"       # (a verdict) silent, stopped or at work while the others waited for it
SKIPPED = "skipped"  # (a verdict) finished its work while the others waited in a collective
NOT_JOINED = "not joined"      # (a verdict) did not join the group in time
NOT_FINISHED = "not finished"  # (a verdict) did not deliver its result in time after another did
CAUSES = frozenset({RAISED, KILLED, EXITED})


@dataclass(frozen=True)
class Failure:
    """A rank's failure as it reports it: what it was doing (`kind`), the cause in one line (`what`),
    its traceback and stderr (`details`), when it failed (`at`: time.monotonic, one clock for every
    process of this machine) and how long it had been in the group (`in_group_s`; 0 before)."""

    kind: str
    what: str
    details: str = ""
    at: float = 0.0
    in_group_s: float = 0.0

    @property
    def cause(self) -> bool:
        """A failure of its own, never the echo of another rank's."""
        return self.kind in CAUSES


class RankError(RunFailure):
    """A rank failed: `rank` is its number, `message` the cause, `details` its traceback; `kind` what
    happened (the module's kinds), `peers` the ranks left waiting for it, `also` the other ranks
    blamed with it (ranks that skipped the same collective)."""

    def __init__(self, rank: int, message: str, details: str = "", *, kind: str = RAISED,
                 peers: tuple[int, ...] = (), also: tuple[int, ...] = ()) -> None:
        super().__init__(f"rank {rank} {message}")
        self.rank, self.message, self.details = rank, message, details
        self.kind, self.peers, self.also = kind, tuple(peers), tuple(also)

    def __reduce__(self) -> tuple:
        return _rank_error, (self.rank, self.message, self.details, self.kind, self.peers, self.also)


def _rank_error(rank: int, message: str, details: str, kind: str, peers: tuple, also: tuple) -> RankError:
    return RankError(rank, message, details, kind=kind, peers=peers, also=also)


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
               timeout_s: float, start_s: float, threads: int, args: tuple, kwargs: dict) -> None:
    """The child process: `start_s` bounds joining the group, `timeout_s` each collective after."""
    # What the parent owned at the fork is not ours to collect (its objects' threads did not
    # come along, so destructors that join them would hang): keep the collector off it.
    gc.freeze()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's "SIGTERM cleans up" is not ours: die at once
    if hasattr(signal, "pthread_sigmask"):  # the launcher held SIGTERM back until this default was set
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _die_with_parent()
    lock = threading.Lock()
    stderr_text = _fold_stderr()
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


def _fold_stderr() -> Callable[[], str]:
    """Send this rank's file descriptor 2 to a file; return a function that reads it back. torch's
    C++ side writes its warnings there directly, bypassing Python (sys.stderr goes there too)."""
    if os.environ.get("COURSE_DEBUG"):
        return lambda: ""  # debugging: everything stays on the terminal, as it happens
    sys.stderr.flush()
    tmp = tempfile.TemporaryFile()
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


def failure_of(err: BaseException, details: str, joined_at: float | None, waited: bool = False) -> Failure:
    """This rank's report of `err`: TORCH when torch's own code raised a RuntimeError (a collective's
    timeout or lost peer among them) or when the caller knows `err` ended its wait on the other
    ranks (`waited`: the launcher's own waits), else RAISED; never read from the exception's words."""
    now = time.monotonic()
    kind = TORCH if waited or (isinstance(err, RuntimeError) and _raised_in_torch(err)) else RAISED
    return Failure(kind, describe(err), details, now, 0.0 if joined_at is None else now - joined_at)


def _raised_in_torch(err: BaseException) -> bool:
    """Whether the innermost frame of `err`'s traceback is torch's (where its C++ errors surface)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_TORCH_DIR)


def describe(err: BaseException) -> str:
    """The cause in words: out-of-memory errors say so, whatever torch calls them (the words only
    describe; they never decide who is blamed)."""
    text = f"{type(err).__name__}: {err}".strip().rstrip(":")
    if isinstance(err, MemoryError) or any(s in str(err) for s in ("can't allocate memory", "out of memory")):
        return f"ran out of memory ({short(text)})"
    return f"failed: {text}"


def short(cause: str) -> str:
    """One line: the exception's first line without gloo's source location."""
    first = cause.splitlines()[0] if cause else "failed: unknown error"
    return re.sub(r"\[[^\]]*/gloo/[^\]]*\]\s*", "", first)
