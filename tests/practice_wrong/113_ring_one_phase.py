"""WRONG on purpose (problem 113): only the reduce-scatter's K − 1 steps, the all-gather forgotten."""

from __future__ import annotations

from _right_113 import assign_buckets, timeline  # noqa: F401  (right ones, beside this file)


def allreduce_time(nbytes: int, world_size: int, alpha_s: float, beta_Bps: float) -> float:
    return (world_size - 1) * (alpha_s + nbytes / (world_size * beta_Bps))   # WRONG: K − 1, not 2(K − 1)
