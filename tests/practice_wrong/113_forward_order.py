"""WRONG on purpose (problem 113): the buckets are filled walking the parameters FORWARD, in
registration order, where DDP walks them in reverse (backward's order)."""

from __future__ import annotations

from _right_113 import allreduce_time, timeline  # noqa: F401  (right ones, beside this file)


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index in range(len(param_bytes)):                  # WRONG: forward, not reversed
        current.append(index)
        filled += param_bytes[index]
        limit = first_cap_bytes if (first_cap_bytes is not None and not buckets) else cap_bytes
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets
