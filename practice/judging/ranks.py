"""Rank-side helpers for the cases that run on real gloo processes (through common.launcher).

`counting()` (common.dist_count) wraps torch.distributed's point-to-point calls and collectives
inside one rank, so a case can say how many bytes a rank sent, to whom, and which collectives it
called (a ring that calls all_reduce, a no_sync that still all-reduces).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from common.launcher import launch
from judging.engine import load_solution

RANK_TIMEOUT_S = 3.0   # a collective's wait on a rank; set by the judge from its per-case limit
_SOLUTIONS: dict[str, ModuleType] = {}


def solution_in_rank(path: str) -> ModuleType:
    """The student's module inside a rank: inherited from the forked parent, or loaded once."""
    if path not in _SOLUTIONS:
        _SOLUTIONS[path] = load_solution(Path(path))
    return _SOLUTIONS[path]


def run_ranks(worker: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """worker(rank, world_size, *args) on real gloo ranks; a rank that fails raises RankError."""
    return launch(worker, world_size, *args, timeout_s=RANK_TIMEOUT_S)
