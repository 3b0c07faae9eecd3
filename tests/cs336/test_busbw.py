"""CS336 lecture 8's benchmark arithmetic (cs336/busbw.py): nccl-tests' algbw/busbw against numbers
worked by hand, the slowest-rank-then-median aggregation, the size sweep and its rounding."""

from __future__ import annotations

import numpy as np
import pytest

from common.costmodel.collectives import algorithm
from cs336 import busbw as bw

RING_ALLREDUCE = algorithm("ring all-reduce")
MIB = 2**20


# ---- busbw factors: n = 4, S = 1 MiB, t = 1 ms, worked by hand ---------------------------------
# algbw = 1,048,576 B / 0.001 s = 1.048576e9 B/s; busbw = algbw × factor.
HAND = {"all-reduce": 1.572864e9,      # × 2·3/4 = 1.5
        "reduce-scatter": 0.786432e9,  # × 3/4
        "all-gather": 0.786432e9,      # × 3/4
        "broadcast": 1.048576e9}       # × 1


@pytest.mark.parametrize("collective", bw.COLLECTIVES)
def test_busbw_by_hand(collective: str) -> None:
    assert bw.algbw(MIB, 1e-3) == pytest.approx(1.048576e9, rel=1e-12)
    assert bw.busbw(collective, 4, MIB, 1e-3) == pytest.approx(HAND[collective], rel=1e-12)


def test_the_chunk_size_slip_reads_n_times_low() -> None:
    # reduce-scatter of S = 1 MiB on 4 ranks in 1 ms: the output is 256 KiB; 256 KiB × 3/4 / 1 ms
    assert bw.chunk_slip_busbw("reduce-scatter", 4, MIB, 1e-3) == pytest.approx(0.196608e9, rel=1e-12)
    assert bw.chunk_slip_busbw("all-gather", 3, 3 * MIB,
                               1e-3) == pytest.approx(bw.busbw("all-gather", 3, 3 * MIB,
                                                                                         1e-3) / 3)


def test_factors_for_other_world_sizes() -> None:
    for n in (1, 2, 3, 5, 8):
        assert bw.bus_factor("all-reduce", n) == pytest.approx(RING_ALLREDUCE.busiest_bytes(n, 1.0))
        assert bw.bus_factor("all-reduce", n) == pytest.approx(2 * (n - 1) / n)
        assert bw.bus_factor("reduce-scatter",
                             n) == bw.bus_factor("all-gather", n) == pytest.approx((n - 1) / n)
    assert bw.bus_factor("broadcast", 3) == 1.0
    # one rank: nothing crosses a link, every factor (broadcast's too) is 0, no division by zero
    assert [bw.bus_factor(c, 1) for c in bw.COLLECTIVES] == [0.0] * 4
    assert bw.busbw("all-reduce", 1, MIB, 1e-3) == 0.0
    with pytest.raises(ValueError):
        bw.bus_factor("all-to-all", 4)
    with pytest.raises(ValueError):
        bw.algbw(MIB, 0.0)


# ---- aggregation: the slowest rank per iteration, then the median over iterations ---------------

def test_slowest_rank_then_median_by_hand() -> None:
    times = [[1.0, 5.0, 2.0, 1.0],   # rank 0, iterations 0..3
             [3.0, 1.0, 2.0, 1.5],   # rank 1
             [2.0, 2.0, 9.0, 1.2]]   # rank 2
    assert bw.slowest_rank_per_iteration(times) == [3.0, 5.0, 9.0, 1.5]
    t = bw.Timing.from_ranks(times)
    assert t.median == 4.0  # median of 1.5, 3, 5, 9
    assert t.fastest_rank_median == 1.0  # fastest per iteration: 1, 1, 2, 1
    # not the median of all numbers (2.0), nor the slowest rank's own median (rank 2: 2.0), nor the mean
    assert t.median not in (float(np.median(times)), float(np.median(times[2])), float(np.mean(times)))
    assert (t.p10, t.p90) == (pytest.approx(np.percentile([3, 5, 9, 1.5], 10)), pytest.approx(np.percentile(
        [3, 5, 9, 1.5], 90)))
    with pytest.raises(ValueError):
        bw.slowest_rank_per_iteration([[1.0, 2.0], [1.0]])


def test_percentile_is_numpys() -> None:
    values = [0.3, 7.0, 1.0, 2.5, 2.5, 9.0, 0.1]
    for q in (0, 10, 37, 50, 90, 100):
        assert bw.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_half_peak_size() -> None:
    assert bw.half_peak_size([1, 2, 4, 8], [0.1, 0.4, 0.5, 1.0]) == 4  # 0.5 ≥ 1.0 / 2
    assert bw.half_peak_size([1, 2], [0.0, 0.0]) is None


# ---- the size sweep and its rounding -------------------------------------------------------------

def test_size_sweep() -> None:
    assert bw.size_sweep(1024, 4 * MIB, 4) == [1024 * 4**k for k in range(7)]  # 1 KiB … 4 MiB
    assert bw.size_sweep(1024, 16 * MIB, 2) == [1024 * 2**k for k in range(15)]
    assert bw.size_sweep(1000, 5000, 2) == [1000, 2000, 4000]  # max only if on the grid, as nccl-tests
    assert bw.size_sweep(4096, 4096, 2) == [4096]
    assert bw.size_sweep(10, 30, 1.5) == [10, 15, 22]  # 10·1.5² = 22.5 rounds to 22
    for bad in ((0, 10, 2), (10, 0, 2), (20, 10, 2), (10, 20, 1.0), (10, 20, 0.5), (1, 2**40, 1.01)):
        with pytest.raises(ValueError):
            bw.size_sweep(*bad)


def test_buffers_round_to_whole_elements_per_rank() -> None:
    rs = bw.buffers("reduce-scatter", 3, 1024)  # 256 floats: 85 per rank, 255 in all
    assert (rs.total_bytes, rs.in_bytes, rs.out_bytes, rs.rounding) == (1020, 1020, 340, "down")
    ag = bw.buffers("all-gather", 3, 1024)
    assert (ag.total_bytes, ag.in_bytes, ag.out_bytes) == (1020, 340, 1020)
    assert bw.buffers("all-gather", 4, 1024).rounding == ""
    tiny = bw.buffers("reduce-scatter", 4, 8)  # less than a float per rank: one float each
    assert (tiny.total_bytes, tiny.out_bytes, tiny.rounding) == (16, 4, "up")
    ar = bw.buffers("all-reduce", 3, 1022)
    assert (ar.total_bytes, ar.in_bytes, ar.out_bytes, ar.rounding) == (1020, 1020, 1020, "down")


def test_result_row_uses_the_total_size() -> None:
    row = bw.result_row("reduce-scatter", 4, MIB, [[1e-3, 2e-3, 1e-3]] * 4)
    assert row["t"] == 1e-3 and row["S"] == MIB and row["out"] == MIB // 4
    assert row["busbw"] == pytest.approx(HAND["reduce-scatter"])
    assert row["slip"] == pytest.approx(HAND["reduce-scatter"] / 4)
