"""One collective's cost on a ring: the bytes each device sends, its rounds, its α-β time.

    from common.costmodel_collectives import ring_primitive_time, CollectiveCall
    ring_primitive_time("all-gather", 8, 1e6, NOTES_LINK)

Each function reads common.collectives (what each algorithm sends, in how many rounds); none
keeps a formula of its own. CS336 lecture 8's per-collective costs and lecture 14's seven
primitives. The notes write T ≈ α·N_msg + S/B_eff. Every collective below is the ring version:
K−1 rounds (reduce-scatter, all-gather) or 2(K−1) (all-reduce), each round one message of N/K
bytes per device, N the full buffer. "Bytes per device" is what one device sends (it receives as
much). common.costmodel re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import collectives as cdef
from common.collectives import check_size as _check
from common.link import Link


def ring_allreduce_bytes_per_device(k: int, nbytes: float) -> float:
    """Bytes each device sends (and receives) in a ring all-reduce: 2(K-1)/K · N."""
    return cdef.algorithm("ring all-reduce").busiest_bytes(k, nbytes)


def alpha_beta_time(n_messages: int, nbytes: float, link: Link) -> float:
    """The notes' first-order model α·N_msg + S/B_eff: N_msg start-ups, S bytes through the link."""
    if int(n_messages) != n_messages or n_messages < 0:
        raise ValueError(f"number of messages must be an integer >= 0, got {n_messages}")
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes}")
    return n_messages * link.alpha_s + nbytes / link.beta_Bps


def ring_allreduce_terms(k: int, nbytes: float, link: Link) -> tuple[float, float]:
    """The two terms of ring_allreduce_time: (latency 2(K−1)α, bandwidth 2(K−1)/K·N/β)."""
    _check(k, nbytes)
    return (cdef.algorithm("ring all-reduce").rounds(k) * link.alpha_s,
            ring_allreduce_bytes_per_device(k, nbytes) / link.beta_Bps)


def ring_allreduce_balance_bytes(k: int, link: Link) -> float:
    """N at which the ring all-reduce's two terms are equal: 2(K−1)α = 2(K−1)/K·N/β ⇒ N = K·α·β.

    Below it start-ups take most of the time (the notes' small-tensor regime). Any K >= 2.
    """
    _check(k, 0)
    if k < 2:
        raise ValueError("one device sends nothing: the terms balance only for K >= 2")
    return k * link.alpha_s * link.beta_Bps


def ring_reduce_scatter_bytes_per_device(k: int, nbytes: float) -> float:
    """Bytes each device sends in a ring reduce-scatter of an N-byte buffer: (K−1)/K·N."""
    return cdef.algorithm("ring reduce-scatter").busiest_bytes(k, nbytes)


def ring_all_gather_bytes_per_device(k: int, nbytes: float) -> float:
    """Bytes each device sends in a ring all-gather whose result is N bytes: (K−1)/K·N."""
    return cdef.algorithm("ring all-gather").busiest_bytes(k, nbytes)


def ring_reduce_scatter_time(k: int, nbytes: float, link: Link) -> float:
    """(K−1)(α + N/(Kβ)): K−1 rounds, each one chunk of N/K. N is the whole (input) buffer."""
    return cdef.algorithm("ring reduce-scatter").time(k, nbytes, link)


def ring_all_gather_time(k: int, nbytes: float, link: Link) -> float:
    """(K−1)(α + N/(Kβ)), N the gathered (output) size: the reduce-scatter's rounds, copied not added."""
    return cdef.algorithm("ring all-gather").time(k, nbytes, link)


@dataclass(frozen=True)
class CollectiveCall:
    """`calls` ring collectives of one kind, each on an N-byte buffer (`nbytes`), in one step."""

    kind: str       # a collective's name (common.collectives): "all-reduce", "reduce-scatter", ...
    what: str       # what it carries, in words
    calls: int
    nbytes: float   # the full buffer of one call (all-gather: its output)

    def __post_init__(self) -> None:
        cdef.collective(self.kind)  # an unknown kind is an error here, not a guess later

    def _ring(self) -> cdef.Algorithm:
        return cdef.algorithm(cdef.collective(self.kind).ring)

    def rounds_per_call(self, k: int) -> int:
        return self._ring().rounds(k)

    def bytes_per_device(self, k: int) -> float:
        return self.calls * self._ring().busiest_bytes(k, self.nbytes)

    def time(self, k: int, link: Link) -> float:
        return self.calls * self._ring().time(k, self.nbytes, link)


def ring_bytes_sent(op: str, k: int, total_bytes: float) -> float:
    """Bytes the busiest rank sends in torch.distributed's `op` ("all_reduce", "all_gather",
    "reduce_scatter", ...) run as a ring, the call's size N `total_bytes` (for all-gather: every
    rank's piece together): a collective's counted form (common.collectives.Collective.ring_bytes)."""
    return cdef.by_torch_name(op).ring_bytes(k, total_bytes)


# ==== The seven primitives on a ring: bytes each device sends, rounds, α-β time ====================
# (lecture14.collectives simulates each of these; CS336 lecture 8 tabulates the per-rank volume.)
# Here S is one piece, the notes' unit: what each device holds of the smaller of input and output
# (broadcast, reduce and all-reduce: the whole buffer; scatter: the root holds K·S; gather and
# all-gather: K·S at the end; reduce-scatter: K·S in, S out). Each primitive runs as its ring
# algorithm in common.collectives (broadcast and reduce: a pipelined chain round the ring).
# Positions v = (rank − root) mod K round the ring.

RING_PRIMITIVES = tuple(cdef.COLLECTIVES)


def _ring_of(primitive: str) -> tuple[cdef.Collective, cdef.Algorithm]:
    coll = cdef.collective(primitive)
    return coll, cdef.algorithm(coll.ring)


def ring_primitive_bytes_sent(primitive: str, k: int, piece_bytes: float) -> list[float]:
    """Bytes each device sends in one `primitive` on a ring of K devices, listed by position v.

      broadcast       a pipelined chain out of the root: v = 0 .. K-2 send S each, the last 0
      scatter         the root sends (K-1)·S; v passes on the pieces beyond it: (K-1-v)·S
      gather          v sends its own piece and the v-1 before it: v·S (the root 0)
      reduce          a pipelined chain into the root: every non-root S, the root 0
      all-gather      (K-1)·S each, i.e. (K-1)/K of the K·S gathered
      reduce-scatter  (K-1)·S each, i.e. (K-1)/K of the K·S input
      all-reduce      2(K-1)/K·S each (reduce-scatter then all-gather of S)
    The busiest device: S (broadcast, reduce), (K-1)·S (scatter: the root; gather: the root's
    left neighbour; all-gather and reduce-scatter: everyone), 2(K-1)/K·S (all-reduce).
    """
    coll, ring = _ring_of(primitive)
    _check(k, piece_bytes)
    return ring.bytes_sent(k, coll.nbytes_of_piece(k, piece_bytes))


def ring_primitive_rounds(primitive: str, k: int, segments: int = 1) -> int:
    """Rounds of one `primitive` on a ring of K: K-2+S ticks for the pipelined chains (broadcast,
    reduce; S segments), K-1 for scatter, gather, all-gather, reduce-scatter, 2(K-1) for all-reduce."""
    return _ring_of(primitive)[1].rounds(k, segments)


def ring_primitive_time(primitive: str, k: int, piece_bytes: float, link: Link, segments: int = 1) -> float:
    """α-β time of one `primitive` on a ring of K: rounds × (α + the largest message / β).

    Chains: (K-2+S)(α + S_piece/(S·β)) (ring_broadcast_time); scatter, gather, all-gather and
    reduce-scatter: (K-1)(α + S/β), one piece per link per round; all-reduce: 2(K-1)(α + S/(Kβ)).
    """
    coll, ring = _ring_of(primitive)
    _check(k, piece_bytes)
    return ring.time(k, coll.nbytes_of_piece(k, piece_bytes), link, segments)


# ==== Rooted primitives without a ring: the root talks to every device itself (cs336/01_collectives) ====
# What CS336 lecture 8's table counts for gather and reduce ("each rank sends S") is this star, not
# a ring: common.collectives' "direct" algorithms. S is one piece, as above.

def direct_primitive_bytes_sent(primitive: str, k: int, piece_bytes: float) -> list[float]:
    """Bytes each device sends, by position v, when the root sends to (or receives from) every
    other device directly, one message each:
      broadcast, scatter   the root sends K−1 messages of S: (K−1)·S; the others 0
      gather, reduce       every non-root sends its S once; the root 0 (it receives (K−1)·S)
    The root's link carries (K−1)·S either way: a star moves the ring's bytes onto one link."""
    coll = cdef.collective(primitive)
    if not coll.rooted:
        raise ValueError(f"unknown rooted primitive {primitive!r}; one of broadcast, scatter, gather, reduce")
    _check(k, piece_bytes)
    return cdef.algorithm(f"direct {primitive}").bytes_sent(k, coll.nbytes_of_piece(k, piece_bytes))
