"""How far a model-only script's flags go: each flag whose cost grows has a Bound, the largest value
that keeps a run within seconds here, checked before any work. A larger value is a usage error of
one line that says what the flag costs and the largest value that fits:

    BOUNDS = {"world_size": Bound(2048, "Part 1 counts each of the ring's 2p(p−1) messages ...")}
    parser = make_parser(__doc__, world_size=4, bounds=BOUNDS)
    # --world-size 4096: "--world-size 4,096: Part 1 counts …; at most --world-size 2,048"

When flags cost together (micro-batches × their size × the values of n trained), `largest` is a
function of the parsed flags, usually `largest_fitting` over the script's cost, and `given` names
the flags it read: "at most --micro-batches 17,476 at --micro-batch-size 32 --sync-every 8".

A flag that needs no Bound costs the same at any value: a closed form (common.costmodel.collectives lists
no K positions for a ring, so --tp 10^9 costs what --tp 8 does), or a count fixed by the notes'
models. Devices are the exception, bounded whatever they cost (check_devices): a model's
--world-size, --tp, --pp and --dp, and one split's TP × PP × DP, go up to MAX_MODEL_WORLD.

The real scripts' limits are common.run_cost's: minutes and memory of real processes on this machine.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Callable

from common.error_types import UsageError

# What a model-only script may take: 1.5 s at the notes' setting (bench/bench_scripts.py's target),
# and at the largest value its Bounds accept, all together, about MODEL_BUDGET_S of CPU and at most
# MODEL_MEMORY_BYTES on the 2-core reference machine (bench_scripts.py --largest times them).
MODEL_BUDGET_S = 5.0
MODEL_MEMORY_BYTES = 2**30
MAX_MODEL_WORLD = 4096  # devices in a model: the notes reach 256; a ring all-reduce has 2K(K−1)
# messages, so a model counted round by round stays within the budget only up to a few thousand
SPLIT = {"tp": "TP", "pp": "PP", "dp": "DP"}  # one model split over devices: TP × PP × DP of them


@dataclass(frozen=True)
class Bound:
    """The largest value a model script's flag accepts, and `why`: what the run does per unit of it
    here (a cost measured on the reference machine, in words)."""

    largest: int | Callable[[argparse.Namespace], int]
    why: str
    given: tuple[str, ...] = ()  # the flags (dests) `largest` reads, named after it: "at --pp 128"

    def at(self, args: argparse.Namespace) -> int:
        return self.largest(args) if callable(self.largest) else self.largest


def largest_fitting(args: argparse.Namespace, dest: str, fits: Callable[[argparse.Namespace], bool],
                    high: int) -> int:
    """The largest value of `dest` from 1 to `high`, the other flags as given, for which `fits`
    holds (fits is true, then false, as the value grows); 0 when none does."""
    def ok(value: int) -> bool:
        return fits(argparse.Namespace(**{**vars(args), dest: value}))

    if not ok(1):
        return 0
    low, high = 1, high + 1
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


class Flags:
    """A parser's flags as a message names them: dest -> '--flag', a size shown as one is typed."""

    def __init__(self, names: dict[str, str], sizes: frozenset[str] = frozenset()) -> None:
        self.names, self.sizes = names, sizes

    def shown(self, dest: str, value: int) -> str:
        if dest in self.sizes:
            for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
                if value >= size and value % size == 0:
                    return f"{self.names[dest]} {value // size:,}{unit}"
            return f"{self.names[dest]} {value:,} B"
        return f"{self.names[dest]} {value:,}"

    def too_large(self, dest: str, value: int, why: str, largest: int, given: tuple[str, ...],
                  args: argparse.Namespace) -> UsageError:
        """The one wording: '--flag VALUE: why; at most --flag LARGEST at --other V'."""
        at = (" at " + " ".join(self.shown(g, getattr(args, g)) for g in given)) if given else ""
        fix = f"at most {self.shown(dest, largest)}{at}" if largest >= 1 else \
            f"no {self.names[dest]} fits{at}: lower those"
        return UsageError(f"{self.shown(dest, value)}: {why}; {fix}")


def check_bounds(bounds: dict[str, Bound], args: argparse.Namespace, flags: Flags) -> None:
    """UsageError for a flag past its bound. Flags that cost together may each be past theirs: the
    two that fit with the least change are named, as common.run_cost names a real run's."""
    over = [(dest, bound, bound.at(args)) for dest, bound in bounds.items()
            if getattr(args, dest, None) is not None and getattr(args, dest) > bound.at(args)]
    if not over:
        return
    fixable = sorted((o for o in over if o[2] >= 1), key=lambda o: getattr(args, o[0]) / o[2])
    dest, bound, largest = (fixable or over)[0]
    if len(fixable) < 2:
        raise flags.too_large(dest, getattr(args, dest), bound.why, largest, bound.given, args)
    options = ", or ".join(flags.shown(d, most) for d, _, most in fixable[:2])
    setting = " ".join(flags.shown(d, getattr(args, d)) for d, _, _ in over)
    raise UsageError(f"{setting}: {bound.why}; at most {options} (the others as given)")


def check_world(world: int, flags: Flags, args: argparse.Namespace) -> None:
    """A model's --world-size: its devices, up to MAX_MODEL_WORLD."""
    if world > MAX_MODEL_WORLD:
        raise flags.too_large("world_size", world, f"a model goes up to {MAX_MODEL_WORLD:,} devices",
                              MAX_MODEL_WORLD, (), args)


def check_split(args: argparse.Namespace, flags: Flags) -> None:
    """A model's split over devices (--tp, --pp, --dp, those it has): TP × PP × DP devices, up to
    MAX_MODEL_WORLD; the axis set highest is the one named, with the largest value that fits."""
    axes = {dest: getattr(args, dest) for dest in SPLIT if getattr(args, dest, None) is not None}
    devices = math.prod(axes.values())
    if devices <= MAX_MODEL_WORLD:
        return
    dest = max(axes, key=lambda d: axes[d])
    others = tuple(d for d in axes if d != dest)
    product = " × ".join(SPLIT[d] for d in axes)
    why = (f"{product} = {' × '.join(f'{v:,}' for v in axes.values())} = {devices:,} devices, and a model "
           f"goes up to {MAX_MODEL_WORLD:,}" if others else f"a model goes up to {MAX_MODEL_WORLD:,} devices")
    largest = MAX_MODEL_WORLD // math.prod(axes[d] for d in others)
    raise flags.too_large(dest, axes[dest], why, largest, others, args)
