"""Rank-side helpers for the cases that run on real gloo processes (through common.launcher).

`counting()` wraps torch.distributed's point-to-point calls and collectives inside one rank, so a
case can say how many bytes a rank sent, to whom, and which collectives it called (a ring that
calls all_reduce, a no_sync that still all-reduces). The wrappers count, then call the real
function; `P2POp(dist.isend, ...)` and `batch_isend_irecv` work through them too.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from common.launcher import launch
from judging.engine import load_solution

POINT_TO_POINT = ("send", "isend", "recv", "irecv")
COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter",
               "all_gather_object", "broadcast_object_list")
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


@dataclass
class Counts:
    """What one rank did through torch.distributed while counting."""

    sent_bytes: int = 0
    sends: int = 0
    destinations: set[int] = field(default_factory=set)
    received_bytes: int = 0
    collectives: dict[str, int] = field(default_factory=dict)

    def collective_calls(self, *names: str) -> int:
        return sum(self.collectives.get(n, 0) for n in (names or self.collectives))


def _tensor_and_peer(args: tuple, kwargs: dict, peer_keys: tuple[str, ...]) -> tuple[torch.Tensor, int | None]:
    tensor = args[0] if args else kwargs.get("tensor")
    peer = args[1] if len(args) > 1 else next((kwargs[k] for k in peer_keys if kwargs.get(k) is not None), None)
    return tensor, peer


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count this rank's sends (bytes, destinations), receives and collective calls in the block."""
    counts = Counts()
    originals: dict[str, Any] = {}

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if name in ("send", "isend"):
                tensor, peer = _tensor_and_peer(args, kwargs, ("dst", "group_dst"))
                counts.sends += 1
                counts.sent_bytes += tensor.numel() * tensor.element_size()
                counts.destinations.add(peer)
            elif name in ("recv", "irecv"):
                tensor, _ = _tensor_and_peer(args, kwargs, ("src", "group_src"))
                counts.received_bytes += tensor.numel() * tensor.element_size()
            else:
                counts.collectives[name] = counts.collectives.get(name, 0) + 1
            return original(*args, **kwargs)
        return counted

    for name in POINT_TO_POINT + COLLECTIVES:
        originals[name] = getattr(c10d, name)
        patched = wrap(name, originals[name])
        # Both names: students call dist.isend, and P2POp / batch_isend_irecv compare with c10d's.
        setattr(c10d, name, patched)
        setattr(dist, name, patched)
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(c10d, name, original)
            setattr(dist, name, original)


def original(name: str) -> Callable[..., Any]:
    """The real torch.distributed function, for the judge's own reference calls inside `counting`."""
    return getattr(c10d, name).__wrapped__ if hasattr(getattr(c10d, name), "__wrapped__") else getattr(c10d, name)
