"""The memory ledger of mixed-precision Adam training (CS336 lecture 8), and what ZeRO, FSDP and
Megatron's model split leave on each GPU. Pure Python: no torch, no processes.

    ledger_bytes(13e9)                      # {'fp16 parameters': 26e9, ..., 'Adam v (fp32)': 52e9}
    zero_bytes_per_gpu("ZeRO-2", 13e9, 4)   # 2P + 14P/p bytes, built from the ledger's entries
    zero_bytes_per_rank("ZeRO-2", 1001, 4)  # the exact bytes each rank holds, shards of whole elements

Every per-GPU figure is built from the ledger's entries (which ones are sharded, which kept whole),
so a stage's closed form such as the notes' 4P + 12P/p can be checked against the ledger itself.
Sizes are bytes; parameter counts are plain numbers (13e9). Activations are not training state:
they are counted apart (`activation_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.costmodel.collectives import padded_shard_elements, split_sizes

# Bytes per parameter, mixed precision with Adam (the notes' ledger: 2 + 2 + 4 + 8 = 16).
LEDGER = {
    "fp16 parameters": 2,
    "fp16 gradients": 2,
    "fp32 master weights": 4,
    "Adam m (fp32)": 4,
    "Adam v (fp32)": 4,
}
BYTES_PER_PARAM = sum(LEDGER.values())
OPTIMIZER_STATE = ("fp32 master weights", "Adam m (fp32)", "Adam v (fp32)")  # what ZeRO-1 shards

# What each stage shards across the p data-parallel ranks (ZeRO paper, Rajbhandari et al. 2020):
# ZeRO-1 the optimizer state (master weights, m, v: 12 B/param), ZeRO-2 also the gradients,
# ZeRO-3 also the parameters. DDP shards nothing.
SHARDED = {
    "DDP": (),
    "ZeRO-1": OPTIMIZER_STATE,
    "ZeRO-2": ("fp16 gradients",) + OPTIMIZER_STATE,
    "ZeRO-3": ("fp16 parameters", "fp16 gradients") + OPTIMIZER_STATE,
}
STAGES = tuple(SHARDED)


@dataclass(frozen=True)
class Model:
    """A model as the notes describe it: parameters, layers, hidden width."""

    name: str
    params: float
    layers: int
    width: int


# The notes' models. The MLP: 12 square layers of d = 4096 (no biases), as in the 4-GPU example.
NOTES_200M = Model("the notes' 200M model", 200e6, 0, 0)
MLP_12 = Model("12-layer MLP, d = 4096", 12 * 4096**2, 12, 4096)
LLAMA2_13B = Model("Llama 2 13B", 13e9, 40, 5120)
GPT3_175B = Model("GPT-3 175B", 175e9, 96, 12288)


def _check_params(params: float) -> None:
    if not (params >= 0 and math.isfinite(params)):
        raise ValueError(f"parameter count must be a finite number >= 0, got {params}")


def _check_ranks(p: int) -> None:
    if int(p) != p or p < 1:
        raise ValueError(f"number of GPUs must be an integer >= 1, got {p}")


def ledger_bytes(params: float) -> dict[str, float]:
    """Each entry of the ledger for `params` parameters, in bytes."""
    _check_params(params)
    return {name: b * params for name, b in LEDGER.items()}


def training_state_bytes(params: float) -> float:
    """16 bytes per parameter: weights, gradients, master weights, Adam m and v (no activations)."""
    return sum(ledger_bytes(params).values())


def activation_bytes(batch: int, width: int, bytes_per_value: int = 2, tokens_per_sample: int = 1) -> float:
    """One layer's output: batch × tokens × width values (the notes' A = B × d × 2 for fp16)."""
    if min(batch, width, bytes_per_value, tokens_per_sample) < 1:
        raise ValueError("batch, width, bytes per value and tokens per sample must be >= 1")
    return float(batch) * tokens_per_sample * width * bytes_per_value


# ---- ZeRO ----------------------------------------------------------------------------------------

def zero_bytes_per_gpu(stage: str, params: float, p: int) -> float:
    """Per-GPU training state under `stage`, from the ledger: kept entries whole, sharded ones / p."""
    if stage not in SHARDED:
        raise ValueError(f"unknown stage {stage!r} ({', '.join(STAGES)})")
    _check_params(params)
    _check_ranks(p)
    per_param = sum(b / p if name in SHARDED[stage] else b for name, b in LEDGER.items())
    return per_param * params


def zero_notes_formula(stage: str, params: float, p: int) -> float:
    """The notes' table, written as printed: 16P; 4P + 12P/p; 2P + 14P/p; 16P/p."""
    _check_params(params)
    _check_ranks(p)
    formulas = {"DDP": 16 * params, "ZeRO-1": 4 * params + 12 * params / p,
                "ZeRO-2": 2 * params + 14 * params / p, "ZeRO-3": 16 * params / p}
    if stage not in formulas:
        raise ValueError(f"unknown stage {stage!r} ({', '.join(STAGES)})")
    return formulas[stage]


def optimizer_state_bytes(n: int, p: int, bytes_per_param: int) -> int:
    """Optimizer state on one rank for its padded shard: Adam's m and v are 2 × the parameters'
    element size (16 B in float64); the notes' mixed-precision ledger is 12 (with the fp32 master)."""
    _check_ranks(p)
    return padded_shard_elements(n, p) * bytes_per_param


def zero_bytes_per_rank(stage: str, params: int, p: int) -> list[int]:
    """Exact bytes of training state on each rank for an integer number of parameters: sharded
    entries hold whole elements of the flattened buffer, so ranks can differ by a few bytes."""
    if stage not in SHARDED:
        raise ValueError(f"unknown stage {stage!r} ({', '.join(STAGES)})")
    if int(params) != params or params < 0:
        raise ValueError(f"parameter count must be a whole number >= 0, got {params}")
    _check_ranks(p)
    shards = split_sizes(int(params), p)  # ZeRO flattens the group and cuts it as np.array_split
    kept = sum(b for name, b in LEDGER.items() if name not in SHARDED[stage]) * int(params)
    sharded = sum(b for name, b in LEDGER.items() if name in SHARDED[stage])
    return [kept + sharded * n for n in shards]


# ---- Megatron's model split and the frameworks ---------------------------------------------------

def model_split_bytes_per_gpu(params: float, tp: int, pp: int, dp: int = 1,
                              distributed_optimizer: bool = False) -> float:
    """Megatron: TP × PP split the model, so a GPU holds P/(TP·PP) parameters and their 16 B each;
    with a distributed optimizer (ZeRO-1 across the DP replicas) the 12 B of optimizer state are
    divided by DP as well."""
    for n in (tp, pp, dp):
        _check_ranks(n)
    local = params / (tp * pp)
    return zero_bytes_per_gpu("ZeRO-1" if distributed_optimizer else "DDP", local, dp)


@dataclass(frozen=True)
class FrameworkLayout:
    framework: str
    setting: str
    bytes_per_gpu: float
    how: str


def framework_layouts(params: float, p: int, tp: int, pp: int) -> list[FrameworkLayout]:
    """Per-GPU training state of P parameters on p GPUs under each framework's sharding option.

    Megatron-LM splits the model TP × PP ways (tp·pp must divide p; the rest is DP). DeepSpeed's
    stages are ZeRO-1/2/3. FSDP's NO_SHARD is DDP, SHARD_GRAD_OP shards gradients and optimizer
    state (ZeRO-2's memory), FULL_SHARD also the parameters (ZeRO-3's).
    """
    _check_ranks(p)
    if p % (tp * pp):
        raise ValueError(f"TP × PP = {tp * pp} must divide the {p} GPUs")
    dp = p // (tp * pp)
    z = {stage: zero_bytes_per_gpu(stage, params, p) for stage in STAGES}
    megatron = [FrameworkLayout("Megatron-LM", f"TP {tp} × PP {pp} × DP {dp}",
                                model_split_bytes_per_gpu(params, tp, pp, dp), "16P/(TP·PP)")]
    if dp > 1:  # the distributed optimizer shards across DP replicas: nothing to shard with one
        sharded = model_split_bytes_per_gpu(params, tp, pp, dp, distributed_optimizer=True)
        megatron.append(FrameworkLayout("Megatron-LM", "same + distributed optimizer", sharded,
                                        "(4P + 12P/DP)/(TP·PP)"))
    return megatron + [
        FrameworkLayout("DeepSpeed", "ZeRO-1", z["ZeRO-1"], "4P + 12P/p"),
        FrameworkLayout("DeepSpeed", "ZeRO-2", z["ZeRO-2"], "2P + 14P/p"),
        FrameworkLayout("DeepSpeed", "ZeRO-3", z["ZeRO-3"], "16P/p"),
        FrameworkLayout("PyTorch FSDP", "NO_SHARD", z["DDP"], "16P (DDP)"),
        FrameworkLayout("PyTorch FSDP", "SHARD_GRAD_OP", z["ZeRO-2"], "2P + 14P/p (ZeRO-2)"),
        FrameworkLayout("PyTorch FSDP", "FULL_SHARD", z["ZeRO-3"], "16P/p (ZeRO-3)"),
    ]


def gpus_to_hold(params: float, gpu_bytes: float, stage: str = "ZeRO-3") -> int | None:
    """Fewest GPUs whose memory holds the training state under `stage` (None: no number will do,
    because the unsharded part alone is larger than one GPU)."""
    _check_params(params)
    kept = sum(b for name, b in LEDGER.items() if name not in SHARDED[stage]) * params
    sharded = sum(b for name, b in LEDGER.items() if name in SHARDED[stage]) * params
    if not sharded:
        return 1 if kept <= gpu_bytes else None
    if kept >= gpu_bytes:
        return None
    return max(1, math.ceil(sharded / (gpu_bytes - kept)))
