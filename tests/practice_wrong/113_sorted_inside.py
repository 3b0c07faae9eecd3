"""WRONG on purpose (problem 113): each bucket's indices come back sorted, not in the order they were
added (the last parameter first): the same sets, in the wrong order."""

from __future__ import annotations

from _right_113 import allreduce_time, timeline  # noqa: F401  (right ones, beside this file)
from _right_113 import assign_buckets as _right_buckets


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    return [sorted(bucket) for bucket in _right_buckets(param_bytes, cap_bytes, first_cap_bytes)]   # WRONG
