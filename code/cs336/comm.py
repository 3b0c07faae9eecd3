"""Counted communication for cs336/05_parallel.py: the torch.distributed calls its strategies make,
each recorded in the rank's `CommLog` (calls, and the bytes the rank sends) before it runs.

A collective's bytes are what a ring sends for the call's real size (`costmodel.ring_bytes_sent`,
nccl-tests' bus factor); a send's are its tensor's bytes. gloo picks its own schedule by size, so
the ring figure is the model's count of the real calls, not a packet capture. Whether gloo has
reduce_scatter is asked once (common.collectives_real, which holds gloo's workarounds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from common.collectives_real import all_gather_uneven, reduce_scatter_uneven
from common.costmodel import ring_bytes_sent


@dataclass
class CommLog:
    """What one rank sent: per operation, its calls and bytes."""

    world_size: int
    calls: dict[str, int] = field(default_factory=dict)
    sent: dict[str, float] = field(default_factory=dict)

    def add(self, op: str, nbytes: int) -> None:
        """Record one call; `nbytes` is a collective's whole result, or a send's or recv's message."""
        self.calls[op] = self.calls.get(op, 0) + 1
        if op == "send":
            self.sent[op] = self.sent.get(op, 0) + nbytes
        elif op != "recv":
            self.sent[op] = self.sent.get(op, 0) + ring_bytes_sent(op, self.world_size, nbytes)

    def per_step(self, steps: int, ops: tuple[str, ...]) -> tuple[int | float, float]:
        """(calls, bytes sent) per step of the operations `ops`, from the log of `steps` steps."""
        calls = sum(self.calls.get(op, 0) for op in ops)
        return (calls // steps if calls % steps == 0 else calls / steps,
                sum(self.sent.get(op, 0) for op in ops) / steps)


def all_reduce_sum(t: torch.Tensor, log: CommLog) -> None:
    log.add("all_reduce", t.numel() * t.element_size())
    dist.all_reduce(t)  # op=SUM, the default


def all_gather_columns(piece: torch.Tensor, widths: list[int], log: CommLog) -> torch.Tensor:
    """Every rank's column slice (rank r's has widths[r] columns), concatenated in rank order
    (gloo gathers equal shapes only: common.collectives_real pads each slice to the widest, trims after)."""
    return all_gather_uneven(piece, widths, dim=-1, record=log.add)


def reduce_scatter_columns(partial: torch.Tensor, widths: list[int], log: CommLog) -> torch.Tensor:
    """Sum a (rows, d) tensor over the ranks; rank r gets only its widths[r] columns of the sum
    (on an older gloo through an all-reduce: twice the bytes, logged as such)."""
    return reduce_scatter_uneven(partial, widths, dim=-1, record=log.add)[0]


def send(t: torch.Tensor, dst: int, log: CommLog) -> None:
    log.add("send", t.numel() * t.element_size())
    dist.send(t.contiguous(), dst)


def recv(shape: torch.Size | tuple[int, ...], src: int, log: CommLog, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype)
    log.add("recv", t.numel() * t.element_size())
    dist.recv(t, src)
    return t
