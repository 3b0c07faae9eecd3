"""What gloo ran here: the operations gloo's own threads executed for a block of a rank's code (the
profiler's `gloo:*` spans), each with the bytes of its buffer, read from the span's input shape and
dtype. Inside a rank, around the code whose traffic is meant:

    with gloo_ran.watching() as ran:
        dist.reduce_scatter_tensor(out, x)     # the process group is handed a reduce-scatter ...
    ran.by_kind(world_size)                    # {"all-reduce": (1, N)}: ... gloo ran an all-reduce

A collective's bytes are one of three figures, and on gloo they differ:

    counted           what the process group was handed, call by call (common.dist_count,
                      cs336.comm, cs336.dtensor_tp): the collective the call names, at its size N;
    on the wire here  what gloo ran for it (this module): the operation named by gloo's own span
                      and the buffer it moved, N in common.costmodel.collectives' convention;
    ring model        the price of the collective named, its ring's busiest_bytes (costmodel.collectives):
                      what a ring sends, which is what NCCL runs (it has a real reduce-scatter,
                      (p-1)/p·N a rank).

In torch 2.13 gloo runs `reduce_scatter_tensor` as one all-reduce of the whole input and
`dist.reduce_scatter` as an all-reduce of each chunk (FSDP2's reduce-scatters too, on its padded
buffer): the spans say so, and this module reports what they say rather than assuming it, so a
gloo that gains a real reduce-scatter shows as one. Which bytes gloo's own algorithm then puts on
the socket for an all-reduce is gloo's choice by size (ring, halving-doubling): only a packet
capture would tell; "on the wire here" is the operations and their buffers.

The profiler: torch.autograd.profiler.profile (torch.profiler's first use imports torch._dynamo),
record_shapes=True for the spans' shapes and dtypes, read from its raw Kineto events (building
FunctionEvents is most of a profile's cost). Its start and stop print a line from C++ on stderr,
kept from the rank's stderr; the block itself writes to stderr as always (gloo's reason before an
abort must stay visible).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.distributed as dist

from common.costmodel.collectives import BY_TORCH_NAME
from common.launch import capture_stderr
from common.units import fmt_bytes

PREFIX = "gloo:"
# The profiler's names of the dtypes a collective moves (c10's), and their bytes an element.
ELEMENT_BYTES = {"double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                 "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
                 "c10::complex<double>": 16, "c10::complex<float>": 8}


@dataclass(frozen=True)
class GlooOp:
    """One operation gloo ran: its name ("all_reduce", as the span names it) and its input's bytes."""

    name: str
    input_bytes: int

    def kind(self) -> str:
        """The collective's name ("all-reduce"), or gloo's own for what is none (a barrier, a send)."""
        coll = BY_TORCH_NAME.get(self.name)
        return coll.name if coll else self.name

    def nbytes(self, k: int) -> int:
        """The buffer's size N (common.costmodel.collectives): an all-gather's span holds one rank's piece."""
        coll = BY_TORCH_NAME.get(self.name)
        return int(coll.nbytes_of_input(k, self.input_bytes)) if coll else self.input_bytes


@dataclass
class Ran:
    """What gloo ran during a `watching()` block, in the order its spans started (watched False: the
    block was not profiled on this rank, and nothing is known of what ran)."""

    ops: list[GlooOp] = field(default_factory=list)
    watched: bool = True

    def by_kind(self, k: int) -> dict[str, tuple[int, int]] | None:
        """Per operation kind: (calls, bytes of their buffers), N per call on a group of k ranks; None
        where the block was not watched (not "gloo ran nothing")."""
        if not self.watched:
            return None
        found: dict[str, tuple[int, int]] = {}
        for op in self.ops:
            calls, nbytes = found.get(op.kind(), (0, 0))
            found[op.kind()] = (calls + 1, nbytes + op.nbytes(k))
        return found


def _input_bytes(shapes: list, dtypes: list[str], name: str) -> int:
    """Bytes of a span's tensor inputs; a dtype this table does not know is an error, not a guess."""
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        if not isinstance(shape, list) or not dtype:
            continue
        if dtype not in ELEMENT_BYTES:
            raise ValueError(f"{name}: dtype {dtype!r} of a gloo buffer is not in gloo_ran.ELEMENT_BYTES")
        total += math.prod(shape) * ELEMENT_BYTES[dtype]
    return total


def read(events: list) -> list[GlooOp]:
    """The gloo operations among a profile's raw events (Kineto's: name(), shapes(), dtypes()), in
    the order they started (gloo runs them on several threads)."""
    spans = sorted((e for e in events if e.name().startswith(PREFIX)), key=lambda e: e.start_ns())
    return [GlooOp(e.name().removeprefix(PREFIX), _input_bytes(e.shapes(), e.dtypes(), e.name()))
            for e in spans]


@contextlib.contextmanager
def watching(on: bool = True, every_rank: bool = False) -> Iterator[Ran]:
    """Profile the block and fill the yielded Ran with what gloo ran in it (on=False: no profile, and
    the Ran says it was not watched; a loop profiles one step of many so). By default only rank 0 of
    the default group watches (the tables print rank 0's, every rank issues the same collectives):
    the profiler records every op, DTensor's many, and costs a rank some 0.1 s a step here, which
    four ranks on two cores pay in wall time. Wait for every collective inside the block: one still
    running when it ends may be missed."""
    if on and not every_rank and dist.is_initialized():
        on = dist.get_rank() == 0
    ran = Ran(watched=on)
    if not on:
        yield ran
        return
    profile = torch.autograd.profiler.profile(record_shapes=True)
    with capture_stderr():
        profile.__enter__()
    try:
        yield ran
    finally:
        with capture_stderr():
            profile.__exit__(None, None, None)
    ran.ops = read(profile.kineto_results.events())


ByKind = dict[str, tuple[float, float]]   # collective ("all-reduce") -> (calls, bytes of their buffers)
SHORT = {"all-gather": "AG", "reduce-scatter": "RS", "all-reduce": "AR", "broadcast": "BC"}
# What NCCL does where gloo substitutes (a kind handed, never run): the ring model prices NCCL's way.
NCCL_DOES = {"reduce-scatter": "NCCL runs a reduce-scatter as one: (p−1)/p·N a rank in the ring model, half "
                               "of an all-reduce's 2(p−1)/p·N"}


def per_step(by_kind: dict[str, tuple[int, int]] | None, steps: int) -> ByKind | None:
    """`by_kind` of `steps` steps as a step's (an integer where it divides); None if not watched."""
    if by_kind is None:
        return None
    def one(v: float) -> float:
        return int(v // steps) if v % steps == 0 else v / steps
    return {kind: (one(c), one(b)) for kind, (c, b) in by_kind.items()}


def ops_text(by_kind: ByKind) -> str:
    """'all-gather: 8 calls, 262,144 B; all-reduce: 7 calls, 229,376 B' (kinds in name order)."""
    return "; ".join(f"{kind}: {c:g} calls, {b:,.0f} B" for kind, (c, b) in sorted(by_kind.items()))


def bytes_text(by_kind: ByKind) -> str:
    """'all-gather 262,144 B; all-reduce 229,376 B': what moved by kind, however many calls."""
    return "; ".join(f"{kind} {b:,.0f} B" for kind, (_, b) in sorted(by_kind.items()))


def calls_short(by_kind: ByKind) -> str:
    """'8 AG + 28 AR' (SHORT's names; others as they are)."""
    return " + ".join(f"{c:g} {SHORT.get(kind, kind)}" for kind, (c, _) in sorted(by_kind.items())) or "none"


def total(by_kind: ByKind) -> str:
    """The bytes of every kind together, as printed (fmt_bytes)."""
    return fmt_bytes(sum(b for _, b in by_kind.values()))


def substitutions(handed: ByKind, ran: ByKind) -> tuple[ByKind, ByKind]:
    """(what was handed and never ran as itself, what gloo ran beyond what was handed): for a
    reduce-scatter run as all-reduces, ({"reduce-scatter": …}, {"all-reduce": …}); both empty when
    gloo ran what it was handed."""
    missing = {k: v for k, v in handed.items() if k not in ran}
    extra = {}
    for kind, (calls, nbytes) in ran.items():
        c, b = handed.get(kind, (0, 0))
        if (calls, nbytes) != (c, b):
            extra[kind] = (calls - c, nbytes - b)
    return missing, extra


def report(rep: Any, cases: list[tuple[str, tuple[str, str], ByKind, ByKind]], k: int) -> dict[str, str]:
    """The table of what each side handed its group (counted) beside what gloo ran (on the wire
    here), a step; what ran in another's place, in words; NCCL's way where gloo substitutes. A case
    (label, (wire, wire_bytes), handed, ran) records what ran under its names: `wire` its calls and
    bytes by kind, `wire_bytes` its bytes by kind (also returned, by that name)."""
    rows, said, nccl, moved = [], [], set(), {}
    for label, (wire, wire_bytes), handed, ran in cases:
        rows.append([label, calls_short(handed), total(handed), calls_short(ran), total(ran)])
        moved[wire_bytes] = bytes_text(ran)
        rep.value(wire, ops_text(ran))
        rep.value(wire_bytes, moved[wire_bytes])
        missing, extra = substitutions(handed, ran)
        if missing or extra:
            said.append(f"{label}: {calls_short(missing)} handed ({total(missing)}) ran as "
                        f"{calls_short(extra)} ({total(extra)})")
            nccl |= {NCCL_DOES[kind] for kind in missing if kind in NCCL_DOES}
    rep.line("  on the wire here: what gloo ran a step (its gloo:* spans in the profiler, rank 0), beside "
             "what the process group was handed (counted); N, the buffer, in bytes")
    rep.table(["side", "handed (counted)", "B handed", "gloo ran (on the wire here)", "B gloo ran"], rows,
              name="on_the_wire")
    legend = ", ".join(f"{short} {kind}" for kind, short in SHORT.items())
    rep.note(f"{legend}. " + ("; ".join(said) + f" (p = {k}). " if said else "gloo ran what it was handed. ")
             + ". ".join(sorted(nccl)))
    return moved
