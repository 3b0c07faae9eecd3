"""A step's collectives and the α-β model's terms, read off common.collectives.

    from common.collectives import algorithm, collective
    algorithm("ring all-reduce").time(8, 1e6, NOTES_LINK)       # a collective's time: one name
    algorithm("ring all-reduce").busiest_bytes(8, 1e6)          # its bytes per device: one name
    collective("all-gather").ring                               # "ring all-gather", the ring it runs as

A collective's time and bytes have one public name each, the methods of common.collectives.Algorithm
(`time`, and `busiest_bytes` with its by-position and total views `bytes_sent`, `total_bytes`);
tests/common/test_collectives.py fails when a second one appears. Here: the notes' first-order model
T ≈ α·N_msg + S/B_eff, the ring all-reduce's two terms, and CollectiveCall, one kind of collective
called `calls` times in a step (CS336 lecture 8). Every collective below runs as its ring: K−1
rounds (reduce-scatter, all-gather) or 2(K−1) (all-reduce), each round one message of N/K bytes
per device, N the full buffer. "Bytes per device" is what one device sends (it receives as much).
"""

from __future__ import annotations

from dataclasses import dataclass

from common import collectives as cdef
from common.collectives import check_size as _check
from common.link import Link


def alpha_beta_time(n_messages: int, nbytes: float, link: Link) -> float:
    """The notes' first-order model α·N_msg + S/B_eff: N_msg start-ups, S bytes through the link."""
    if int(n_messages) != n_messages or n_messages < 0:
        raise ValueError(f"number of messages must be an integer >= 0, got {n_messages}")
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes}")
    return n_messages * link.alpha_s + nbytes / link.beta_Bps


def ring_allreduce_terms(k: int, nbytes: float, link: Link) -> tuple[float, float]:
    """The two terms of a ring all-reduce's time: (latency 2(K−1)α, bandwidth 2(K−1)/K·N/β)."""
    _check(k, nbytes)
    ring = cdef.algorithm("ring all-reduce")
    return ring.rounds(k) * link.alpha_s, ring.busiest_bytes(k, nbytes) / link.beta_Bps


def ring_allreduce_balance_bytes(k: int, link: Link) -> float:
    """N at which the ring all-reduce's two terms are equal: 2(K−1)α = 2(K−1)/K·N/β ⇒ N = K·α·β.

    Below it start-ups take most of the time (the notes' small-tensor regime). Any K >= 2.
    """
    _check(k, 0)
    if k < 2:
        raise ValueError("one device sends nothing: the terms balance only for K >= 2")
    return k * link.alpha_s * link.beta_Bps


@dataclass(frozen=True)
class CollectiveCall:
    """`calls` ring collectives of one kind, each on an N-byte buffer (`nbytes`), in one step."""

    kind: str       # a collective's name (common.collectives): "all-reduce", "reduce-scatter", ...
    what: str       # what it carries, in words
    calls: int
    nbytes: float   # the full buffer of one call (all-gather: its output)

    def __post_init__(self) -> None:
        cdef.collective(self.kind)  # an unknown kind is an error here, not a guess later

    @property
    def ring(self) -> cdef.Algorithm:
        """The ring algorithm each call runs as: its `time`, `busiest_bytes`, `rounds`."""
        return cdef.algorithm(cdef.collective(self.kind).ring)
