"""Closed forms of the α-β model against independent computations."""

from __future__ import annotations

import math

import pytest

from common import costmodel as cm
from common.collectives import algorithm, tree_depth
from common.link import NOTES_LINK, Link

BROADCAST = algorithm("pipelined ring broadcast")
RING_ALLREDUCE = algorithm("ring all-reduce")

LINKS = [NOTES_LINK, Link(10e-6, 10e9), Link(1e-6, 3e9), Link(50e-6, 100e9)]


def ring_by_rounds(k: int, n: float, link: Link) -> float:
    """Reduce-scatter then all-gather: 2(K-1) rounds, each one message of N/K bytes."""
    return sum(link.message_time(n / k) for _ in range(2 * (k - 1)))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13, 64])
@pytest.mark.parametrize("link", LINKS)
def test_ring_equals_its_rounds(k: int, link: Link) -> None:
    for n in (1.0, 1000.0, 12345.0, 64e6):
        assert RING_ALLREDUCE.time(k, n, link) == pytest.approx(ring_by_rounds(k, n, link), rel=1e-12)


def test_tree_depth_is_ceil_log2() -> None:
    for k in range(1, 300):
        assert tree_depth(k) == math.ceil(math.log2(k)) if k > 1 else tree_depth(k) == 0


def test_ring_bytes_per_device() -> None:
    assert RING_ALLREDUCE.busiest_bytes(4, 1000) == 1500
    assert RING_ALLREDUCE.busiest_bytes(1, 1000) == 0


@pytest.mark.parametrize("k", [3, 4, 5, 8, 16, 33, 256])
@pytest.mark.parametrize("link", LINKS)
def test_crossovers_are_where_the_times_meet(k: int, link: Link) -> None:
    for cross, other in ((cm.ring_tree_crossover_bytes(k, link), algorithm("tree all-reduce").time),
                         (cm.ring_naive_crossover_bytes(k, link), algorithm("naive all-reduce").time)):
        if cross is None:
            continue
        ring = RING_ALLREDUCE.time(k, cross, link)
        assert ring == pytest.approx(other(k, cross, link), rel=1e-9)
        assert RING_ALLREDUCE.time(k, cross * 1.1, link) < other(k, cross * 1.1, link)
        assert RING_ALLREDUCE.time(k, cross * 0.9, link) > other(k, cross * 0.9, link)


def test_notes_crossovers_at_the_defaults() -> None:
    assert cm.ring_tree_crossover_bytes(8, NOTES_LINK) == pytest.approx(235294, rel=1e-4)
    assert cm.ring_naive_crossover_bytes(8, NOTES_LINK) == pytest.approx(122449, rel=1e-4)
    assert cm.ring_naive_crossover_bytes(2, NOTES_LINK) is None
    assert cm.ring_tree_crossover_bytes(4, Link(0.0, 1e9)) is None


def test_pipelined_broadcast_and_best_segments() -> None:
    link, n = NOTES_LINK, 64e6
    assert BROADCAST.time(8, n, link, 1) == pytest.approx(7 * (5e-6 + n / 25e9))
    assert BROADCAST.time(8, n, link, 64) == pytest.approx(70 * (5e-6 + n / 64 / 25e9))
    best = cm.best_broadcast_segments(8, n, link)
    brute = min((2**i for i in range(21)), key=lambda s: BROADCAST.time(8, n, link, s))
    assert best == brute == 64
    s_star = cm.continuous_best_segments(8, n, link)
    t = lambda s: (8 - 2 + s) * (link.alpha_s + n / (s * link.beta_Bps))  # noqa: E731
    assert t(s_star) <= min(t(s_star * 0.99), t(s_star * 1.01))


def test_parameter_server_and_speedup() -> None:
    link = Link(0.0, 25e9)
    assert algorithm("parameter server").time(16, 2e9, link) == pytest.approx(2.56)
    comm = RING_ALLREDUCE.time(8, 10e6, NOTES_LINK)
    assert cm.data_parallel_speedup(0.02, 8, comm) == pytest.approx(0.02 / (0.0025 + comm))


@pytest.mark.parametrize("bad", [dict(alpha_s=-1, beta_Bps=1), dict(alpha_s=0, beta_Bps=0),
                                 dict(alpha_s=math.nan, beta_Bps=1)])
def test_link_rejects_nonsense(bad: dict) -> None:
    with pytest.raises(ValueError):
        Link(**bad)


def test_times_reject_bad_device_counts() -> None:
    with pytest.raises(ValueError):
        RING_ALLREDUCE.time(0, 10, NOTES_LINK)
    with pytest.raises(ValueError):
        BROADCAST.time(4, 10, NOTES_LINK, 0)


def test_relative_fit_through_origin_and_bad_input() -> None:
    sizes = [1e3, 1e5, 1e7]
    a, b = cm.fit_line_relative(sizes, [2e-9 * n for n in sizes], through_origin=True)
    assert a == 0 and b == pytest.approx(2e-9, rel=1e-12)
    a, b = cm.fit_line_relative([1.0, 2.0], [1.0, 1.0])
    assert (a, b) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-12))
    for xs, ys in (([1.0], [1.0]), ([1.0, 1.0], [1.0, 2.0]), ([1.0, 2.0], [1.0, 0.0])):
        with pytest.raises(ValueError):
            cm.fit_line_relative(xs, ys)
    with pytest.raises(ValueError):
        cm.ring_alpha_beta_from_line(1, 1e-4, 1e-9)


@pytest.mark.parametrize("k,n,link", [(8, 64e6, NOTES_LINK), (4, 100e6, Link(20e-6, 10e9)),
                                      (3, 1e3, Link(50e-6, 1e9)), (16, 1e9, Link(1e-6, 100e9))])
def test_best_integer_segments_equals_a_scan(k: int, n: float, link: Link) -> None:
    scan = min(range(1, 5000), key=lambda s: BROADCAST.time(k, n, link, s))
    assert cm.best_integer_segments(k, n, link) == scan
