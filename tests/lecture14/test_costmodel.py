"""Lecture 14's questions of the α-β model (lecture14/costmodel.py) against independent computations:
the crossovers where the times meet, the best segments by a scan, the speedup by its formula."""

from __future__ import annotations

import pytest

from common.costmodel.collectives import algorithm
from common.costmodel.link import NOTES_LINK, Link
from lecture14 import costmodel as cm

BROADCAST = algorithm("pipelined ring broadcast")
RING_ALLREDUCE = algorithm("ring all-reduce")

LINKS = [NOTES_LINK, Link(10e-6, 10e9), Link(1e-6, 3e9), Link(50e-6, 100e9)]


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


@pytest.mark.parametrize("k,n,link", [(8, 64e6, NOTES_LINK), (4, 100e6, Link(20e-6, 10e9)),
                                      (3, 1e3, Link(50e-6, 1e9)), (16, 1e9, Link(1e-6, 100e9))])
def test_best_integer_segments_equals_a_scan(k: int, n: float, link: Link) -> None:
    scan = min(range(1, 5000), key=lambda s: BROADCAST.time(k, n, link, s))
    assert cm.best_integer_segments(k, n, link) == scan
