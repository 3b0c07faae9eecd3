"""Whether this process is one rank that torchrun started, and what that changes: torchrun owns the
processes and the group, rank 0 plays the parent (it prints and writes the outputs), the other
ranks compute silently.

torchrun is recognised by what only its elastic agent sets in every worker, TORCHELASTIC_RUN_ID,
beside the rank's identity (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Those four alone are
what anything can leave behind (a shell, a notebook, another launcher), so they are not enough.
A process told it is one rank of a group (RANK, WORLD_SIZE or LOCAL_RANK set) that torchrun did
not start is refused with a usage error rather than run standalone: it was started by something
that expects it to be one rank (mpirun, srun, the old torch.distributed.launch) or carries a
leftover, and running W ranks of its own in each such process would multiply the run and print
numbers for a group nobody asked for. MASTER_ADDR and MASTER_PORT alone are ignored: a standalone
run always rendezvouses on 127.0.0.1, on a port the OS picks.
"""

from __future__ import annotations

import os
import sys

from common.error_types import UsageError

_TORCHRUN_OWN = "TORCHELASTIC_RUN_ID"  # set by torchrun's agent (torch/distributed/elastic/agent)
_IDENTITY = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_TOLD_A_RANK = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
_saved_stderr: int | None = None  # a silent rank's real stderr, for the rank that must speak


def under_torchrun() -> bool:
    """True when torchrun made this process one rank of its group."""
    return _TORCHRUN_OWN in os.environ and all(k in os.environ for k in _IDENTITY)


def check_environment() -> None:
    """UsageError when the environment says "one rank of a group" but torchrun did not start us."""
    if under_torchrun():
        return
    told = [k for k in _TOLD_A_RANK if k in os.environ]
    if told:
        address = [k for k in _IDENTITY[2:] if k in os.environ]
        shown = ", ".join(f"{k}={os.environ[k]}" for k in told + address)
        raise UsageError(f"{shown} set, but torchrun did not start this process ({_TORCHRUN_OWN} is not "
                         "set): run it with torchrun, or unset them to run standalone")


def is_rank0() -> bool:
    """This process prints and writes outputs: a standalone run, or rank 0 under torchrun."""
    return not under_torchrun() or os.environ.get("RANK") == "0"


def quiet_unless_rank0() -> None:
    """Under torchrun rank 0 plays the parent and prints; the other ranks compute silently, on
    stdout and stderr alike (torch's C++ warnings too), unless COURSE_DEBUG is set."""
    global _saved_stderr
    if is_rank0():
        return
    if sys.stdout is sys.__stdout__:
        sys.stdout = open(os.devnull, "w")
    if _saved_stderr is None and not os.environ.get("COURSE_DEBUG"):
        sys.stderr.flush()
        _saved_stderr = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        sys.stderr = open(os.devnull, "w")


def speak() -> None:
    """Give a silent rank its stderr back: it names a failure that rank 0 could not."""
    global _saved_stderr
    if _saved_stderr is not None:
        os.dup2(_saved_stderr, 2)
        os.close(_saved_stderr)
        _saved_stderr = None
        sys.stderr = sys.__stderr__
