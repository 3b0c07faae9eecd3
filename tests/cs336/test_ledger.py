"""CS336 lecture 8 memory (cs336/ledger.py): the ledger against hand sums, ZeRO's per-GPU bytes against
a direct count of every rank's shards, Megatron's split and the framework rows."""

from __future__ import annotations

import numpy as np
import pytest

from cs336 import ledger as lg

# Bytes per parameter of each kind of tensor, written out here rather than taken from the module.
FP16_PARAM, FP16_GRAD, FP32_MASTER, ADAM_M, ADAM_V = 2, 2, 4, 4, 4


def test_ledger_sums_by_hand() -> None:
    assert lg.BYTES_PER_PARAM == 16
    assert lg.training_state_bytes(200e6) == 3.2e9
    assert lg.ledger_bytes(13e9) == {"fp16 parameters": 26e9, "fp16 gradients": 26e9,
                                     "fp32 master weights": 52e9, "Adam m (fp32)": 52e9,
                                     "Adam v (fp32)": 52e9}
    assert lg.training_state_bytes(13e9) == 208e9
    assert lg.MLP_12.params == 201_326_592
    assert lg.training_state_bytes(lg.MLP_12.params) == 3 * 2**30  # exactly 3 GiB, not 3.2
    assert lg.activation_bytes(128, 4096) == 2**20
    assert lg.activation_bytes(128, 5120) == 1_310_720  # 1.25 MiB, 1.31 MB
    assert lg.activation_bytes(1, 12288, tokens_per_sample=2048) == 2048 * 12288 * 2


def state_per_rank(stage: str, tensor_sizes: list[int], p: int, flatten: bool) -> list[int]:
    """Build every rank's training state and count its bytes.

    flatten=True: ZeRO's way, one flat buffer of all parameters cut into p contiguous pieces.
    flatten=False: each tensor cut into p pieces on its own (FSDP-like, per module).
    """
    sharded = {"DDP": set(), "ZeRO-1": {"master", "m", "v"}, "ZeRO-2": {"grad", "master", "m", "v"},
               "ZeRO-3": {"param", "grad", "master", "m", "v"}}[stage]
    itemsize = {"param": FP16_PARAM, "grad": FP16_GRAD, "master": FP32_MASTER, "m": ADAM_M, "v": ADAM_V}
    total = sum(tensor_sizes)
    groups = [np.arange(total)] if flatten else [np.arange(n) for n in tensor_sizes]
    held = [0] * p
    for kind, size in itemsize.items():
        for rank in range(p):
            if kind in sharded:
                held[rank] += size * sum(len(np.array_split(g, p)[rank]) for g in groups)
            else:
                held[rank] += size * total
    return held


TENSORS = [[7, 13, 100, 5, 1], [4096 * 3, 17], [1], [999]]


@pytest.mark.parametrize("tensors", TENSORS)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 64])
@pytest.mark.parametrize("stage", lg.STAGES)
def test_zero_against_a_direct_count(tensors: list[int], p: int, stage: str) -> None:
    P = sum(tensors)
    formula = lg.zero_bytes_per_gpu(stage, P, p)
    assert formula == pytest.approx(lg.zero_notes_formula(stage, P, p), rel=1e-12)
    for flatten in (True, False):
        held = state_per_rank(stage, tensors, p, flatten)
        # The closed form is the average rank: whole elements only move bytes between ranks.
        assert sum(held) == pytest.approx(p * formula, rel=1e-12)
        slack = 16 * (1 if flatten else len(tensors))  # one extra element per sharded buffer
        assert max(held) - formula < slack + 1e-9
    assert lg.zero_bytes_per_rank(stage, P, p) == state_per_rank(stage, tensors, p, flatten=True)


def test_zero_notes_numbers() -> None:
    assert lg.zero_bytes_per_gpu("DDP", 13e9, 4) == 208e9
    assert lg.zero_bytes_per_gpu("ZeRO-1", 13e9, 4) == 4 * 13e9 + 12 * 13e9 / 4 == 91e9
    assert lg.zero_bytes_per_gpu("ZeRO-2", 13e9, 4) == 71.5e9
    assert lg.zero_bytes_per_gpu("ZeRO-3", 13e9, 4) == 52e9
    with pytest.raises(ValueError):
        lg.zero_bytes_per_gpu("ZeRO-4", 1, 1)
    with pytest.raises(ValueError):
        lg.zero_bytes_per_rank("ZeRO-1", 10.5, 2)


def test_megatron_split_and_frameworks() -> None:
    P = 175e9
    assert lg.model_split_bytes_per_gpu(P, 8, 8, 16) == pytest.approx(16 * P / 64)
    assert lg.model_split_bytes_per_gpu(P, 8, 8, 16, distributed_optimizer=True) == pytest.approx(
        4 * P / 64 + 12 * P / 1024)
    rows = {(f.framework, f.setting): f.bytes_per_gpu for f in lg.framework_layouts(13e9, 16, 8, 2)}
    assert rows[("Megatron-LM", "TP 8 × PP 2 × DP 1")] == 13e9
    assert ("Megatron-LM", "same + distributed optimizer") not in rows  # no DP replicas to shard over
    assert rows[("PyTorch FSDP", "FULL_SHARD")] == rows[("DeepSpeed", "ZeRO-3")] == 16 * 13e9 / 16
    assert rows[("PyTorch FSDP", "SHARD_GRAD_OP")] == rows[("DeepSpeed", "ZeRO-2")]
    assert rows[("PyTorch FSDP", "NO_SHARD")] == 208e9
    with_dp = {f.setting: f.bytes_per_gpu for f in lg.framework_layouts(13e9, 32, 8, 2)}
    assert with_dp["same + distributed optimizer"] == pytest.approx(4 * 13e9 / 16 + 12 * 13e9 / 32)
    with pytest.raises(ValueError):
        lg.framework_layouts(13e9, 12, 8, 1)


@pytest.mark.parametrize("params", [1e9, 10e9, 13e9, 100e9, 1e12, 5e9])
@pytest.mark.parametrize("stage", lg.STAGES)
def test_gpus_to_hold_against_a_scan(params: float, stage: str) -> None:
    gpu = 80e9
    scan = next((p for p in range(1, 5000) if lg.zero_bytes_per_gpu(stage, params, p) <= gpu), None)
    assert lg.gpus_to_hold(params, gpu, stage) == scan
