"""How the engines' scripts see inside PyTorch's own engines (08_pipeline_schedules.py, 09_zero.py).

PyTorch's schedules and sharded optimizers do not say what they ran or what a rank holds in the
form the simulators and the ledger use; these probes read it off the running objects:

    PassLog       the forward and backward passes a pipeline stage really ran, in order, and the
                  most micro-batches its stages kept for backward (PipelineStage.fwd_cache)
    listed_order  what a schedule's own listing (pipeline_order) says a rank will run
    pytorch_order the order PyTorch's schedules prescribe a rank, read from their source, and
    as_megatron   where it is Megatron-LM's (the simulator's)
    local_elements  elements of a rank's own part of tensors (FSDP2's DTensor shards or plain ones)
    collectives_by_kind  common.dist_count's calls of a step, as calls and bytes per collective
                  (counted: what the process group was handed; cs336.gloo_ran reads what gloo ran)

The lesson (which schedule, which sharding, what is compared) stays in the scripts.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import nn

from common.costmodel.collectives import BY_TORCH_NAME
from cs336 import pipeline as pp


class PassLog:
    """What one rank ran, in order: (F or B, micro-batch, stage index), seen by the stage module's
    forward and by a hook on its output's gradient (the backward of that micro-batch reaching the
    stage); and the most micro-batches PyTorch's stages kept for a backward at once (fwd_cache)."""

    def __init__(self) -> None:
        self.passes: list[tuple[str, int, int]] = []
        self.most_cached = 0
        self.recording = True
        self.stages: list[Any] = []

    def watch(self, stage: Any, module: nn.Module) -> None:
        """Wrap `stage`'s forward_one_chunk (the only call that names the micro-batch) and
        `module`'s forward (where the activation is made); PyTorch's own calls go through both."""
        now: dict[str, int | None] = {"micro": None}
        run_chunk, module_forward, index = stage.forward_one_chunk, module.forward, stage.stage_index

        def forward(x: torch.Tensor) -> torch.Tensor:
            out = module_forward(x)
            micro = now["micro"]
            if micro is not None and self.recording:    # None: the stage's shape inference, no pass
                self.passes.append((pp.FORWARD, micro, index))
                out.register_hook(self._backward_seen(micro, index))
            return out

        def forward_one_chunk(fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            now["micro"] = fwd_chunk_id
            try:
                return run_chunk(fwd_chunk_id, *args, **kwargs)
            finally:
                now["micro"] = None
                held = sum(len(getattr(s, "fwd_cache", ())) for s in self.stages)
                self.most_cached = max(self.most_cached, held)

        module.forward, stage.forward_one_chunk = forward, forward_one_chunk
        self.stages.append(stage)

    def _backward_seen(self, micro: int, index: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self.passes.append((pp.BACKWARD, micro, index))
        return hook


def listed_order(schedule: object, rank: int) -> list[tuple[str, int]]:
    """The forwards and backwards PyTorch's own listing (pipeline_order) gives this rank."""
    names = {"FORWARD": pp.FORWARD, "FULL_BACKWARD": pp.BACKWARD}
    actions = (getattr(schedule, "pipeline_order", None) or {}).get(rank, [])
    return [(names[a.computation_type.name], a.microbatch_index) for a in actions
            if a is not None and a.computation_type.name in names]


def most_held(order: list[tuple[str, int, int]], v: int) -> float:
    """The most micro-batches whose forward ran and whose backward had not, in whole stages (chunks / v)."""
    held = most = 0
    for kind, _, _ in order:
        held += 1 if kind == pp.FORWARD else -1
        most = max(most, held)
    return most / v


def order_text(order: list[tuple[str, int, int]], stages: int) -> str:
    """F0 F1 B0 …; a pass on a rank's second model chunk is primed (F0')."""
    return " ".join(f"{kind}{m}{chr(39) * (j // stages)}" for kind, m, j in order)


def pytorch_order(kind: str, s: int, m: int, rank: int, virtual: int) -> list[tuple[str, int, int]]:
    """The passes PyTorch's schedule prescribes `rank`, read from its source (schedules.py): warm-up
    forwards, then one forward and one backward, then the backwards left. GPipe's warm-up is every
    forward, Schedule1F1B's S - 1 - r, ScheduleInterleaved1F1B's (v-1)·S + 2(S-1-r) (_get_warmup_ops);
    an interleaved rank takes its chunks' micro-batches S at a time (microbatches_per_round = S when S
    divides M), backwards from its last chunk. Written apart from cs336/pipeline.py: 08_pipeline_schedules
    judges PyTorch by it, and the simulator by what ran."""
    v = virtual if kind == "interleaved" else 1
    total = v * m
    warmup = {"GPipe": total, "1F1B": min(s - 1 - rank, m),
              "interleaved": min((v - 1) * s + 2 * (s - 1 - rank), total)}[kind]

    def op(k: int, kind_: str) -> tuple[str, int, int]:   # the k-th forward (or backward) of the rank
        chunk = (k // s) % v
        chunk = v - 1 - chunk if kind_ == pp.BACKWARD else chunk
        return kind_, (k // (s * v)) * s + k % s, chunk * s + rank

    forwards, backwards = ([op(k, kind_) for k in range(total)] for kind_ in (pp.FORWARD, pp.BACKWARD))
    steady = [p for pair in zip(forwards[warmup:], backwards) for p in pair]
    return forwards[:warmup] + steady + backwards[total - warmup:]


def as_megatron(s: int, m: int, rank: int, virtual: int) -> bool:
    """Whether PyTorch's interleaved 1F1B runs Megatron-LM's order (the simulator's) on `rank`.
    PyTorch warms up with (v - 1)·S + 2(S - 1 - r) forwards on rank r (_get_warmup_ops, M a multiple
    of S), as Megatron does, except that Megatron runs all v·M forwards first when M = S; the steady
    phase that follows starts with a forward, so a warm-up one short of v·M is the same order."""
    return m != s or (virtual - 1) * s + 2 * (s - 1 - rank) + 1 >= virtual * m


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor: FSDP2's DTensor shard (to_local), or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def local_elements(tensors: Iterable[torch.Tensor | None]) -> int:
    """Elements this rank holds of `tensors` (None, e.g. a missing gradient, holds nothing)."""
    return sum(local(t).numel() for t in tensors if t is not None)


def collectives_by_kind(calls: list[tuple[str, int]], k: int) -> dict[str, tuple[int, int]]:
    """Per collective: (calls, bytes of the whole buffer handed to the group), an all-gather's counted as
    its output."""
    found: dict[str, tuple[int, int]] = {}
    for name, nbytes in calls:
        coll = BY_TORCH_NAME.get(name)   # the collective torch's `name` runs (costmodel.collectives), its N
        kind, whole = (coll.name, coll.nbytes_of_input(k, nbytes)) if coll else (name, nbytes)
        c, b = found.get(kind, (0, 0))
        found[kind] = (c + 1, b + whole)
    return found


def calls_text(calls: dict[str, tuple[int, float]]) -> str:
    """What the checker compares, counted or by formula, e.g. 'all-gather: 12 calls, 1,647,360 B; …'."""
    return "; ".join(f"{kind}: {c} calls, {b:,.0f} B" for kind, (c, b) in sorted(calls.items()))
