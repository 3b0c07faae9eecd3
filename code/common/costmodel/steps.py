"""CS336 lecture 8: what one training step communicates under DP, TP, PP and ZeRO.

    from common.costmodel.steps import zero_step_collectives, tp_step_traffic

A CollectiveCall is one kind of collective called `calls` times in a step, each call on the full
N-byte buffer, priced as the ring it runs as (common.costmodel.collectives). Two families. The notes' table
(zero_step_*, tp/pp_step_bytes_per_device, pp_step_send_time): a step's collectives on an N-byte
buffer. The deep MLP of cs336/05_parallel.py (*_step_traffic):
x = gelu(x @ W) for L square W of width d, batch B, e bytes per element, p ranks; 05's real ranks
record every call they make and are checked against these. A collective is counted as a ring
sends it (nccl-tests' bus factor: all-reduce 2(p-1)/p·S, all-gather and reduce-scatter
(p-1)/p·S, S the size of the whole result), exact for equal slices; gloo's own schedule for a
given size may differ. Bytes per device are what one device sends (it receives as much).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.costmodel.collectives import Algorithm, algorithm, collective, padded_shard_elements
from common.costmodel.collectives import check_size as _check
from common.costmodel.link import Link

ZERO_STAGES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")


@dataclass(frozen=True)
class CollectiveCall:
    """`calls` ring collectives of one kind, each on an N-byte buffer (`nbytes`), in one step."""

    kind: str       # a collective's name (common.costmodel.collectives): "all-reduce", "reduce-scatter", ...
    what: str       # what it carries, in words
    calls: int
    nbytes: float   # the full buffer of one call (all-gather: its output)

    def __post_init__(self) -> None:
        collective(self.kind)  # an unknown kind is an error here, not a guess later

    @property
    def ring(self) -> Algorithm:
        """The ring algorithm each call runs as: its `time`, `busiest_bytes`, `rounds`."""
        return algorithm(collective(self.kind).ring)


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
    return sum(c.calls * c.ring.busiest_bytes(k, c.nbytes) for c in zero_step_collectives(stage, param_bytes))


def tp_step_bytes_per_device(layers: int, activation_bytes: float, k: int,
                             per_call: str = "all-reduce") -> float:
    """Tensor parallelism: 2L collectives per step (one per layer forward, one backward) on the
    activation A. The notes' table charges each an all-reduce's 2(K−1)/K·A (2L·2(K−1)/K·A); with
    per_call="all-gather" each is an all-gather or reduce-scatter, (K−1)/K·A (2L·(K−1)/K·A)."""
    _check(k, activation_bytes)
    if per_call == "all-reduce":
        one = algorithm("ring all-reduce").busiest_bytes(k, activation_bytes)
    elif per_call == "all-gather":
        one = algorithm("ring all-gather").busiest_bytes(k, activation_bytes)
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


def dp_step_traffic(k: int, layers: int, width: int, elem_bytes: int) -> tuple[int, float]:
    """(calls, bytes a rank sends) per step of the notes' data-parallel loop, which all-reduces
    every W.grad separately: L all-reduces of d·d·e bytes. One flat all-reduce sends the same bytes."""
    return layers, layers * algorithm("ring all-reduce").busiest_bytes(k, width * width * elem_bytes)


def tp_step_traffic(k: int, layers: int, width: int, batch: int, elem_bytes: int,
                    first_input_grad: bool = False) -> tuple[int, float]:
    """(calls, bytes a rank sends) per step of column-sliced tensor parallelism.

    Forward: one all-gather of the layer's output per layer; slices of uneven width are padded to
    ceil(d/p) columns (gloo gathers equal shapes), so S = p·B·ceil(d/p)·e. Backward: one
    reduce-scatter of the partial input gradient (B·d·e) per layer, except the first layer's
    unless `first_input_grad` (its input is data; in a transformer it is the embedding's output).
    """
    _check(k, 0)
    gather = algorithm("ring all-gather").busiest_bytes(k, k * batch * math.ceil(width / k) * elem_bytes)
    backward_calls = layers if first_input_grad else layers - 1
    scatter = algorithm("ring reduce-scatter").busiest_bytes(k, batch * width * elem_bytes)
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
    padded = padded_shard_elements(n_params, k) * k * elem_bytes
    calls = zero_step_collectives("ZeRO-1", padded)
    return sum(c.calls for c in calls), sum(c.calls * c.ring.busiest_bytes(k, c.nbytes) for c in calls)
