"""CS336 lecture 8, script 04 (memory): 04_memory.py run as a student would (claims read from --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_script

S04 = "cs336/04_memory.py"


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
