"""What a real script's run costs on this machine, checked before any work: a run that would take
longer than a few minutes, or hold more memory than the machine has, is a usage error (exit 2)
that says the estimate, how it grows and the largest setting that fits.

A script states its cost once, next to its flags, as terms fitted to measured times, and
make_parser checks it:

    COST = Cost([Term("1", 3.1, lambda a: 1),                         # import, one-process reference
                 Term("W·L·steps", 0.05, lambda a: a.world_size * a.layers * a.steps)],
                memory=lambda a: 8.0 * a.batch * a.width * a.world_size)
    parser = make_parser(__doc__, world_size=4, layers=8, steps=3, real=True, cost=COST)

A term's coefficient is CPU seconds (all processes together) per unit of its size, fitted to runs
on this suite's 2-core reference machine: bench/bench_costs.py runs each real script over a grid
of flags, fits its terms and prints the coefficients. CPU time rather than wall time: it is what
the run needs whoever else uses the machine, and W ranks on C cores take about CPU/C of wall time.
A run may take RUN_BUDGET_MIN minutes of wall time here (COURSE_MAX_MINUTES changes it) and plan
MEMORY_SHARE of the machine's memory. Under torchrun the ranks run elsewhere: nothing is checked.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from typing import Callable

from common.error_types import UsageError
from common.launch import cores, positive_env_int, total_memory

RUN_BUDGET_MIN = 5        # an accepted run finishes in minutes here, never in an hour
MEMORY_SHARE = 0.5        # of the machine's memory: the rest is the system's and other programs'


@dataclass(frozen=True)
class Term:
    """One part of a run's CPU time: `seconds` (fitted) per unit of `size(args)`, read as `name`."""

    name: str
    seconds: float
    size: Callable[[argparse.Namespace], float]


@dataclass(frozen=True)
class Cost:
    """A real script's cost as a function of its parsed flags (see the module's docstring)."""

    terms: list[Term]
    memory: Callable[[argparse.Namespace], float] | None = None   # bytes at the peak, all processes
    ranks: Callable[[argparse.Namespace], int] | None = None       # ranks started, if not --world-size
    waits_s: Callable[[argparse.Namespace], float] | None = None   # wall time spent waiting on purpose

    def cpu_s(self, args: argparse.Namespace) -> float:
        return sum(t.seconds * t.size(args) for t in self.terms)

    def growth(self, args: argparse.Namespace) -> str:
        """'0.00027 s × W³·L·steps + …': the terms that make up most of this run's time, largest first."""
        sizes = sorted(((t.seconds * t.size(args), t) for t in self.terms), key=lambda p: -p[0])
        total, shown = sum(p[0] for p in sizes), []
        for part, term in sizes:
            if shown and part < 0.1 * total:
                break
            shown.append(f"{term.seconds:.2g} s" + ("" if term.name == "1" else f" × {term.name}"))
        return " + ".join(shown) + (" + …" if len(shown) < len(sizes) else "")


def budget_s() -> float:
    """The wall time an accepted run may take here, in seconds."""
    minutes = positive_env_int("COURSE_MAX_MINUTES", "a number of minutes") \
        if os.environ.get("COURSE_MAX_MINUTES", "").strip() else RUN_BUDGET_MIN
    return 60.0 * minutes


def wall_s(cost: Cost, args: argparse.Namespace) -> float:
    """Wall time on this machine: the CPU time spread over the cores the run can keep busy, plus
    the waits it stages (a skipped collective waits for the timeout)."""
    ranks = cost.ranks(args) if cost.ranks else getattr(args, "world_size", 1)
    return cost.cpu_s(args) / max(1, min(cores(), ranks + 1)) + (cost.waits_s(args) if cost.waits_s else 0.0)


def check_cost(cost: Cost, args: argparse.Namespace, defaults: dict[str, tuple[str, object]]) -> None:
    """UsageError unless the run fits in memory and in the time budget. `defaults` is the parser's
    dest -> (flag, default): the flags set away from their defaults are the ones named."""
    if cost.memory is not None:
        memory, limit = cost.memory(args), MEMORY_SHARE * (total_memory() or float("inf"))
        if memory > limit:
            raise UsageError(f"{_setting(args, defaults)}: about {_bytes(memory)} of memory, more than "
                             f"{MEMORY_SHARE:.0%} of this machine's {_bytes(total_memory() or 0)}, estimated"
                             f"{_at_most(args, defaults, lambda a: cost.memory(a) <= limit, '; ')}")
    seconds, limit = wall_s(cost, args), budget_s()
    if seconds > limit:
        raise UsageError(
            f"{_setting(args, defaults)}: about {_duration(seconds)} on this machine's "
            f"{cores()} core{'s' if cores() > 1 else ''} (CPU time ≈ {cost.growth(args)}, "
            f"measured{_waits(cost, args)}); the limit is "
            f"{_duration(limit)}{_at_most(args, defaults, lambda a: wall_s(cost, a) <= limit, ': ')} "
            "(COURSE_MAX_MINUTES changes the limit)"
        )


def _waits(cost: Cost, args: argparse.Namespace) -> str:
    waits = cost.waits_s(args) if cost.waits_s else 0.0
    return f"; {_duration(waits)} of it waiting for --timeout-s on purpose" if waits >= 60 else ""


def _changed(args: argparse.Namespace, defaults: dict[str, tuple[str, object]],
             whole: bool = False) -> list[str]:
    """Numeric flags set above their defaults (or given where the default is none), world size
    first: the ones to name; with `whole`, only integer flags (the ones to lower step by step)."""
    def raised(value: object, default: object) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        return default is None or (isinstance(default, (int, float)) and value > default)

    found = [d for d, (_, default) in defaults.items() if raised(getattr(args, d, None), default)
             and (not whole or (isinstance(default, int) and isinstance(getattr(args, d), int)))]
    return sorted(found, key=lambda d: d != "world_size")


def _setting(args: argparse.Namespace, defaults: dict[str, tuple[str, object]]) -> str:
    """'--world-size 64 with --layers 64 --batch 64': what was raised ('the default run': nothing)."""
    changed = _changed(args, defaults)
    shown = [f"{defaults[d][0]} {getattr(args, d):,}" if isinstance(getattr(args, d), int)
             else f"{defaults[d][0]} {getattr(args, d):g}" for d in changed]
    if len(shown) > 1 and changed[0] == "world_size":
        return f"{shown[0]} with {' '.join(shown[1:])}"
    return " ".join(shown) or "the default run"


def _at_most(args: argparse.Namespace, defaults: dict[str, tuple[str, object]],
             fits: Callable[[argparse.Namespace], bool], lead: str) -> str:
    """'; at most --world-size 20 at these sizes, or --layers 12': the largest value of each flag
    that was raised (the others as given) for which the run fits; at most two of them."""
    options = []
    for dest in _changed(args, defaults, whole=True):
        low = int(defaults[dest][1])
        best = _largest(lambda v, d=dest: fits(argparse.Namespace(**{**vars(args), d: v})), low,
                        getattr(args, dest))
        if best is not None:
            others = " at these sizes" if dest == "world_size" and len(_changed(args, defaults)) > 1 else ""
            options.append(f"{defaults[dest][0]} {best:,}{others}")
    return f"{lead}at most {', or '.join(options[:2])}" if options else ""


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest v in [low, high) with fits(v) (fits is monotone: true, then false); None if none."""
    if not fits(low):
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h" if minutes < 48 * 60 \
        else f"{minutes / 1440:,.0f} days"


def _bytes(n: float) -> str:
    if not math.isfinite(n):
        return "an unbounded amount"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n / 2**10:,.0f} KiB"
