"""The α-β cost model: one message of n bytes costs α + n/β. Pure Python, no torch.

Every script and every later lecture takes its communication times from here. What each
collective's algorithms send, in how many rounds, is defined once in common.collectives_def;
the functions below are the names the scripts call, each reading that definition. Sizes are
bytes and times seconds; MB/µs only appear where output is formatted.

Closed forms (K devices, N bytes per device, L = ceil(log2 K)):
  ring all-reduce        2(K-1)(α + N/(Kβ))        reduce-scatter then all-gather, N/K per round
  binary-tree all-reduce 2L(α + N/β)                reduce up the tree, broadcast down, whole N
  naive all-reduce       2(α + (K-1)N/β)            all to rank 0 over its one link, then back
  parameter server       2(α + K·N/β)               K workers push N each, pull N each, one link
  pipelined ring bcast   (K-2+S)(α + N/(S·β))       S segments follow each other round the ring
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from common import collectives_def as cdef
from common.collectives_def import check_size as _check
from common.collectives_def import tree_depth  # noqa: F401  (re-exported: the stable API)


@dataclass(frozen=True)
class Link:
    """A link with per-message latency `alpha_s` (seconds) and bandwidth `beta_Bps` (bytes/s)."""

    alpha_s: float
    beta_Bps: float
    name: str = ""

    def __post_init__(self) -> None:
        if not (self.alpha_s >= 0 and math.isfinite(self.alpha_s)):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha_s}")
        if not (self.beta_Bps > 0 and math.isfinite(self.beta_Bps)):
            raise ValueError(f"beta must be a finite number > 0, got {self.beta_Bps}")

    def message_time(self, nbytes: float) -> float:
        """Time of one point-to-point message of `nbytes`."""
        return self.alpha_s + nbytes / self.beta_Bps

    def describe(self) -> str:
        label = f"{self.name}: " if self.name else ""
        return f"{label}α = {self.alpha_s * 1e6:.4g} µs, β = {self.beta_Bps / 1e9:.4g} GB/s"


# The notes' defaults (lecture 14 §3): α = 5 µs, β = 25 GB/s, GB = 1e9 bytes.
NOTES_LINK = Link(5e-6, 25e9, "notes' link")
# Link classes for "how big a share of a step is communication" (lecture 14 §3.4 Part 3). The
# bandwidths are per-GPU figures of each class; α matters little there (large messages).
NVLINK = Link(5e-6, 150e9, "NVLink-class")
INFINIBAND = Link(5e-6, 25e9, "InfiniBand-class")
ETHERNET = Link(5e-6, 3.125e9, "Ethernet-class (25 Gb/s)")
LINK_PRESETS = {"nvlink": NVLINK, "infiniband": INFINIBAND, "ethernet": ETHERNET}


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


def ring_allreduce_bytes_per_device(k: int, nbytes: float) -> float:
    """Bytes each device sends (and receives) in a ring all-reduce: 2(K-1)/K · N."""
    return cdef.algorithm("ring all-reduce").busiest_bytes(k, nbytes)


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


# ==== CS336 lecture 8: per-rank costs of DP, TP, PP and ZeRO (added by the cs336 costs work) ====
# The notes write T ≈ α·N_msg + S/B_eff. Every collective below is the ring version: K−1 rounds
# (reduce-scatter, all-gather) or 2(K−1) (all-reduce), each round one message of N/K bytes per
# device, N the full buffer. "Bytes per device" is what one device sends (it receives as much).

# The notes' links (CS336 lecture 8 worked examples): bandwidth one way, as the notes use it.
#   NVLink 4.0: 900 GB/s two-way = 450 one way, the notes' "effective" figure; α ≈ 1 µs (their
#   TP paragraph). InfiniBand NDR: 400 Gb/s = 50 GB/s, 40 GB/s effective (80 %); α ≈ 5 µs (the TP
#   paragraph; their table says 1–2 µs). 100G Ethernet: 12.5 GB/s, 10 GB/s at the same 80 % (what
#   their 3900 ms implies); α = 5 µs, the low end of their 5–20 µs.
CS336_NVLINK = Link(1e-6, 450e9, "NVLink 4.0 (450 GB/s one way)")
CS336_INFINIBAND = Link(5e-6, 40e9, "InfiniBand NDR (40 GB/s effective)")
CS336_ETHERNET = Link(5e-6, 10e9, "100G Ethernet (10 GB/s effective)")


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

    kind: str       # a collective's name (collectives_def): "all-reduce", "reduce-scatter", ...
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


ZERO_STAGES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def zero_step_collectives(stage: str, param_bytes: float, layers: int = 1) -> list[CollectiveCall]:
    """What one data-parallel step communicates under DDP and each ZeRO stage (ZeRO paper §7).

    DDP all-reduces the gradients. ZeRO-1 and -2 reduce-scatter them (a rank only updates its shard,
    so it only needs that shard's sum) and all-gather the updated parameters: the same bytes as the
    all-reduce. ZeRO-3 has no full copy of the parameters: it all-gathers them layer by layer in
    forward and again in backward, and reduce-scatters the gradients: 1.5× DDP's bytes. Gradients
    and parameters are the same size here (`param_bytes`, fp16 in the notes' ledger).
    """
    if stage == "DDP":
        return [CollectiveCall("all-reduce", "gradients", 1, param_bytes)]
    if stage in ("ZeRO-1", "ZeRO-2"):
        return [CollectiveCall("reduce-scatter", "gradients", 1, param_bytes),
                CollectiveCall("all-gather", "updated parameters", 1, param_bytes)]
    if stage == "ZeRO-3":
        if int(layers) != layers or layers < 1:
            raise ValueError(f"layers must be an integer >= 1, got {layers}")
        per_layer = param_bytes / layers
        return [CollectiveCall("all-gather", "parameters, forward", layers, per_layer),
                CollectiveCall("all-gather", "parameters, backward", layers, per_layer),
                CollectiveCall("reduce-scatter", "gradients", layers, per_layer)]
    raise ValueError(f"unknown stage {stage!r} ({', '.join(ZERO_STAGES)})")


def zero_step_bytes_per_device(stage: str, k: int, param_bytes: float) -> float:
    """Bytes one rank sends per step: 2(K−1)/K·2P for DDP, ZeRO-1, ZeRO-2; 3(K−1)/K·2P for ZeRO-3."""
    return sum(c.bytes_per_device(k) for c in zero_step_collectives(stage, param_bytes))


def tp_step_bytes_per_device(layers: int, activation_bytes: float, k: int,
                             per_call: str = "all-reduce") -> float:
    """Tensor parallelism: 2L collectives per step (one per layer forward, one backward) on the
    activation A. The notes' table charges each an all-reduce's 2(K−1)/K·A (2L·2(K−1)/K·A); with
    per_call="all-gather" each is an all-gather or reduce-scatter, (K−1)/K·A (2L·(K−1)/K·A)."""
    _check(k, activation_bytes)
    if per_call == "all-reduce":
        one = ring_allreduce_bytes_per_device(k, activation_bytes)
    elif per_call == "all-gather":
        one = ring_all_gather_bytes_per_device(k, activation_bytes)
    else:
        raise ValueError(f"per_call must be 'all-reduce' or 'all-gather', got {per_call!r}")
    return 2 * layers * one


def pp_step_bytes_per_device(activation_bytes: float) -> float:
    """A middle pipeline stage per step: the batch's activation forward, its gradient backward (2A),
    whatever the number of micro-batches (they split A)."""
    if activation_bytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {activation_bytes}")
    return 2 * activation_bytes


def pp_step_send_time(micro_batches: int, activation_bytes: float, link: Link) -> float:
    """A middle stage's sends per step: 2M messages (forward and backward) of A/M: 2M(α + A/(Mβ))."""
    if int(micro_batches) != micro_batches or micro_batches < 1:
        raise ValueError(f"micro-batches must be an integer >= 1, got {micro_batches}")
    return 2 * micro_batches * link.message_time(activation_bytes / micro_batches)


# ===========================================================================================

# CS336 lecture 8: traffic of data, tensor and pipeline parallelism and ZeRO on the deep MLP
# (x = gelu(x @ W) for L square W of width d, batch B, e bytes per element, p ranks), and the notes'
# memory ledger of the ZeRO stages. Used and checked by code/cs336/05_parallel.py, whose real ranks
# record every call they make. A collective is counted as a ring sends it (nccl-tests' bus factor:
# all-reduce 2(p-1)/p·S, all-gather and reduce-scatter (p-1)/p·S, S the size of the whole result),
# exact for equal slices; gloo's own schedule for a given size may differ.
# ===========================================================================================

def ring_bytes_sent(op: str, k: int, total_bytes: float) -> float:
    """Bytes the busiest rank sends in torch.distributed's `op` ("all_reduce", "all_gather",
    "reduce_scatter", ...) run as a ring, the call's size N `total_bytes` (for all-gather: every
    rank's piece together): a collective's counted form (collectives_def.Collective.ring_bytes)."""
    return cdef.by_torch_name(op).ring_bytes(k, total_bytes)


def dp_step_traffic(k: int, layers: int, width: int, elem_bytes: int) -> tuple[int, float]:
    """(calls, bytes a rank sends) per step of the notes' data-parallel loop, which all-reduces
    every W.grad separately: L all-reduces of d·d·e bytes. One flat all-reduce sends the same bytes."""
    return layers, layers * ring_bytes_sent("all_reduce", k, width * width * elem_bytes)


def tp_step_traffic(k: int, layers: int, width: int, batch: int, elem_bytes: int,
                    first_input_grad: bool = False) -> tuple[int, float]:
    """(calls, bytes a rank sends) per step of column-sliced tensor parallelism.

    Forward: one all-gather of the layer's output per layer; slices of uneven width are padded to
    ceil(d/p) columns (gloo gathers equal shapes), so S = p·B·ceil(d/p)·e. Backward: one
    reduce-scatter of the partial input gradient (B·d·e) per layer, except the first layer's
    unless `first_input_grad` (its input is data; in a transformer it is the embedding's output).
    """
    _check(k, 0)
    gather = ring_bytes_sent("all_gather", k, k * batch * math.ceil(width / k) * elem_bytes)
    backward_calls = layers if first_input_grad else layers - 1
    scatter = ring_bytes_sent("reduce_scatter", k, batch * width * elem_bytes)
    return layers + backward_calls, layers * gather + backward_calls * scatter


def pp_step_traffic(k: int, rank: int, micro_batches: int, batch: int, width: int,
                    elem_bytes: int) -> tuple[int, float]:
    """(sends, bytes sent) per step by stage `rank` of a GPipe pipeline of k stages: each
    micro-batch's activation forward unless it is the last stage, its input gradient backward
    unless it is the first; over all micro-batches that is B·d·e bytes per direction. It receives
    as many messages as it sends in the mirror direction."""
    _check(k, 0)
    directions = int(rank < k - 1) + int(rank > 0)
    return directions * micro_batches, directions * batch * width * elem_bytes


def zero_step_traffic(k: int, n_params: int, elem_bytes: int) -> tuple[int, float]:
    """(calls, bytes a rank sends) per ZeRO-1/2 step of a flat buffer padded to a multiple of k:
    zero_step_collectives' reduce-scatter and all-gather, together one all-reduce's bytes."""
    _check(k, 0)
    padded = -(-n_params // k) * k * elem_bytes
    calls = zero_step_collectives("ZeRO-1", padded)
    return sum(c.calls for c in calls), sum(c.bytes_per_device(k) for c in calls)


# ==== The seven primitives on a ring: bytes each device sends, rounds, α-β time ====================
# (lecture14.collectives simulates each of these; CS336 lecture 8 tabulates the per-rank volume.)
# Here S is one piece, the notes' unit: what each device holds of the smaller of input and output
# (broadcast, reduce and all-reduce: the whole buffer; scatter: the root holds K·S; gather and
# all-gather: K·S at the end; reduce-scatter: K·S in, S out). Each primitive runs as its ring
# algorithm in collectives_def (broadcast and reduce: a pipelined chain round the ring).
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
# a ring: collectives_def's "direct" algorithms. S is one piece, as above.

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
