"""Timing a real all-reduce on this machine, and reading a straight line t = a + b·N through it as
the ring's α and β (04_alpha_beta.py Part 2), and the claims that Part 2 reads off the fits.

One launch per process count; inside it every size is timed once per sweep, sweep after sweep, so
a slow spell of the machine hits all sizes of one sweep rather than one size of all sweeps. Each
sweep gets its own fit: the spread of those fits is how much "the" α and β move from run to run
(a lot, on 2 shared cores). A fit whose line has a negative intercept or slope, or whose α or β is
absurd for processes on one machine, has failed: it is reported as such, never as a number.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.distributed as dist

from common.costmodel import INFINIBAND, NVLINK, fit_line_relative, ring_alpha_beta_from_line
from common.output import EXACT, MEASURED, Report

# What a fit of processes on one machine may give and still be believed (outside: the fit failed).
MAX_ALPHA_S = 0.1     # 100 ms per round: a loaded machine, not a latency
BETA_RANGE_BPS = (1e6, 1e12)  # 1 MB/s … 1 TB/s: below, a broken run; above, faster than memory


def time_allreduce_worker(rank: int, world_size: int, sizes: list[int], sweeps: int) -> dict:
    """Rank code: per size one checked call; one warm-up sweep; then `sweeps` sweeps that time one
    all-reduce of every size each, after a barrier (so a late rank is not counted as transfer)."""
    buffers = [torch.full((max(1, n // 4),), rank + 1.0, dtype=torch.float32) for n in sizes]
    correct = []
    for x in buffers:
        dist.all_reduce(x)
        correct.append(bool(torch.all(x == world_size * (world_size + 1) / 2)))
    times = []
    for sweep in range(sweeps + 1):  # sweep 0 warms up and is dropped
        row = []
        for x in buffers:
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            row.append(time.perf_counter() - start)
        if sweep:
            times.append(row)
    return {"times": times, "correct": correct}


def slowest_rank(results: Sequence[dict]) -> list[list[float]]:
    """[sweep][size]: each call's time is the slowest rank's."""
    sweeps, sizes = len(results[0]["times"]), len(results[0]["times"][0])
    return [[max(r["times"][s][i] for r in results) for i in range(sizes)] for s in range(sweeps)]


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
            "ratio": spread([s[small] / s[sizes.index(2**10)] for s in sweeps] if small is not None else [None]),
            "fit": (statistics.median(f.intercept_s for f in good), statistics.median(f.slope_s_per_byte for f in good))
            if good else None}


# ---- the claims 04 Part 2 makes from the fits ----------------------------------------------------
def claims(rep: Report, runs: dict[int, dict], notes_alpha_s: float) -> None:
    """The notes' 4-process fit (about 130 µs, about 4 GB/s) and 1 KiB ≈ 16 KiB: claims, or 'not measured'."""
    k = 4 if 4 in runs else max(runs)
    run = runs[k]
    machine = "measured here: processes over the loopback on a shared machine, the notes' on another"
    for what, sp, scale, notes, unit in (("α per round", run["alpha"], 1e6, notes_alpha_s * 1e6, "µs"),
                                         ("effective bandwidth β", run["beta"], 1e-9, 4, "GB/s")):
        if sp.measured:
            why = (f"{machine}; median of {sp.used} sweeps' fits, range {sp.low * scale:.3g} … {sp.high * scale:.3g} "
                   f"{unit}; the notes' 'about' read as within a factor of 2")
        else:
            why = (f"not measured: the fit failed in {sp.total - sp.used} of {sp.total} sweeps (a negative or "
                   "absurd α or β): the timings were too noisy for a line; rerun on a quieter machine or with "
                   "more --repeats")
        rep.claim(f"{k} processes: {what}", sp.median * scale if sp.measured else None, notes if k == 4 else None,
                  unit, MEASURED, factor=2, setting=("quick",), ref="L14-3.4-gloo-fit", why=why)
    loopback_claims(rep, k, run["alpha"], notes_alpha_s)
    ratio = run["ratio"]
    rep.claim("t(16 KiB) / t(1 KiB) below 2 (16× the bytes, almost the same time)",
              bool(ratio.median < 2) if ratio.used else None, True, kind=MEASURED, setting=("quick",),
              ref="L14-3.4-1k-16k-equally-slow",
              why=(f"median ratio {ratio.median:.2f} over {ratio.used} sweeps ({ratio.low:.2f} … {ratio.high:.2f}), "
                   f"{k} processes; 'almost equally slow' read as less than 2×") if ratio.used else "not timed")


def loopback_claims(rep: Report, k: int, alpha: Spread, notes_alpha_s: float) -> None:
    """'Loopback latency is two orders of magnitude above NVLink / InfiniBand'. The notes give no
    latency for those links; the only one they print is their α-β model's 5 µs (§3.4), which the
    suite's NVLink- and InfiniBand-class presets use too. Two orders of magnitude = a ratio within a
    factor √10 of 100 (31.6 … 316: log10 of it rounds to 2)."""
    link_alpha = min(NVLINK.alpha_s, INFINIBAND.alpha_s)
    reading = f"'two orders of magnitude' read as 100 within a factor √10; link α {link_alpha * 1e6:g} µs (the notes' model)"
    rep.claim(f"{k} processes: fitted α per round / NVLink-InfiniBand α", alpha.median / link_alpha if alpha.measured
              else None, 100, "×", MEASURED, factor=10 ** 0.5, setting=("quick",), ref="L14-3.4-loopback-100x",
              why=f"median α {alpha.median * 1e6:.3g} µs / {link_alpha * 1e6:g} µs; {reading}" if alpha.measured else
              "not measured: the fit failed in every sweep (see the lines above)")
    notes_ratio = notes_alpha_s / link_alpha
    rep.claim(f"the notes' own figures: {notes_alpha_s * 1e6:g} µs / {link_alpha * 1e6:g} µs", notes_ratio, 100, "×", EXACT, factor=10 ** 0.5,
              setting=(), ref="L14-3.4-loopback-100x",
              why=f"{notes_ratio:.3g}× is {math.log10(notes_ratio):.2f} orders of magnitude, not two: the notes' fitted "
                  "loopback α against the α their own model gives a fast link; two orders would need a link latency "
                  f"near {notes_alpha_s / 100 * 1e6:.2g} µs")
