"""CS336 lecture 8 memory: the ledger against hand sums, ZeRO's per-GPU bytes against a direct count
of every rank's shards, Megatron's split and the framework rows, and 04_memory.py run as a student
would (claims read from --json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_usage_error, run_script

from cs336 import ledger as lg

S04 = "cs336/04_memory.py"
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


# ---- the script ----------------------------------------------------------------------------------

EXPECTED_04 = {
    "ledger: fp16 parameter": "agrees",
    "ledger: fp16 gradient": "agrees",
    "ledger: fp32 master weight": "agrees",
    "ledger: Adam m + v": "agrees",
    "bytes per parameter": "agrees",
    "200M × 16 B": "agrees",  # a reading: GiB written for GB
    "Llama 2 13B fp16 parameters": "agrees",
    "Llama 2 13B fp16 gradients": "agrees",
    "Llama 2 13B fp32 master weights": "agrees",
    "Llama 2 13B Adam m + v": "agrees",
    "Llama 2 13B training state": "agrees",
    "13B's state fits one 80 GB card": "agrees",
    "16P = the ledger, DDP": "agrees",
    "4P + 12P/p = the ledger, ZeRO-1 sharded": "agrees",
    "2P + 14P/p = the ledger, ZeRO-2 sharded": "agrees",
    "16P/p = the ledger, ZeRO-3 sharded": "agrees",
    "ZeRO-1: Adam m + v per card": "agrees",
    "ZeRO-2: gradients per card": "agrees",
    "DDP communicates": "agrees",
    "ZeRO-1 communicates (the notes' text)": "differs",
    "ZeRO-2 communicates": "agrees",
    "ZeRO-3 communicates": "differs",
    "ZeRO-2 saves memory for DDP's bytes; ZeRO-3 costs 1.5× (13B, 4 cards)": "agrees",
    "GPUs = TP × PP × DP": "agrees",
}


def claims(path: Path) -> dict[str, dict]:
    return {c["what"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


def tables_of(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"]


def test_04_claims_at_the_notes_settings(tmp_path: Path, quick_run) -> None:
    out = quick_run(S04, json_to=tmp_path / "o.json").stdout
    found = claims(tmp_path / "o.json")
    assert {w: c["status"] for w, c in found.items()} == EXPECTED_04
    assert all(c["why"] and c["erratum"] for c in found.values() if c["status"] == "differs")
    state = found["200M × 16 B"]
    assert state["ours"] == pytest.approx(3.2) and state["unit"] == "GB" and state["reading"]
    assert found["ZeRO-3 communicates"]["ours"] == "AG + AG + RS"
    # the notes' own ZeRO-1 (their ZeRO-2 replaces DDP's all-reduce, so ZeRO-1 keeps it) beside the cell's
    # "AG": the column's inconsistency, argued with the column's "extra"
    zero1 = found["ZeRO-1 communicates (the notes' text)"]
    assert zero1["ours"] == "AR + AG" and zero1["error"] == "inconsistency"
    assert "extra" in zero1["why"] and "1.5× DDP" in zero1["why"]
    zero_traffic = {r[0]: r for r in tables_of(tmp_path)["Part 2"]["tables"]["zero_traffic"]["rows"]}
    notes_zero1 = zero_traffic["ZeRO-1 (notes' text)"]
    assert notes_zero1[1] == "1 AR + 1 AG" and notes_zero1[4] == "1.5"
    assert zero_traffic["ZeRO-1 (paper)"][1] == "1 RS + 1 AG" and zero_traffic["ZeRO-1 (paper)"][4] == "1"
    tables = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"]
    traffic = {r[0]: r for r in tables["Part 3"]["tables"]["megatron_traffic"]["rows"]}
    assert traffic["TP"][3] == 4 * 12 * 96  # 4 all-reduces × 12 layers a stage × 96 micro-batches
    assert traffic["DP"][4] == "10.25 GB"   # 2·15/16 × 2 B × 175B/64
    assert "128 nodes of 8" in out
    lines = [ln for ln in out.splitlines() if len(ln) > 100]
    assert not lines, lines


def test_04_other_model_and_uneven_parameters(tmp_path: Path) -> None:
    run_script(S04, "--params", "1001", "--world-size", "3", "--json", str(tmp_path / "o.json"))
    data = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))
    found = {c["what"]: c for c in data["claims"]}
    # The notes' 13B on 4 cards only.
    assert found["ZeRO-1: Adam m + v per card"]["status"] == "other setting"
    assert found["ZeRO-1 communicates (the notes' text)"]["status"] == "differs"  # no flag changes that one
    rows = {r[0]: r for r in data["parts"]["Part 2"]["tables"]["zero_memory"]["rows"]}
    # 1001 parameters on 3 ranks: the busiest holds 334 of the sharded elements.
    assert rows["ZeRO-3"][4] == f"{16 * 334 / 1000:.4g} KB"
    assert rows["ZeRO-1"][4] == f"{(4 * 1001 + 12 * 334) / 1000:.4g} KB"


def test_04_megatron_other_split(tmp_path: Path) -> None:
    out = run_script(S04, "--tp", "16", "--pp", "1", "--dp", "2", "--global-batch", "8",
                     "--json", str(tmp_path / "o.json")).stdout
    assert "crosses nodes" in out
    assert claims(tmp_path / "o.json")["GPUs = TP × PP × DP"]["status"] == "other setting"


@pytest.mark.parametrize("args", [("--params", "0"), ("--params", "abc"), ("--params", "13X"),
                                  ("--global-batch", "100"), ("--tp", "0"), ("--world-size", "0"),
                                  ("--gpu-memory-gb", "-5")])
def test_04_usage_errors(args: tuple[str, ...]) -> None:
    assert_usage_error(S04, *args)
