"""WRONG on purpose (problem 113): the bucket still open after the last parameter is dropped (only
sealed buckets are returned), so parameters whose bytes never reach the cap get no bucket."""

from __future__ import annotations

from _right_113 import allreduce_time, timeline  # noqa: F401  (right ones, beside this file)


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        limit = first_cap_bytes if (first_cap_bytes is not None and not buckets) else cap_bytes
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    return buckets                                         # WRONG: `current` may still hold parameters
