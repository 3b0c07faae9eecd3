"""The α-β formulas added to common.costmodel for CS336 lecture 8 (common/costmodel_collectives.py)
against round-by-round counts from lecture14.collectives."""

from __future__ import annotations

import pytest
from costmodel_buffers import buffers, pieces

from common.collectives import algorithm
from common.costmodel_collectives import alpha_beta_time, ring_allreduce_balance_bytes, ring_allreduce_terms
from common.link import Link
from lecture14 import collectives as col

RING_ALLREDUCE = algorithm("ring all-reduce")
LINKS = [Link(5e-6, 50 * 2**30), Link(1e-6, 450e9), Link(0.0, 10e9), Link(20e-6, 1e9)]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("link", LINKS)
def test_reduce_scatter_and_all_gather_equal_their_rounds(k: int, link: Link) -> None:
    n = 840 * k  # K divides N: every chunk N/K
    rs, ag = col.reduce_scatter(buffers(k, n)), col.all_gather(pieces(k, n))
    for res, ring in ((rs, algorithm("ring reduce-scatter")), (ag, algorithm("ring all-gather"))):
        assert res.n_rounds == k - 1
        assert ring.time(k, n, link) == pytest.approx(res.time(link), rel=1e-12, abs=1e-18)
        assert all(s == ring.busiest_bytes(k, n) for s in res.sent)


@pytest.mark.parametrize("k,n", [(3, 1000), (4, 1001), (7, 50), (5, 3)])
def test_uneven_chunks_stay_within_one_element_per_round(k: int, n: int) -> None:
    link = Link(1e-6, 1e9)
    res = col.reduce_scatter(buffers(k, n))
    assert res.total_sent == (k - 1) * n  # each chunk travels K-1 hops, whatever its size
    formula = algorithm("ring reduce-scatter").time(k, n, link)
    assert formula <= res.time(link) + 1e-15 <= formula + (k - 1) / link.beta_Bps + 1e-12


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("link", LINKS)
def test_allreduce_terms_are_the_rounds_alphas_and_the_busiest_bytes(k: int, link: Link) -> None:
    n = 64 * k
    res = col.ring_allreduce(buffers(k, n))
    latency, bandwidth = ring_allreduce_terms(k, n, link)
    assert latency == pytest.approx(res.n_rounds * link.alpha_s)
    assert bandwidth == pytest.approx(res.busiest_sent / link.beta_Bps)
    assert latency + bandwidth == pytest.approx(RING_ALLREDUCE.time(k, n, link), rel=1e-12, abs=1e-18)
    assert latency + bandwidth == pytest.approx(res.time(link), rel=1e-12, abs=1e-18)
    # The notes' generic α·N_msg + S/B with the ring's messages and bytes is the same thing.
    assert alpha_beta_time(res.n_rounds, res.busiest_sent, link) == pytest.approx(res.time(link),
                                                                                     abs=1e-18)


@pytest.mark.parametrize("k", [2, 3, 4, 8, 64])
@pytest.mark.parametrize("link", [lk for lk in LINKS if lk.alpha_s > 0])
def test_balance_size_is_where_the_terms_cross(k: int, link: Link) -> None:
    n = ring_allreduce_balance_bytes(k, link)
    lat, bw = ring_allreduce_terms(k, n, link)
    assert lat == pytest.approx(bw, rel=1e-12)
    lat, bw = ring_allreduce_terms(k, n / 2, link)
    assert lat > bw
    lat, bw = ring_allreduce_terms(k, n * 2, link)
    assert lat < bw
    with pytest.raises(ValueError):
        ring_allreduce_balance_bytes(1, link)


def test_notes_four_rank_example() -> None:
    link = Link(5e-6, 50 * 2**30)
    lat, bw = ring_allreduce_terms(4, 64 * 2**20, link)
    assert lat == pytest.approx(30e-6)
    assert bw == pytest.approx(1.875e-3, rel=1e-12)  # not 1.92: MiB / GiB is 1/1024
    assert ring_allreduce_balance_bytes(4, link) == pytest.approx(4 * 5e-6 * 50 * 2**30)
