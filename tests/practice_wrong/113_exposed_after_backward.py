"""WRONG on purpose (problem 113): the exposed time sums the all-reduces that START after the backward
ends, so a bucket still running when the backward ends counts for nothing."""

from __future__ import annotations

from _right_113 import allreduce_time, assign_buckets, spans_of  # noqa: F401  (right ones, beside this file)


def timeline(param_bytes: list[int], buckets: list[list[int]], ready_s: list[float], world_size: int,
             alpha_s: float, beta_Bps: float) -> tuple[list[tuple[float, float]], float, float]:
    spans = spans_of(param_bytes, buckets, ready_s, world_size, alpha_s, beta_Bps)
    backward_end = max(ready_s)
    step_end = max([backward_end] + [end for _, end in spans])
    # WRONG: only what starts after the backward; a bucket running across its end is missed
    exposed = sum(end - start for start, end in spans if start >= backward_end)
    return spans, step_end, exposed
