"""The notes' first-order model of a collective's time, T ≈ α·N_msg + S/B_eff (CS336 lecture 8), and
the ring all-reduce's two terms, latency and bandwidth, read off common.costmodel.collectives.

    from cs336.first_order import ring_allreduce_terms
    ring_allreduce_terms(4, 64 * MiB, link)          # (2(K−1)α, 2(K−1)/K·N/β)

A collective's time and bytes themselves have one public name each, the methods of
common.costmodel.collectives.Algorithm (`time`, `busiest_bytes`); these split the ring's into the terms the
notes argue with. Pure Python.
"""

from __future__ import annotations

from common.costmodel.collectives import algorithm
from common.costmodel.collectives import check_size as _check
from common.costmodel.link import Link


def alpha_beta_time(n_messages: int, nbytes: float, link: Link) -> float:
    """The notes' first-order model α·N_msg + S/B_eff: N_msg start-ups, S bytes through the link."""
    if int(n_messages) != n_messages or n_messages < 0:
        raise ValueError(f"number of messages must be an integer >= 0, got {n_messages}")
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes}")
    # At one message this is link.message_time(nbytes), but not built on it: the notes charge N start-ups
    # and one S/B for all S bytes; N·message_time(S/N) says the same but fails at N = 0 (no messages).
    return n_messages * link.alpha_s + nbytes / link.beta_Bps


def ring_allreduce_terms(k: int, nbytes: float, link: Link) -> tuple[float, float]:
    """The two terms of a ring all-reduce's time: (latency 2(K−1)α, bandwidth 2(K−1)/K·N/β)."""
    _check(k, nbytes)
    ring = algorithm("ring all-reduce")
    return ring.rounds(k) * link.alpha_s, ring.busiest_bytes(k, nbytes) / link.beta_Bps


def ring_allreduce_balance_bytes(k: int, link: Link) -> float:
    """N at which the ring all-reduce's two terms are equal: 2(K−1)α = 2(K−1)/K·N/β ⇒ N = K·α·β.

    Below it start-ups take most of the time (the notes' small-tensor regime). Any K >= 2.
    """
    _check(k, 0)
    if k < 2:
        raise ValueError("one device sends nothing: the terms balance only for K >= 2")
    return k * link.alpha_s * link.beta_Bps
