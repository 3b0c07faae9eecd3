"""WRONG on purpose (problem 113): the timeline costs each bucket in MB (bytes / 10^6) where
allreduce_time takes bytes, so every all-reduce is far too short."""

from __future__ import annotations

from _right_113 import allreduce_time, assign_buckets  # noqa: F401  (right ones, beside this file)


def timeline(param_bytes: list[int], buckets: list[list[int]], ready_s: list[float], world_size: int,
             alpha_s: float, beta_Bps: float) -> tuple[list[tuple[float, float]], float, float]:
    spans, free_at = [], 0.0
    for bucket in buckets:
        start = max(max(ready_s[i] for i in bucket), free_at)
        megabytes = sum(param_bytes[i] for i in bucket) / 1e6          # WRONG: allreduce_time takes bytes
        free_at = start + allreduce_time(megabytes, world_size, alpha_s, beta_Bps)
        spans.append((start, free_at))
    backward_end = max(ready_s)
    step_end = max([backward_end] + [end for _, end in spans])
    return spans, step_end, step_end - backward_end
