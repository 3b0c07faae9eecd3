"""The α-β cost model: one message of n bytes costs α + n/β. Pure Python, no torch.

Every script and every later lecture takes its communication times from here. What each
collective's algorithms send, in how many rounds, is defined once in common.collectives;
the functions below are the names the scripts call, each reading that definition. Sizes are
bytes and times seconds; MB/µs only appear where output is formatted.

This module holds lecture 14's comparison of all-reduce algorithms, the pipelined broadcast and
the fits of measured times; the rest lives by what it does, every name re-exported here:
  common.link                  Link and the notes' links
  common.costmodel_collectives one collective on a ring: bytes per device, rounds, time
  common.costmodel_steps       CS336 lecture 8: what a DP, TP, PP or ZeRO step communicates

Closed forms (K devices, N bytes per device, L = ceil(log2 K)):
  ring all-reduce        2(K-1)(α + N/(Kβ))        reduce-scatter then all-gather, N/K per round
  binary-tree all-reduce 2L(α + N/β)                reduce up the tree, broadcast down, whole N
  naive all-reduce       2(α + (K-1)N/β)            all to rank 0 over its one link, then back
  parameter server       2(α + K·N/β)               K workers push N each, pull N each, one link
  pipelined ring bcast   (K-2+S)(α + N/(S·β))       S segments follow each other round the ring
"""

from __future__ import annotations

import math
from typing import Sequence

from common import collectives as cdef
from common.collectives import check_size as _check
from common.collectives import tree_depth

# Re-exported (scripts and other helpers import them from here): see __all__ at the end.
from common.costmodel_collectives import (
    RING_PRIMITIVES,
    CollectiveCall,
    alpha_beta_time,
    direct_primitive_bytes_sent,
    ring_all_gather_bytes_per_device,
    ring_all_gather_time,
    ring_allreduce_balance_bytes,
    ring_allreduce_bytes_per_device,
    ring_allreduce_terms,
    ring_bytes_sent,
    ring_primitive_bytes_sent,
    ring_primitive_rounds,
    ring_primitive_time,
    ring_reduce_scatter_bytes_per_device,
    ring_reduce_scatter_time,
)
from common.costmodel_steps import (
    ZERO_STAGES,
    dp_step_traffic,
    pp_step_bytes_per_device,
    pp_step_send_time,
    pp_step_traffic,
    tp_step_bytes_per_device,
    tp_step_traffic,
    zero_step_bytes_per_device,
    zero_step_collectives,
    zero_step_traffic,
)
from common.link import (
    CS336_ETHERNET,
    CS336_INFINIBAND,
    CS336_NVLINK,
    ETHERNET,
    INFINIBAND,
    LINK_PRESETS,
    NOTES_LINK,
    NVLINK,
    Link,
)


def ring_allreduce_time(k: int, nbytes: float, link: Link) -> float:
    """2(K-1)(α + N/(Kβ)): reduce-scatter then all-gather, N/K per round."""
    return cdef.algorithm("ring all-reduce").time(k, nbytes, link)


def tree_allreduce_time(k: int, nbytes: float, link: Link) -> float:
    """2L(α + N/β), L = ceil(log2 K): up the binomial tree and back down, the whole N each round."""
    return cdef.algorithm("tree all-reduce").time(k, nbytes, link)


def naive_allreduce_time(k: int, nbytes: float, link: Link) -> float:
    """2(α + (K-1)N/β): all to device 0 and back, (K-1)·N through its one link each way."""
    return cdef.algorithm("naive all-reduce").time(k, nbytes, link)


def parameter_server_time(k: int, nbytes: float, link: Link, duplex: bool = False) -> float:
    """One step's traffic at a server with K workers: receive K·N gradients, send K·N parameters.

    With `duplex` the server's link sends and receives at once: its two rounds overlap.
    """
    both = cdef.algorithm("parameter server").time(k, nbytes, link)
    return both / 2 if duplex else both


ALLREDUCE_TIMES = {
    "ring": ring_allreduce_time,
    "tree": tree_allreduce_time,
    "naive": naive_allreduce_time,
}



# allreduce_traffic_bytes' labels (the lecture 14 tables' words) -> the algorithms
ALLREDUCE_ALGORITHMS = {"ring": "ring all-reduce", "tree": "tree all-reduce", "naive": "naive all-reduce",
                        "parameter server": "parameter server"}


def allreduce_traffic_bytes(algorithm: str, k: int, nbytes: float) -> tuple[float, float]:
    """(bytes the busiest device sends, bytes all devices send) in one all-reduce of N bytes each.

    The busiest device receives as much as it sends. With L = ceil(log2 K):
      ring              2(K-1)/K·N per device (all equal)      total 2(K-1)·N
      tree (binomial)   L·N, the root broadcasting back down   total 2(K-1)·N
      naive             (K-1)·N, device 0                      total 2(K-1)·N
      parameter server  K·N, the server (K workers + server)   total 2K·N
    """
    if algorithm not in ALLREDUCE_ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r} ({', '.join(ALLREDUCE_ALGORITHMS)})")
    alg = cdef.algorithm(ALLREDUCE_ALGORITHMS[algorithm])
    return alg.busiest_bytes(k, nbytes), alg.total_bytes(k, nbytes)


def ring_broadcast_time(k: int, nbytes: float, link: Link, segments: int = 1) -> float:
    """Broadcast N bytes round a ring of K devices, cut into S segments that follow each other.

    The first segment needs K-1 hops; each further one arrives one tick later: K-2+S ticks of
    α + N/(S·β). With S = 1 this is (K-1)(α + N/β).
    """
    return cdef.algorithm("pipelined ring broadcast").time(k, nbytes, link, segments)


def best_broadcast_segments(k: int, nbytes: float, link: Link, max_log2: int = 20) -> int:
    """The power of two S (1 … 2^max_log2) with the smallest pipelined ring broadcast time."""
    candidates = [2**i for i in range(max_log2 + 1)]
    return min(candidates, key=lambda s: ring_broadcast_time(k, nbytes, link, s))


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
    return min(candidates, key=lambda s: ring_broadcast_time(k, nbytes, link, s))


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


def fit_line_relative(xs: Sequence[float], ys: Sequence[float],
                      through_origin: bool = False) -> tuple[float, float]:
    """Least squares of y ≈ a + b·x in relative error: minimises Σ ((a + b·x − y) / y)².

    Measured times span decades (1 KiB to 16 MiB); unweighted, the largest sizes alone would set
    the line and the intercept (what α comes from) would be noise. With `through_origin`, a = 0.
    """
    if len(xs) != len(ys) or len(xs) < (1 if through_origin else 2) or any(y <= 0 for y in ys):
        raise ValueError("need matching sizes and times > 0: two points at least (one through the origin)")
    scale = max(abs(x) for x in xs) or 1.0  # keeps the normal equations well conditioned
    w = [1.0 / (y * y) for y in ys]
    u = [x / scale for x in xs]
    s0, s1, s2 = sum(w), sum(wi * ui for wi, ui in zip(w, u)), sum(wi * ui * ui for wi, ui in zip(w, u))
    t0, t1 = sum(wi * y for wi, y in zip(w, ys)), sum(wi * ui * y for wi, ui, y in zip(w, u, ys))
    if through_origin:
        return 0.0, t1 / s2 / scale
    det = s0 * s2 - s1 * s1
    if det <= 0:
        raise ValueError("the sizes must not all be equal")
    return (t0 * s2 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det / scale


def ring_alpha_beta_from_line(k: int, intercept_s: float, slope_s_per_byte: float) -> tuple[float, float]:
    """Read a measured line t = a + b·N as the ring's 2(K−1)(α + N/(Kβ)): α = a / 2(K−1) per
    round, β = 2(K−1) / (K·b). Signs are kept: a noisy fit can give a < 0, and the caller says so."""
    _check(k, 0)
    if k < 2:
        raise ValueError("a ring of one device sends nothing: fit with K >= 2")
    rounds = cdef.algorithm("ring all-reduce").rounds(k)
    return intercept_s / rounds, rounds / (k * slope_s_per_byte)


# The stable API: this module's names and those of the modules it was split into.
__all__ = [
    "Link", "NOTES_LINK", "NVLINK", "INFINIBAND", "ETHERNET", "LINK_PRESETS", "ring_allreduce_time",
    "tree_allreduce_time", "naive_allreduce_time", "parameter_server_time", "ALLREDUCE_TIMES",
    "ring_allreduce_bytes_per_device", "ALLREDUCE_ALGORITHMS", "allreduce_traffic_bytes",
    "ring_broadcast_time", "best_broadcast_segments", "continuous_best_segments", "best_integer_segments",
    "ring_tree_crossover_bytes", "ring_naive_crossover_bytes", "data_parallel_speedup",
    "fit_line_relative", "ring_alpha_beta_from_line", "CS336_NVLINK", "CS336_INFINIBAND",
    "CS336_ETHERNET", "alpha_beta_time", "ring_allreduce_terms", "ring_allreduce_balance_bytes",
    "ring_reduce_scatter_bytes_per_device", "ring_all_gather_bytes_per_device",
    "ring_reduce_scatter_time", "ring_all_gather_time", "CollectiveCall", "ZERO_STAGES",
    "zero_step_collectives", "zero_step_bytes_per_device", "tp_step_bytes_per_device",
    "pp_step_bytes_per_device", "pp_step_send_time", "ring_bytes_sent", "dp_step_traffic",
    "tp_step_traffic", "pp_step_traffic", "zero_step_traffic", "RING_PRIMITIVES",
    "ring_primitive_bytes_sent", "ring_primitive_rounds", "ring_primitive_time",
    "direct_primitive_bytes_sent", "tree_depth",
]
