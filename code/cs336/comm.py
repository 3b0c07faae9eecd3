"""Counted communication for cs336/05_parallel.py: the torch.distributed calls its strategies make,
each recorded in the rank's `CommLog` (calls, and the bytes the rank sends).

The counting is common.dist_count's: each call here runs inside `dist_count.counting()`, and what it
saw (a collective's input bytes, a send's or receive's) is folded into the log with `add_counts`, a
collective at its size N (common.costmodel.collectives' `nbytes_of_input`). So the log counts what reached the
process group, gloo's padding and fallback included, never what the caller meant to send.
CommLog keeps its own `add` for counters that dist_count cannot see (DTensor's functional
collectives start in C++: cs336/dtensor_tp.py) and because the CS336 tables want a log per group.

Two figures a call: `handed` is what the process group was handed (counted: the collective's size
N); `sent` is what a ring sends for it (the ring model, costmodel.collectives' ring `busiest_bytes`,
nccl-tests' bus factor: NCCL's price); a send's are its tensor's bytes in both. Neither is what gloo ran: in
torch 2.13 gloo runs a reduce-scatter as all-reduces (cs336.gloo_ran reads what it ran). Whether
gloo has reduce_scatter at all is asked once (common.collectives_real holds gloo's workarounds).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.distributed as dist

from common import dist_count
from common.collectives_real import all_gather_uneven, reduce_scatter_uneven
from common.costmodel.collectives import BY_TORCH_NAME, algorithm, by_torch_name


@dataclass
class CommLog:
    """What one rank handed its group: per operation, its calls, their bytes (counted) and what a ring
    sends for them (ring model)."""

    world_size: int
    calls: dict[str, int] = field(default_factory=dict)
    sent: dict[str, float] = field(default_factory=dict)      # ring model; a send's own bytes
    handed: dict[str, float] = field(default_factory=dict)    # counted: each call's N

    def add(self, op: str, nbytes: int) -> None:
        """Record one call; `nbytes` is a collective's whole result, or a send's or recv's message."""
        self.calls[op] = self.calls.get(op, 0) + 1
        self.handed[op] = self.handed.get(op, 0) + nbytes
        if op == "send":
            self.sent[op] = self.sent.get(op, 0) + nbytes
        elif op != "recv":
            ring = algorithm(by_torch_name(op).ring)
            self.sent[op] = self.sent.get(op, 0) + ring.busiest_bytes(self.world_size, nbytes)

    def add_counts(self, counts: dist_count.Counts) -> None:
        """Fold in what common.dist_count saw: each collective call at its size N, sends and receives
        at their bytes. A collective the definition does not know is an error, never a silent miss."""
        for name, _, input_bytes in counts.tensors:
            if name not in BY_TORCH_NAME:
                raise ValueError(f"CommLog cannot price {name!r}; it knows {', '.join(BY_TORCH_NAME)}")
            self.add(name, BY_TORCH_NAME[name].nbytes_of_input(self.world_size, input_bytes))
        for op, calls, nbytes in (("send", counts.sends, counts.sent_bytes),
                                  ("recv", counts.receives, counts.received_bytes)):
            if calls:
                self.calls[op] = self.calls.get(op, 0) + calls
                self.handed[op] = self.handed.get(op, 0) + nbytes
                if op == "send":
                    self.sent[op] = self.sent.get(op, 0) + nbytes

    def __add__(self, other: CommLog) -> CommLog:
        """Both logs' calls and bytes together (two passes, or two groups of one rank)."""
        def both(a: dict, b: dict) -> dict:
            return {op: a.get(op, 0) + b.get(op, 0) for op in a.keys() | b.keys()}
        return CommLog(self.world_size, both(self.calls, other.calls), both(self.sent, other.sent),
                       both(self.handed, other.handed))

    def per_step(self, steps: int, ops: tuple[str, ...]) -> tuple[int | float, float]:
        """(calls, bytes sent) per step of the operations `ops`, from the log of `steps` steps."""
        calls = sum(self.calls.get(op, 0) for op in ops)
        return (calls // steps if calls % steps == 0 else calls / steps,
                sum(self.sent.get(op, 0) for op in ops) / steps)


@contextlib.contextmanager
def counted(log: CommLog) -> Iterator[None]:
    """Count the block's torch.distributed calls into `log` (common.dist_count sees them; a call that
    fails is still counted, as it was started). Other threads' calls in the block would count too:
    none of cs336's strategies has any (no DDP hooks here)."""
    with dist_count.counting() as seen:
        try:
            yield
        finally:
            log.add_counts(seen)


def all_reduce_sum(t: torch.Tensor, log: CommLog) -> None:
    with counted(log):
        dist.all_reduce(t)  # op=SUM, the default


def all_gather_columns(piece: torch.Tensor, widths: list[int], log: CommLog) -> torch.Tensor:
    """Every rank's column slice (rank r's has widths[r] columns), concatenated in rank order
    (gloo gathers equal shapes only: common.collectives_real pads each slice to the widest, trims after)."""
    with counted(log):
        return all_gather_uneven(piece, widths, dim=-1)


def reduce_scatter_columns(partial: torch.Tensor, widths: list[int], log: CommLog) -> torch.Tensor:
    """Sum a (rows, d) tensor over the ranks; rank r gets only its widths[r] columns of the sum. The
    group is handed a reduce-scatter (a gloo without one: an all-reduce, counted as such); gloo in
    torch 2.13 runs it as an all-reduce of each rank's chunk (cs336.gloo_ran sees what it ran)."""
    with counted(log):
        return reduce_scatter_uneven(partial, widths, dim=-1)[0]


def send(t: torch.Tensor, dst: int, log: CommLog) -> None:
    with counted(log):
        dist.send(t.contiguous(), dst)


def recv(shape: torch.Size | tuple[int, ...], src: int, log: CommLog,
         dtype: torch.dtype = torch.float64) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype)
    with counted(log):
        dist.recv(t, src)
    return t
