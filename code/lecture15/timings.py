"""Timings of collective steps as lecture 15's real scripts report them (model_vs_real.py,
my_ddp_check.py): a step ends when its slowest rank does, and a time is shown as its median with
the range of the repeats. Presentation only: no process is started here."""

from __future__ import annotations

import statistics


def slowest_rank(per_rank: list[list[float]]) -> list[float]:
    """Each repeat's time as the slowest rank saw it: a collective step ends when its last rank does."""
    return [max(times) for times in zip(*per_rank)]


def spread_ms(times: list[float], digits: int = 2) -> str:
    """Median (min–max) in ms."""
    low, mid, high = (f"{t * 1e3:.{digits}f}" for t in (min(times), statistics.median(times), max(times)))
    return f"{mid} ({low}–{high})"
