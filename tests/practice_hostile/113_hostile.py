"""Problem 113 written to harm or fool the judge (tests/practice/test_practice_processes.py). Which case does
what is chosen by its arguments; every process it starts sleeps long, so one left behind is seen:
  exercise 3 (cap 12 MB)        forks a child that sleeps, answers right      -> PASS, child killed
  exactly at cap (cap 4)        a setsid daemon by double fork, answers right -> PASS, daemon killed
  cap 0                         kills its parent (os.kill(os.getppid(), 9))   -> FAIL, the judge goes on
  cap above the total (1000)    forks a child holding every pipe, os._exit(3) -> FAIL "exit code 3"
  larger than the cap (cap 10)  torch.allclose, torch.equal, math.isclose patched, answers wrong
  ResNet-50 first bucket        the judge's modules patched to pass everything, answers wrong
The ring time and the timeline are right: the cases after the harm still run and pass."""

from __future__ import annotations

import math
import os
import sys
import time

import torch

MB, MiB = 10**6, 2**20


def _sleep_in_child() -> int:
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    return pid


def _daemon() -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
        os._exit(0)
    time.sleep(0.2)                    # the middle process is gone: the daemon is an orphan now


def _patch_comparisons() -> None:
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    math.isclose = lambda *a, **k: True


def _patch_judge() -> None:
    for name, module in list(sys.modules.items()):
        if name.startswith("judging"):
            for attr in ("check_buckets", "check_time", "check_timeline", "_unchanged", "_as_buckets"):
                if hasattr(module, attr):
                    setattr(module, attr, lambda *a, **k: (lambda *a, **k: None))
            if hasattr(module, "Fail"):
                module.Fail = type("Fail", (Exception,), {})


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
    if cap_bytes == 12 * MB:
        _sleep_in_child()
    elif cap_bytes == 4 and first_cap_bytes is None:
        _daemon()
    elif cap_bytes == 0:
        os.kill(os.getppid(), 9)
        time.sleep(5)
    elif cap_bytes == 1000:
        _sleep_in_child()
        os._exit(3)
    elif cap_bytes == 10:
        _patch_comparisons()
        return [[0]]
    elif cap_bytes == 25 * MiB:
        _patch_judge()
        return [[0]]
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
