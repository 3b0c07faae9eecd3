"""Counted communication for cs336/05_parallel.py: the torch.distributed calls its strategies make,
each recorded in the rank's `CommLog` (calls, and the bytes the rank sends) before it runs.

A collective's bytes are what a ring sends for the call's real size (`costmodel.ring_bytes_sent`,
nccl-tests' bus factor); a send's are its tensor's bytes. gloo picks its own schedule by size, so
the ring figure is the model's count of the real calls, not a packet capture. Whether gloo has
reduce_scatter is asked once (common.capabilities), never found out by catching a failed call:
that would swallow a real failure of this rank or a peer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common.capabilities import gloo_lacks
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
    """Every rank's column slice (rank r's has widths[r] columns), concatenated in rank order.
    gloo gathers equal shapes only: pad each slice to the widest, trim after."""
    padded = F.pad(piece, (0, max(widths) - piece.shape[1])).contiguous()
    parts = [torch.empty_like(padded) for _ in widths]
    log.add("all_gather", len(widths) * padded.numel() * padded.element_size())
    dist.all_gather(parts, padded)
    return torch.cat([p[:, :w] for p, w in zip(parts, widths)], dim=-1)


def reduce_scatter_columns(partial: torch.Tensor, widths: list[int], log: CommLog) -> torch.Tensor:
    """Sum a (rows, d) tensor over the ranks; rank r gets only its widths[r] columns of the sum."""
    chunks = [c.contiguous() for c in partial.split(widths, dim=-1)]
    if gloo_lacks("reduce_scatter"):  # an older gloo: the whole sum, twice the bytes, logged as such
        whole = partial.contiguous().clone()
        all_reduce_sum(whole, log)
        return whole.split(widths, dim=-1)[dist.get_rank()].contiguous()
    out = torch.empty_like(chunks[dist.get_rank()])
    log.add("reduce_scatter", partial.numel() * partial.element_size())
    dist.reduce_scatter(out, chunks)  # gloo on CPU, unequal chunks too (torch 2.13)
    return out


def send(t: torch.Tensor, dst: int, log: CommLog) -> None:
    log.add("send", t.numel() * t.element_size())
    dist.send(t.contiguous(), dst)


def recv(shape: torch.Size | tuple[int, ...], src: int, log: CommLog, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype)
    log.add("recv", t.numel() * t.element_size())
    dist.recv(t, src)
    return t
