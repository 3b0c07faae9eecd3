"""Bandwidth arithmetic of a collective benchmark, the way nccl-tests reports it. Pure Python.

    S       the collective's *total* size in bytes (nccl-tests' "size" column):
              all-reduce, broadcast   the buffer every rank holds
              reduce-scatter          one rank's input before the scatter (n chunks of S/n)
              all-gather              one rank's output after the gather (n chunks of S/n)
    algbw   S / t
    busbw   algbw × factor(n), the factor being the share of S that each rank must send (and
            receive) in a bandwidth-optimal ring, so busbw = bytes per rank over a link / t and
            can be held against a link's bandwidth whatever the collective and the rank count:
              all-reduce 2(n−1)/n    reduce-scatter (n−1)/n    all-gather (n−1)/n    broadcast 1
            With n = 1 nothing crosses a link: bus bandwidth is undefined, and every factor here
            is 0 (nccl-tests keeps broadcast's at 1).

GB here is 1e9 bytes, as in nccl-tests. Sizes are bytes and times seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from common.costmodel import collectives

COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "broadcast")
MAX_SWEEP_SIZES = 100  # a longer sweep is a typo (a factor of 1.001), not a benchmark


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (one of {', '.join(COLLECTIVES)})")


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw for `collective` on n ranks (0 when n = 1: nothing crosses a link)."""
    _check_collective(collective)
    if int(n) != n or n < 1:
        raise ValueError(f"number of ranks must be an integer >= 1, got {n}")
    return collectives.bus_factor(collective, n)  # the ring's busiest-rank bytes per byte of S


def algbw(total_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth S / t in bytes per second."""
    if not seconds > 0:
        raise ValueError(f"time must be > 0, got {seconds}")
    return total_bytes / seconds


def busbw(collective: str, n: int, total_bytes: float, seconds: float) -> float:
    """Bus bandwidth algbw × factor(n), bytes per second (S the total size, see the module doc)."""
    return algbw(total_bytes, seconds) * bus_factor(collective, n)


def chunk_slip_busbw(collective: str, n: int, total_bytes: float, seconds: float) -> float:
    """The slip: the right factor, but one rank's chunk S/n (reduce-scatter's output, all-gather's
    input) taken for S. It reads n times too low (4× on 4 ranks)."""
    return busbw(collective, n, total_bytes / n, seconds)


@dataclass(frozen=True)
class Buffers:
    """What one rank allocates for one size of the sweep, in elements of `elem_bytes`."""

    collective: str
    n: int
    elem_bytes: int
    requested_bytes: int
    total_elems: int    # S in elements
    in_elems: int       # one rank's input
    out_elems: int      # one rank's output

    @property
    def total_bytes(self) -> int:
        return self.total_elems * self.elem_bytes

    @property
    def in_bytes(self) -> int:
        return self.in_elems * self.elem_bytes

    @property
    def out_bytes(self) -> int:
        return self.out_elems * self.elem_bytes

    @property
    def rounding(self) -> str:
        """'' when S is the size asked for, else 'down' or 'up'."""
        if self.total_bytes == self.requested_bytes:
            return ""
        return "down" if self.total_bytes < self.requested_bytes else "up"


def buffers(collective: str, n: int, requested_bytes: int, elem_bytes: int = 4) -> Buffers:
    """S for a requested size: a whole number of elements, and for reduce-scatter and all-gather a
    whole number of elements per rank, so S is rounded down to a multiple of n × elem_bytes (as
    nccl-tests does; it also aligns each chunk to 16 bytes, which we do not). A size too small for
    one element (per rank) is rounded up to it."""
    _check_collective(collective)
    if requested_bytes < 1 or elem_bytes < 1 or n < 1:
        raise ValueError("sizes, element size and ranks must be >= 1")
    if collective in ("all-reduce", "broadcast"):
        elems = max(1, requested_bytes // elem_bytes)
        return Buffers(collective, n, elem_bytes, requested_bytes, elems, elems, elems)
    chunk = max(1, requested_bytes // (elem_bytes * n))
    total = chunk * n
    if collective == "reduce-scatter":
        return Buffers(collective, n, elem_bytes, requested_bytes, total, total, chunk)
    return Buffers(collective, n, elem_bytes, requested_bytes, total, chunk, total)


def size_sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """nccl-tests' -b/-e/-f sweep: min, min·f, min·f², … while ≤ max (max itself only if it is on
    that grid). A factor that is not whole is rounded per size; repeats are dropped."""
    if min_bytes < 1 or max_bytes < 1:
        raise ValueError(f"sizes must be >= 1 byte, got {min_bytes} and {max_bytes}")
    if min_bytes > max_bytes:
        raise ValueError(f"the smallest size ({min_bytes} B) is larger than the largest ({max_bytes} B)")
    if not (factor > 1 and math.isfinite(factor)):
        raise ValueError(f"the step factor must be > 1, got {factor:g}")
    count = int(math.floor(math.log(max_bytes / min_bytes) / math.log(factor) + 1e-9)) + 1
    if count > MAX_SWEEP_SIZES:
        raise ValueError(f"the sweep has {count} sizes; at most {MAX_SWEEP_SIZES} (raise the step factor)")
    sizes: list[int] = []
    for k in range(count):
        size = int(round(min_bytes * factor**k))
        if size <= max_bytes and (not sizes or size > sizes[-1]):
            sizes.append(size)
    return sizes


# ---- timing: per-rank, per-iteration times -> one number per size ---------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0…100), interpolated linearly between order statistics (numpy's default)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def slowest_rank_per_iteration(times_by_rank: Sequence[Sequence[float]]) -> list[float]:
    """times_by_rank[r][i] is rank r's time of iteration i; a collective is done only when its
    last rank is, so iteration i took the slowest rank's time."""
    if not times_by_rank or any(len(t) != len(times_by_rank[0])
                                for t in times_by_rank) or not times_by_rank[0]:
        raise ValueError("need the same number (>= 1) of iterations from every rank")
    return [max(per_iter) for per_iter in zip(*times_by_rank)]


@dataclass(frozen=True)
class Timing:
    """One size's time: the median over iterations of the slowest rank, and its spread."""

    median: float
    p10: float
    p90: float
    fastest_rank_median: float  # the same median with the fastest rank per iteration

    @classmethod
    def from_ranks(cls, times_by_rank: Sequence[Sequence[float]]) -> Timing:
        slowest = slowest_rank_per_iteration(times_by_rank)
        fastest = [min(per_iter) for per_iter in zip(*times_by_rank)]
        return cls(percentile(slowest, 50), percentile(slowest, 10), percentile(slowest, 90),
                   percentile(fastest, 50))


def half_peak_size(sizes: Sequence[float], bandwidths: Sequence[float]) -> float | None:
    """The smallest size whose bandwidth reaches half the sweep's peak (None if the peak is 0)."""
    peak = max(bandwidths)
    if not peak > 0:
        return None
    return next(s for s, bw in zip(sizes, bandwidths) if bw >= peak / 2)


def result_row(collective: str, n: int, requested_bytes: int, times_by_rank: Sequence[Sequence[float]],
               ok: bool = True, elem_bytes: int = 4) -> dict:
    """One line of the benchmark's table (sizes in bytes, times in s, bandwidths in bytes/s)."""
    b = buffers(collective, n, requested_bytes, elem_bytes)
    t = Timing.from_ranks(times_by_rank)
    return {"S": b.total_bytes, "requested": requested_bytes, "rounding": b.rounding, "in": b.in_bytes,
            "out": b.out_bytes, "t": t.median, "p10": t.p10, "p90": t.p90, "t_fastest": t.fastest_rank_median,
            "ok": ok, "algbw": algbw(b.total_bytes, t.median),
            "busbw": busbw(collective, n, b.total_bytes, t.median),
            "slip": chunk_slip_busbw(collective, n, b.total_bytes, t.median)}
