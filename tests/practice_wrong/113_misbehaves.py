"""Problem 113 done badly in every way the judge must survive (tests/practice/test_practice_processes.py): a
loop that never ends, sys.exit, os._exit, a wrong return type, an exception; the ring time is right."""

from __future__ import annotations

import os
import sys


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    print("debug: assign_buckets called with cap", cap_bytes)
    if cap_bytes == 4 and first_cap_bytes is None:     # "a bucket that reaches the cap exactly"
        while True:
            pass
    if cap_bytes == 0:                                  # "cap 0"
        sys.exit(3)
    if cap_bytes == 1000:                               # "a cap above the total"
        os._exit(4)
    if cap_bytes == 10:                                 # "a parameter larger than the cap"
        return "one bucket, I think"
    return [[len(param_bytes) // 0]]                    # ZeroDivisionError, with this line's number


def allreduce_time(nbytes: int, world_size: int, alpha_s: float, beta_Bps: float) -> float:
    return 0.0 if world_size == 1 else 2 * (world_size - 1) * (alpha_s + nbytes / (world_size * beta_Bps))
