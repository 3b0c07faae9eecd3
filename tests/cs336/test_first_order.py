"""The notes' first-order model and the ring all-reduce's two terms (cs336/first_order.py) against
round-by-round counts from lecture14.collectives."""

from __future__ import annotations

import pytest
from costmodel_buffers import buffers

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from cs336.first_order import alpha_beta_time, ring_allreduce_balance_bytes, ring_allreduce_terms
from lecture14 import collectives as col

RING_ALLREDUCE = algorithm("ring all-reduce")
LINKS = [Link(5e-6, 50 * 2**30), Link(1e-6, 450e9), Link(0.0, 10e9), Link(20e-6, 1e9)]


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


@pytest.mark.parametrize("link", LINKS)
def test_one_message_is_the_links_message_time(link: Link) -> None:
    """What first_order.py's comment says: N = 1 is Link.message_time, to the bit; N = 0 costs S/B."""
    for n in (0.0, 1.0, 1000.0, 12345.0, 64e6):
        assert alpha_beta_time(1, n, link) == link.message_time(n)
        assert alpha_beta_time(0, n, link) == n / link.beta_Bps


def test_first_order_refuses_bad_counts() -> None:
    with pytest.raises(ValueError):
        alpha_beta_time(-1, 10, LINKS[1])
    with pytest.raises(ValueError):
        alpha_beta_time(1.5, 10, LINKS[1])
    with pytest.raises(ValueError):
        alpha_beta_time(1, -10, LINKS[1])
