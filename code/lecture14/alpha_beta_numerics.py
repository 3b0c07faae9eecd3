"""The numerics of 04_alpha_beta.py, no lesson of their own: where two all-reduce time formulas cross,
found by search (Part 1's independent check of the closed forms), and timings of a real all-reduce
(Part 2 measures them) read as a straight line t = a + b·N, the line as the ring's α and β.

Each sweep gets its own fit: the spread of those fits is how much "the" α and β move from run to
run (a lot, on 2 shared cores). A fit whose line has a negative intercept or slope, or whose α or β
is absurd for processes on one machine, has failed: it is reported as such, never as a number.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link, fit_line_relative, ring_alpha_beta_from_line
from lecture14.costmodel import COMPARED_ALLREDUCES

# ---- Part 1: crossovers by search -----------------------------------------------------------

def numeric_crossover(f: Callable[[float], float], g: Callable[[float], float],
                      lo: float, hi: float) -> float | None:
    """Where f - g changes sign between lo and hi bytes: a log-spaced scan, then bisection.

    An independent check of the closed forms: it only evaluates the two time functions.
    """
    grid = np.geomspace(lo, hi, 600)
    diff = [f(n) - g(n) for n in grid]
    for i in range(len(grid) - 1):
        if diff[i] * diff[i + 1] < 0:
            a, b = float(grid[i]), float(grid[i + 1])
            for _ in range(200):
                mid = 0.5 * (a + b)
                if (f(a) - g(a)) * (f(mid) - g(mid)) <= 0:
                    b = mid
                else:
                    a = mid
            return 0.5 * (a + b)
    return None


def search_range(link: Link) -> tuple[float, float]:
    """Crossovers sit at a multiple of α·β bytes (about 1/K up to about K/log2 K of it); no message
    is smaller than a byte, so the search starts there at the lowest."""
    scale = max(link.alpha_s * link.beta_Bps, 1.0)
    return max(scale * 1e-9, 1.0), scale * 1e9


def winner_ranges(k: int, link: Link) -> list[tuple[float, str]]:
    """(from bytes, fastest algorithm) for each range of sizes, found by scanning and bisection."""
    def fastest(n: float) -> str:
        times = {name.removesuffix(" all-reduce"): algorithm(name).time(k, n, link)
                 for name in COMPARED_ALLREDUCES}
        return min(times, key=times.__getitem__)  # exact ties only at K = 2 (tree = naive, ring faster)

    grid = np.geomspace(*search_range(link), 1200)
    ranges = [(float(grid[0]), fastest(grid[0]))]
    for lo, hi in zip(grid[:-1], grid[1:]):
        if fastest(hi) == ranges[-1][1]:
            continue
        for _ in range(100):  # the change lies in (lo, hi]
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if fastest(mid) == ranges[-1][1] else (lo, mid)
        ranges.append((float(hi), fastest(hi)))
    return ranges



# ---- Part 2: a line through timings -----------------------------------------------------------

# What a fit of processes on one machine may give and still be believed (outside: the fit failed).
MAX_ALPHA_S = 0.1     # 100 ms per round: a loaded machine, not a latency
BETA_RANGE_BPS = (1e6, 1e12)  # 1 MB/s … 1 TB/s: below, a broken run; above, faster than memory


@dataclass(frozen=True)
class RingFit:
    """A line t = a + b·N read as the ring's 2(K−1)(α + N/(Kβ)); `failed` says why not, if not."""

    intercept_s: float
    slope_s_per_byte: float
    alpha_s: float
    beta_Bps: float
    failed: str = ""


def fit_ring(k: int, sizes: Sequence[float], times: Sequence[float]) -> RingFit:
    """Fit a line in relative error and read α, β from it; a negative or absurd value fails."""
    a, b = fit_line_relative(sizes, times)
    alpha, beta = ring_alpha_beta_from_line(k, a, b)
    failed = ""
    if a <= 0:
        failed = f"negative intercept ({a * 1e6:.3g} µs): the small sizes are no faster than the line allows"
    elif b <= 0:
        failed = f"negative slope ({b * 1e9:.3g} ns/B): larger messages were not slower"
    elif alpha > MAX_ALPHA_S:
        failed = f"α = {alpha:.3g} s per round is no latency (a loaded machine)"
    elif not BETA_RANGE_BPS[0] <= beta <= BETA_RANGE_BPS[1]:
        failed = f"β = {beta:.3g} B/s is outside {BETA_RANGE_BPS[0]:g} … {BETA_RANGE_BPS[1]:g} B/s"
    return RingFit(a, b, alpha, beta, failed)


@dataclass(frozen=True)
class Spread:
    """Median and range of one quantity over the fits that did not fail."""

    median: float
    low: float
    high: float
    used: int   # fits that gave a value
    total: int  # fits tried

    @property
    def measured(self) -> bool:
        """A majority of the fits succeeded: the median means something."""
        return self.used * 2 > self.total


def spread(values: Sequence[float | None]) -> Spread:
    good = [v for v in values if v is not None]
    if not good:
        return Spread(float("nan"), float("nan"), float("nan"), 0, len(values))
    return Spread(statistics.median(good), min(good), max(good), len(good), len(values))


def spread_text(sp: Spread, fmt: Callable[[float], str]) -> str:
    """'median [least … most]', or 'fit failed' when no sweep gave a value."""
    return f"{fmt(sp.median)} [{fmt(sp.low)} … {fmt(sp.high)}]" if sp.used else "fit failed"


def summarize_run(k: int, sizes: Sequence[int], sweeps: list[list[float]], correct: list[bool]) -> dict:
    """Per size median and range over the sweeps; a fit per sweep; α, β and t(16 KiB)/t(1 KiB) spreads."""
    by_size = [[sweep[i] for sweep in sweeps] for i in range(len(sizes))]
    fits = [fit_ring(k, sizes, sweep) for sweep in sweeps]
    small = sizes.index(16 * 2**10) if 16 * 2**10 in sizes and 2**10 in sizes else None
    good = [f for f in fits if not f.failed]
    return {"sweeps": sweeps, "correct": correct, "fits": fits,
            "median": [statistics.median(t) for t in by_size], "low": [min(t) for t in by_size],
            "high": [max(t) for t in by_size],
            "alpha": spread([None if f.failed else f.alpha_s for f in fits]),
            "beta": spread([None if f.failed else f.beta_Bps for f in fits]),
            "ratio": spread([s[small] / s[sizes.index(2**10)] for s in sweeps] if small is not None
                            else [None]),
            "fit": (statistics.median(f.intercept_s for f in good),
                    statistics.median(f.slope_s_per_byte for f in good))
            if good else None}
