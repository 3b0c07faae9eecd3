"""Reference solution of problem 113, written as a student would (no suite imports): the judge
compares it with lecture15/ddp_sim.py and common/costmodel/collectives.py."""

from __future__ import annotations


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index in reversed(range(len(param_bytes))):       # backward produces the last parameters first
        current.append(index)
        filled += param_bytes[index]
        limit = first_cap_bytes if (first_cap_bytes is not None and not buckets) else cap_bytes
        if filled >= limit:                                # sealed after adding, once it reaches the cap
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def allreduce_time(nbytes: int, world_size: int, alpha_s: float, beta_Bps: float) -> float:
    if world_size == 1:
        return 0.0
    return 2 * (world_size - 1) * (alpha_s + nbytes / (world_size * beta_Bps))


def timeline(param_bytes: list[int], buckets: list[list[int]], ready_s: list[float], world_size: int,
             alpha_s: float, beta_Bps: float) -> tuple[list[tuple[float, float]], float, float]:
    spans, free_at = [], 0.0
    for bucket in buckets:                                 # one stream, bucket-index order
        start = max(max(ready_s[i] for i in bucket), free_at)
        free_at = start + allreduce_time(sum(param_bytes[i] for i in bucket), world_size, alpha_s, beta_Bps)
        spans.append((start, free_at))
    backward_end = max(ready_s)
    step_end = max([backward_end] + [end for _, end in spans])
    return spans, step_end, step_end - backward_end
