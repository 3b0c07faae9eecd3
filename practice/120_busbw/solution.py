"""Problem 120: a collective benchmark's row as nccl-tests reads it: S, t, algbw and busbw.

Judge it:  python practice/judge.py 120        (the statement: practice/120_busbw/README.md)
"""

from __future__ import annotations


def bandwidth_row(collective: str, world_size: int, in_bytes: int, out_bytes: int,
                  times_s: list[list[float]]) -> dict[str, float]:
    """{"size_bytes", "time_s", "algbw_GBps", "busbw_GBps"} for one collective and size (README)."""
    raise NotImplementedError("write bandwidth_row(collective, world_size, in_bytes, out_bytes, times_s) in "
                              "120's solution.py")
