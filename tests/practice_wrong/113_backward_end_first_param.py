"""WRONG on purpose (problem 113): the backward is taken to end when parameter 0's gradient is ready
(the first layer's, usually last), not at the latest ready time."""

from __future__ import annotations

from _right_113 import allreduce_time, assign_buckets, spans_of  # noqa: F401  (right ones, beside this file)


def timeline(param_bytes: list[int], buckets: list[list[int]], ready_s: list[float], world_size: int,
             alpha_s: float, beta_Bps: float) -> tuple[list[tuple[float, float]], float, float]:
    spans = spans_of(param_bytes, buckets, ready_s, world_size, alpha_s, beta_Bps)
    backward_end = ready_s[0]                              # WRONG: not max(ready_s)
    step_end = max([backward_end] + [end for _, end in spans])
    return spans, step_end, step_end - backward_end
