"""Problem 113, right, but writing files where a case should not (tests/practice/test_practice_processes.py).
Each case's arguments choose where; JUDGE_TEST_OUTSIDE names a folder of the test's, and
JUDGE_TEST_OLD a file that was there before the judge started:
  exercise 3 (cap 12 MB)   a log beside this file (Path(__file__)): removed, said
  exactly at cap (cap 4)   a relative path (the case's own folder: nothing to say), and a folder with
                           a file in it under JUDGE_TEST_OUTSIDE: both removed, said
  cap 0                    appends to JUDGE_TEST_OLD: said, left (the judge has no copy of it)
  cap above total (1000)   torch.save beside this file: C++ writes it, no audit event; the listing
                           of the solution's folder shows it: said, left
The other cases write nothing."""

from __future__ import annotations

import os
from pathlib import Path

import torch

MB = 10**6


def _right(param_bytes: list[int], cap_bytes: int, first_cap_bytes: int | None) -> list[list[int]]:
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        filled += param_bytes[index]
        if filled >= (first_cap_bytes if (first_cap_bytes is not None and not buckets) else cap_bytes):
            buckets.append(current)
            current, filled = [], 0
    return buckets + ([current] if current else [])


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    outside = Path(os.environ["JUDGE_TEST_OUTSIDE"])
    if cap_bytes == 12 * MB:
        Path(__file__).with_name("beside.log").write_text("debug\n")
    elif cap_bytes == 4 and first_cap_bytes is None:
        Path("relative.txt").write_text("mine\n")
        (outside / "made" / "inner").mkdir(parents=True)
        (outside / "made" / "inner" / "notes.txt").write_text("x\n")
    elif cap_bytes == 0:
        with open(os.environ["JUDGE_TEST_OLD"], "a") as f:
            f.write("appended\n")
    elif cap_bytes == 1000:
        torch.save(torch.zeros(2), str(Path(__file__).with_name("saved.pt")))
    return _right(param_bytes, cap_bytes, first_cap_bytes)


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
