"""Whether this process is one rank that torchrun started, and what that changes: torchrun owns the
processes and the group, rank 0 plays the parent (it prints and writes the outputs), the other
ranks compute silently."""

from __future__ import annotations

import os
import sys


def under_torchrun() -> bool:
    """True when torchrun (or another launcher) already made this process one rank of a group."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def is_rank0() -> bool:
    """This process prints and writes outputs: a standalone run, or rank 0 under torchrun."""
    return not under_torchrun() or os.environ.get("RANK") == "0"


def quiet_unless_rank0() -> None:
    """Under torchrun rank 0 plays the parent and prints; the other ranks compute silently."""
    if not is_rank0() and sys.stdout is sys.__stdout__:
        sys.stdout = open(os.devnull, "w")
