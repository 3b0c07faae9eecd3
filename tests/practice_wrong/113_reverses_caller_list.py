"""WRONG on purpose (problem 113): right buckets, but assign_buckets reverses the list it was
given, in place: the caller's param_bytes comes back changed."""

from __future__ import annotations


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    param_bytes.reverse()                                  # WRONG: reverses the caller's list in place
    for position, size in enumerate(param_bytes):          # (the buckets themselves come out right)
        index = len(param_bytes) - 1 - position
        current.append(index)
        filled += size
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
