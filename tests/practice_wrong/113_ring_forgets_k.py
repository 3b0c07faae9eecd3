"""WRONG on purpose (problem 113): each of the 2(K − 1) messages carries the whole n bytes, not n/K."""

from __future__ import annotations

from _right_113 import assign_buckets, timeline  # noqa: F401  (right ones, beside this file)


def allreduce_time(nbytes: int, world_size: int, alpha_s: float, beta_Bps: float) -> float:
    return 2 * (world_size - 1) * (alpha_s + nbytes / beta_Bps)        # WRONG: n, not n/K
