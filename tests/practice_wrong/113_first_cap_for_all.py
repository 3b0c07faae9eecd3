"""WRONG on purpose (problem 113): first_cap_bytes, when given, caps every bucket, not only the first."""

from __future__ import annotations

from _right_113 import allreduce_time, timeline  # noqa: F401  (right ones, beside this file)


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    limit = cap_bytes if first_cap_bytes is None else first_cap_bytes   # WRONG: for every bucket
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets
