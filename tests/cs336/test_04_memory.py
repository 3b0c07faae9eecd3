"""CS336 lecture 8, script 04 (memory): 04_memory.py run as a student would (claims read from --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_script

S04 = "cs336/04_memory.py"


# ---- the script ----------------------------------------------------------------------------------

EXPECTED_04 = {
    "CS-mem-ledger-param": "agrees",
    "CS-mem-ledger-grad": "agrees",
    "CS-mem-ledger-master": "agrees",
    "CS-mem-ledger-adam": "agrees",
    "CS-mem-bytes-per-param": "agrees",
    "CS-mem-200m": "agrees",  # a reading: GiB written for GB
    "CS-llama-mem-params": "agrees",
    "CS-llama-mem-grads": "agrees",
    "CS-llama-mem-master": "agrees",
    "CS-llama-mem-adam": "agrees",
    "CS-llama-mem-total": "agrees",
    "CS-llama-fits": "agrees",
    "CS-zero-mem-ddp": "agrees",
    "CS-zero-mem-zero1": "agrees",
    "CS-zero-mem-zero2": "agrees",
    "CS-zero-mem-zero3": "agrees",
    "CS-zero1-13b": "agrees",
    "CS-zero2-13b": "agrees",
    "CS-zero-comm-ddp": "agrees",
    "CS-zero-comm-zero1": "differs",
    "CS-zero-comm-zero2": "agrees",
    "CS-zero-comm-zero3": "differs",
    "CS-zero2-best": "agrees",
    "CS-megatron-gpus": "agrees",
}


def claims(path: Path) -> dict[str, dict]:
    return {c["ref"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


def tables_of(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"]


def test_04_claims_at_the_notes_settings(tmp_path: Path, quick_run) -> None:
    out = quick_run(S04, json_to=tmp_path / "o.json").stdout
    found = claims(tmp_path / "o.json")
    assert {ref: c["status"] for ref, c in found.items()} == EXPECTED_04
    assert all(c["why"] and c["erratum"] for c in found.values() if c["status"] == "differs")
    state = found["CS-mem-200m"]
    assert state["ours"] == pytest.approx(3.2) and state["unit"] == "GB" and state["reading"]
    assert found["CS-zero-comm-zero3"]["ours"] == "AG + AG + RS"
    # the notes' own ZeRO-1 (their ZeRO-2 replaces DDP's all-reduce, so ZeRO-1 keeps it) beside the cell's
    # "AG": the column's inconsistency, argued with the column's "extra"
    zero1 = found["CS-zero-comm-zero1"]
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
    assert tables["Part 3"]["values"]["megatron_gpus"] == 8 * 8 * 16 == 128 * 8   # 128 nodes of 8
    assert traffic["TP"][2] == "NVLink 4.0"   # TP 8 stays in a node
    lines = [ln for ln in out.splitlines() if len(ln) > 100]
    assert not lines, lines


def test_04_other_model_and_uneven_parameters(tmp_path: Path) -> None:
    run_script(S04, "--params", "1001", "--world-size", "3", "--json", str(tmp_path / "o.json"))
    data = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))
    found = {c["ref"]: c for c in data["claims"]}
    # The notes' 13B on 4 cards only.
    assert found["CS-zero1-13b"]["status"] == "other setting"
    assert found["CS-zero-comm-zero1"]["status"] == "differs"  # no flag changes that one
    rows = {r[0]: r for r in data["parts"]["Part 2"]["tables"]["zero_memory"]["rows"]}
    # 1001 parameters on 3 ranks: the busiest holds 334 of the sharded elements.
    assert rows["ZeRO-3"][4] == f"{16 * 334 / 1000:.4g} KB"
    assert rows["ZeRO-1"][4] == f"{(4 * 1001 + 12 * 334) / 1000:.4g} KB"


def test_04_megatron_other_split(tmp_path: Path) -> None:
    run_script(S04, "--tp", "16", "--pp", "1", "--dp", "2", "--global-batch", "8",
               "--json", str(tmp_path / "o.json"))
    traffic = {r[0]: r for r in tables_of(tmp_path)["Part 3"]["tables"]["megatron_traffic"]["rows"]}
    assert traffic["TP"][2] == "InfiniBand NDR"   # TP 16 crosses nodes of 8
    assert claims(tmp_path / "o.json")["CS-megatron-gpus"]["status"] == "other setting"


@pytest.mark.parametrize("args", [("--params", "0"), ("--params", "abc"), ("--params", "13X"),
                                  ("--global-batch", "100"), ("--tp", "0"), ("--world-size", "0"),
                                  ("--gpu-memory-gb", "-5")])
def test_04_usage_errors(args: tuple[str, ...]) -> None:
    assert_usage_error(S04, *args)
