"""What a failed rank reports (`Failure`) and what the launcher raises (`RankError`): what the rank
was doing when it failed (its own code raised, or torch did: a collective that timed out, or a
connection to a peer that closed), when, and the error in one line. A closed connection is told
from the error torch raised, in whatever frame it surfaced (a `Work.wait()` is C++ called from the
worker's own line): it is the echo of the peer that died, never a cause. Read by the rank
(`common.launch.rank_side`, `common.launch.torchrun_rank`), the parent (`common.launch.parent_side`)
and torchrun's blame (`common.launch.torchrun_blame`).
"""

from __future__ import annotations

import dis
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from common.error_types import RunFailure

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


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


def rank_names(ranks: Iterable[int]) -> str:
    """"rank 1, rank 3": how a RankError's message names the other ranks (parent and torchrun alike)."""
    return ", ".join(f"rank {r}" for r in ranks)
