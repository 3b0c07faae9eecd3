"""A rank's side of `common.launcher.launch`: what each child process does between the fork and
its exit. It joins the group (within the start-up time the parent gives it, then the user's
timeout for collectives), runs the worker, and reports each phase over its pipe: "started" (it
can answer questions), "joined" (the group is formed), "done" (the worker returned: the parent
can tell a rank that skipped a collective from the ranks waiting in it), then the result, or a
`Failure`: what the rank was doing when it failed (its own code raised, or torch did: a collective
that timed out, or a connection to a peer that closed), when, and the error in one line. A closed
connection is told from the error torch raised, in whatever frame it surfaced (a `Work.wait()` is
C++ called from the worker's own line): it is the echo of the peer that died, never a cause. A
helper thread answers the parent's "where are you?" with the main thread's innermost frame outside
torch, so a hung rank can be named. What the rank writes to file descriptor 2 (torch's C++ socket
warnings while it waits for a peer, gloo's reason before it aborts the process) goes to a file the
parent names, which outlives the rank: the parent prints one line, and under it the blamed rank's
own last words (COURSE_DEBUG=1 leaves everything on the terminal). The kernel kills the rank if the
parent dies (no orphans).
"""

from __future__ import annotations

import dis
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
from common.exits import ENDING_SIGNALS
from common.loopback import loopback_interface

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_KEPT_STDERR = 64 * 1024  # the end of what a rank wrote to fd 2 is what matters; a runaway log is cut


# What a failed rank was doing, as the launcher tells it (Failure.kind and RankError.kind): who is
# to blame follows from these and from the ranks' phases.
RAISED = "raised"   # the worker's own code raised (the innermost frame is outside torch): a cause
TORCH = "torch"     # torch raised a RuntimeError from its own code: a wait that ran out of time (in a
#                     collective or a Work.wait(), the echo of a rank that stopped), or an operation
#                     that failed; also a wait of the launcher's own on the other ranks that ran out
LOST = "lost"       # torch (gloo, NCCL, the store) found a connection to a peer closed or reset: the
#                     echo of that peer's failure, whichever line of the worker's it surfaced in
KILLED = "killed"   # the process died by a signal (the parent's view): a cause
EXITED = "exited"   # the process ended without a result (the parent's view): a cause
HUNG = "hung"       # (a verdict) silent, stopped or at work while the others waited for it
SKIPPED = "skipped"  # (a verdict) finished its work while the others waited in a collective
NOT_JOINED = "not joined"      # (a verdict) did not join the group in time
NOT_FINISHED = "not finished"  # (a verdict) did not deliver its result in time after another did
CAUSES = frozenset({RAISED, KILLED, EXITED})
ECHOES = frozenset({TORCH, LOST})   # failures inside torch: what other ranks' failures cause

# The words of a lost peer, as gloo, NCCL and the TCP store say it (torch 2.x): "Connection closed
# by peer [127.0.0.1]:7089", "Read error [...]: Connection reset by peer", "Write error: Broken
# pipe", "Socket closed", "Failed to recv, got 0 bytes. Connection was likely closed", NCCL's
# "ncclRemoteError: ... a remote process exiting prematurely". Read only from an error torch raised
# (never from a `raise` in the worker's own code), they tell an echo from a cause.
_LOST_PEER = re.compile(r"connection (?:was )?(?:closed|reset) by (?:the )?peer|broken pipe|"
                        r"socket (?:unexpectedly )?closed|connection was likely closed|"
                        r"remote peer closed|ncclRemoteError|remote process exit", re.IGNORECASE)
# A wait of torch's that ran out: gloo's "Timed out waiting 5000ms for recv operation to complete",
# the store's "Socket Timeout", NCCL's watchdog "collective operation timeout".
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)
_KEPT_WORDS = 4        # lines of the blamed rank's stderr shown under the one line
_WORDS_WIDTH = 300     # characters of each
# glog's warning and info lines (torch's C++ socket warnings while a rank waits): never the reason
_GLOG_NOISE = re.compile(r"^\[[WI]\d{4} ")


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
    blamed with it (ranks that skipped the same collective), `who` the words that name it when
    the rank itself is not known ("a rank on node 1"; `rank` is then the lowest it may be), `said`
    the blamed rank's own last lines on stderr (gloo's "Received data size doesn't match expected
    size" before it aborts the rank, NCCL's reason): `str()` is the one line, `under` the lines to
    print beneath it."""

    def __init__(self, rank: int, message: str, details: str = "", *, kind: str = RAISED,
                 peers: tuple[int, ...] = (), also: tuple[int, ...] = (), said: tuple[str, ...] = (),
                 who: str | None = None) -> None:
        super().__init__(f"{who or f'rank {rank}'} {message}")
        self.rank, self.message, self.details, self.who = rank, message, details, who
        self.kind, self.peers, self.also, self.said = kind, tuple(peers), tuple(also), tuple(said)

    @property
    def under(self) -> list[str]:
        """What to print under the one line: the rank's own last words, indented."""
        return [f"  rank {self.rank} wrote: {line}" for line in self.said]

    def __reduce__(self) -> tuple:
        return _rank_error, (self.rank, self.message, self.details, self.kind, self.peers, self.also,
                             self.said, self.who)


def _rank_error(rank: int, message: str, details: str, kind: str, peers: tuple, also: tuple,
                said: tuple = (), who: str | None = None) -> RankError:
    return RankError(rank, message, details, kind=kind, peers=peers, also=also, said=said, who=who)


def last_words(text: str) -> tuple[str, ...]:
    """A rank's own last lines on stderr worth showing under the one line: the last few that are
    not torch's waiting warnings (glog's W and I lines), gloo's source paths cut to the file name,
    each clipped. gloo says why it aborts a process only there ("terminate called after throwing
    an instance of 'gloo::EnforceNotMet' / what(): [enforce fail at pair.cc:456] ... 32 vs 24.
    Received data size doesn't match expected size")."""
    # Python's faulthandler (pytest's, PYTHONFAULTHANDLER) dumps the stacks after gloo's words: cut it
    text = text.split("Fatal Python error:", 1)[0]
    kept = [line.strip() for line in text.splitlines() if line.strip() and not _GLOG_NOISE.match(line)]
    words = []
    for line in kept[-_KEPT_WORDS:]:
        line = re.sub(r"/\S*/([^/\s\]]+:\d+\])", r"\1", line)   # [enforce fail at pair.cc:456]
        words.append(line if len(line) <= _WORDS_WIDTH else line[:_WORDS_WIDTH] + "…")
    return tuple(words)


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


def failure_of(err: BaseException, details: str, joined_at: float | None, waited: bool = False) -> Failure:
    """This rank's report of `err`, by what torch raised rather than where it surfaced:
    LOST when torch found a connection to a peer closed (`lost_peer`), in whatever frame (a
    Work.wait() is C++ called from the worker's line; dist_count's wrapper calls the group's C++
    method); TORCH when torch's own code raised a RuntimeError, or torch's C++ a timeout from a
    wait, or when the caller knows `err` ended its wait on the other ranks (`waited`: the
    launcher's own waits); else RAISED. A `raise` in the worker's own code is always RAISED,
    whatever its words."""
    now = time.monotonic()
    if waited:
        kind = TORCH
    elif lost_peer(err):
        kind = LOST
    elif isinstance(err, RuntimeError) and (_raised_in_torch(err) or (
            not _raised_by_statement(err) and _TIMED_OUT.search(str(err)) is not None)):
        kind = TORCH
    else:
        kind = RAISED
    return Failure(kind, describe(err), details, now, 0.0 if joined_at is None else now - joined_at)


def lost_peer(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from or while handling, is torch telling that a
    peer's connection closed: a RuntimeError with the words of a lost peer that torch raised (its
    C++ or its Python), not one a `raise` statement of the worker's made up."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, RuntimeError) and _LOST_PEER.search(str(err)) and (
                _raised_in_torch(err) or not _raised_by_statement(err)):
            return True
        err = err.__cause__ or err.__context__
    return False


def _innermost(err: BaseException) -> Any:
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _raised_in_torch(err: BaseException) -> bool:
    """Whether the innermost frame of `err`'s traceback is torch's (where its C++ errors surface)."""
    tb = _innermost(err)
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_TORCH_DIR)


def _raised_by_statement(err: BaseException) -> bool:
    """Whether a `raise` statement in the innermost frame raised `err` (else a call into C++ did,
    such as Work.wait(), or an operation: its instruction is a call, not a raise)."""
    tb = _innermost(err)
    if tb is None:
        return True   # never raised: made, not thrown by torch
    for instruction in dis.get_instructions(tb.tb_frame.f_code):
        if instruction.offset == tb.tb_lasti:
            return instruction.opname in ("RAISE_VARARGS", "RERAISE")
    return True


def describe(err: BaseException) -> str:
    """The cause in words: out-of-memory errors say so, whatever torch calls them (these words only
    describe; who is blamed reads no words but torch's own, in `lost_peer` and `failure_of`)."""
    text = f"{type(err).__name__}: {err}".strip().rstrip(":")
    if isinstance(err, MemoryError) or any(s in str(err) for s in ("can't allocate memory", "out of memory")):
        return f"ran out of memory ({short(text)})"
    return f"failed: {text}"


def short(cause: str) -> str:
    """One line: the exception's first line without gloo's source location."""
    first = cause.splitlines()[0] if cause else "failed: unknown error"
    return re.sub(r"\[[^\]]*/gloo/[^\]]*\]\s*", "", first)
