"""Lecture 14's comparison of all-reduce algorithms, the pipelined broadcast's segments and data
parallelism's speedup, on the α-β model: one message of n bytes costs α + n/β. Pure Python, no torch.

A collective's time and bytes are common.costmodel.collectives.Algorithm's `time` and `busiest_bytes` (one
name each); the questions asked of them here: where one algorithm overtakes another, how many
segments a broadcast wants. What α and β a measured line means is common.costmodel.link's (three lectures
fit lines); what a CS336 step communicates is common.costmodel.steps'.

Closed forms (K devices, N bytes per device, L = ceil(log2 K)):
  ring all-reduce        2(K-1)(α + N/(Kβ))        reduce-scatter then all-gather, N/K per round
  binary-tree all-reduce 2L(α + N/β)                reduce up the tree, broadcast down, whole N
  naive all-reduce       2(α + (K-1)N/β)            all to rank 0 over its one link, then back
  parameter server       2(α + K·N/β)               K workers push N each, pull N each, one link
  pipelined ring bcast   (K-2+S)(α + N/(S·β))       S segments follow each other round the ring
"""

from __future__ import annotations

import math

from common.costmodel import collectives as cdef
from common.costmodel.collectives import check_size as _check
from common.costmodel.collectives import tree_depth
from common.costmodel.link import Link

# The all-reduce algorithms lecture 14 compares by time (04_alpha_beta); its tables name each
# without " all-reduce": "ring", "tree", "naive".
COMPARED_ALLREDUCES = ("ring all-reduce", "tree all-reduce", "naive all-reduce")


def best_broadcast_segments(k: int, nbytes: float, link: Link, max_log2: int = 20) -> int:
    """The power of two S (1 … 2^max_log2) with the smallest pipelined ring broadcast time."""
    candidates, broadcast = [2**i for i in range(max_log2 + 1)], cdef.algorithm("pipelined ring broadcast")
    return min(candidates, key=lambda s: broadcast.time(k, nbytes, link, s))


def continuous_best_segments(k: int, nbytes: float, link: Link) -> float:
    """d/dS of (K-2+S)(α + N/(Sβ)) = 0  ⇒  S* = sqrt((K-2)·N / (α·β)); inf when α = 0."""
    _check(k, nbytes)
    if link.alpha_s == 0:
        return math.inf
    return math.sqrt(max(k - 2, 0) * nbytes / (link.alpha_s * link.beta_Bps))


def best_integer_segments(k: int, nbytes: float, link: Link) -> int:
    """The whole number S with the smallest pipelined ring broadcast time. The time is const +
    S·α + (K−2)N/(Sβ), convex in S, so the best integer sits next to the continuous S*."""
    s_star = continuous_best_segments(k, nbytes, link)
    if not math.isfinite(s_star):
        raise ValueError("with α = 0 more segments are always better: no best S")
    candidates = {max(1, math.floor(s_star)), max(1, math.ceil(s_star))}
    broadcast = cdef.algorithm("pipelined ring broadcast")
    return min(candidates, key=lambda s: broadcast.time(k, nbytes, link, s))


def ring_tree_crossover_bytes(k: int, link: Link) -> float | None:
    """N at which ring and binary-tree all-reduce take equal time; ring wins above it.

    2(K-1)(α + N/(Kβ)) = 2L(α + N/β)  ⇒  N = (K-1-L)·αβ / (L - (K-1)/K).
    None when the ring never loses (K ≤ 2: the same single exchange, or no latency).
    """
    _check(k, 0)
    depth = tree_depth(k)
    if k - 1 <= depth or link.alpha_s == 0:
        return None
    return (k - 1 - depth) * link.alpha_s * link.beta_Bps / (depth - (k - 1) / k)


def ring_naive_crossover_bytes(k: int, link: Link) -> float | None:
    """N at which ring and naive all-reduce take equal time; naive wins below it.

    2(K-1)(α + N/(Kβ)) = 2(α + (K-1)N/β)  ⇒  N = (K-2)·K·αβ / (K-1)².
    None for K ≤ 2 (both are one exchange) or α = 0 (ring always at least as fast).
    """
    _check(k, 0)
    if k <= 2 or link.alpha_s == 0:
        return None
    return (k - 2) * k * link.alpha_s * link.beta_Bps / (k - 1) ** 2


def data_parallel_speedup(single_step_s: float, k: int, comm_s: float) -> float:
    """Speedup of K workers without overlap: T1 / (T1/K + T_comm)."""
    if single_step_s <= 0:
        raise ValueError("single-device step time must be > 0")
    _check(k, 0)
    return single_step_s / (single_step_s / k + comm_s)
