"""Problem 113 with debugging left in (tests/practice/test_practice_processes.py): each case's arguments
choose how it asks for input. The judge gives none, whatever its own stdin is (a terminal, a pipe nobody
writes to, /dev/null): each must fail at once, naming the call and its line.
  exercise 3 (cap 12 MB)   breakpoint()
  exactly at cap (cap 4)   input()
  cap 0                    pdb.set_trace()
  cap above total (1000)   sys.stdin.read()
The other cases answer right."""

from __future__ import annotations

import sys

MB = 10**6


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    if cap_bytes == 12 * MB:
        breakpoint()                                       # line 20
    elif cap_bytes == 4 and first_cap_bytes is None:
        input("continue? ")                                # line 22
    elif cap_bytes == 0:
        import pdb
        pdb.set_trace()                                    # line 25
    elif cap_bytes == 1000:
        sys.stdin.read()                                   # line 27
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled >= (first_cap_bytes if (first_cap_bytes is not None and not buckets) else cap_bytes):
            buckets.append(current)
            current, filled = [], 0
    return buckets + ([current] if current else [])


def allreduce_time(nbytes: int, world_size: int, alpha_s: float, beta_Bps: float) -> float:
    return 0.0 if world_size == 1 else 2 * (world_size - 1) * (alpha_s + nbytes / (world_size * beta_Bps))


def timeline(param_bytes: list[int], buckets: list[list[int]], ready_s: list[float], world_size: int,
             alpha_s: float, beta_Bps: float) -> tuple[list[tuple[float, float]], float, float]:
    spans, free_at = [], 0.0
    for bucket in buckets:
        start = max(max(ready_s[i] for i in bucket), free_at)
        free_at = start + allreduce_time(sum(param_bytes[i] for i in bucket), world_size, alpha_s, beta_Bps)
        spans.append((start, free_at))
    step_end = max([max(ready_s)] + [end for _, end in spans])
    return spans, step_end, step_end - max(ready_s)
