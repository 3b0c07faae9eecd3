"""CS336 lecture 8, script 03 (costs): 03_costs.py run as a student would (claims read from --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_script

S03 = "cs336/03_costs.py"


# ---- the script ----------------------------------------------------------------------------------

EXPECTED_03 = {  # claim → status at the notes' settings; every 'differs' is an erratum the script explains
    "α·N_msg + S/B with counted messages and bytes = ring T": "agrees",
    "counted ring all-reduce: 2(p-1) rounds, 2(p-1)/p·S": "agrees",
    "α's share of T falls as S grows (Part 1's sweep)": "agrees",
    "latency term 6α": "agrees",
    "bandwidth term 1.5 × 64 MB / 50 GB/s": "agrees",  # a reading: MiB and GiB/s worked as MB and GB/s
    "the bandwidth term is close to 2 ms": "agrees",
    "NVLink 4.0 two-way (18 links × 25 GB/s each way)": "agrees",
    "InfiniBand NDR 400 Gb/s in GB/s": "agrees",
    "RoCE 100 Gb/s in GB/s": "agrees",
    "NVLink / InfiniBand, one way each": "differs",
    "InfiniBand / Ethernet 100G, one way each": "agrees",
    "PCIe 5.0 x16 two-way": "differs",
    "NVLink's 450 GB/s is 60-85 % of peak": "differs",
    "InfiniBand's 40 GB/s is 60-85 % of peak": "agrees",
    "InfiniBand's 5 µs (TP paragraph) in 1-2 µs": "differs",
    "gradients 13B × 2 B": "agrees",
    "ring volume per rank, 8 cards (ring model)": "differs",
    "39 GB / 450 GB/s (the conversion box)": "agrees",
    "39 GB / 40 GB/s (the conversion box)": "agrees",
    "ring volume per rank, p = --world-size (ring model)": "agrees",
    "all-reduce time, NVLink 450 GB/s": "agrees",
    "all-reduce time, InfiniBand 40 GB/s": "agrees",
    "all-reduce time, 100G Ethernet": "agrees",
    "NVLink's all-reduce / a 200 ms step's backward": "agrees",
    "TP activation A = 128 × 5120 × 2 B": "agrees",
    "TP collectives per step (2L)": "agrees",
    "DP collectives per step": "agrees",
    "DP per step per rank, in LW (p = 4)": "agrees",
    "TP per call per rank, in A (p = 4)": "differs",
    "TP per step per rank, in L·A (p = 4)": "differs",
    "TP a step per rank, 80 × (p-1)/p·A (ring model)": "differs",
    "TP's bytes / DP's a step": "agrees",
    "TP's bytes / DP's, 4096-token sequences": "differs",
    "TP start-ups, 80 calls × 1 µs (NVLink)": "agrees",
    "TP start-ups, 80 calls × 5 µs (InfiniBand)": "agrees",
    "activation A = 128 × 1024 × 2 B": "agrees",
    "a layer per rank: forward AG + backward RS (ring model)": "agrees",
    "parameters per layer d²": "agrees",
    "one layer's weights, fp16": "agrees",
    "parameters, 12 layers": "agrees",
    "training state 201M × 16 B": "agrees",  # a reading: GiB written for GB
    "activation 128 × 4096 × 2 B": "agrees",
}


def claims(path: Path) -> dict[str, dict]:
    return {c["what"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


@pytest.fixture(scope="module")
def quick_03(tmp_path_factory: pytest.TempPathFactory, quick_run) -> tuple[str, dict[str, dict]]:
    out = tmp_path_factory.mktemp("c03") / "o.json"
    proc = quick_run(S03, json_to=out)
    return proc.stdout, claims(out)


def test_03_claims_at_the_notes_settings(quick_03: tuple[str, dict[str, dict]]) -> None:
    out, found = quick_03
    assert {w: c["status"] for w, c in found.items()} == EXPECTED_03
    assert all(c["why"] and c["erratum"] for c in found.values() if c["status"] == "differs")
    assert all(c["rule"] for c in found.values())
    ours = {w: c["ours"] for w, c in found.items()}
    assert ours["bandwidth term 1.5 × 64 MB / 50 GB/s"] == pytest.approx(1.92)
    assert found["bandwidth term 1.5 × 64 MB / 50 GB/s"]["reading"]
    assert ours["NVLink / InfiniBand, one way each"] == 9
    assert ours["ring volume per rank, 8 cards (ring model)"] == pytest.approx(45.5)
    assert ours["all-reduce time, NVLink 450 GB/s"] == pytest.approx(39e9 / 450e9 * 1e3 + 6e-3)
    # the notes' MB is MiB (a reading): 1.25 MiB, ours in their unit
    act = found["TP activation A = 128 × 5120 × 2 B"]
    assert act["ours"] == pytest.approx(1.25) and act["unit"] == "MiB" and act["reading"]
    # 40 all-gathers and 40 reduce-scatters of (p-1)/p·A each: 75 MiB beside the notes' 150 (MiB, read so),
    # the notes inconsistent (all-gathers by name, all-reduces by volume)
    step = found["TP a step per rank, 80 × (p-1)/p·A (ring model)"]
    assert step["ours"] == pytest.approx(75) and step["unit"] == "MiB" and step["notes"] == 150
    assert step["error"] == "inconsistency" and step["reading"]
    assert "75 MiB" in step["why"] and "150 MiB" in step["why"]
    assert ours["TP per call per rank, in A (p = 4)"] == 0.75
    assert ours["TP per step per rank, in L·A (p = 4)"] == 1.5
    assert ours["a layer per rank: forward AG + backward RS (ring model)"] == 384
    state = found["training state 201M × 16 B"]
    assert state["ours"] == pytest.approx(3.221225472) and state["unit"] == "GB" and state["reading"]
    assert ours["NVLink 4.0 two-way (18 links × 25 GB/s each way)"] == 900
    assert found["PCIe 5.0 x16 two-way"]["erratum"] == found["NVLink / InfiniBand, one way each"]["erratum"]
    assert found["PCIe 5.0 x16 two-way"]["error"] == "inconsistency"
    assert ours["TP's bytes / DP's, 4096-token sequences"] == pytest.approx(8.26, abs=0.01)
    assert ours["PCIe 5.0 x16 two-way"] == pytest.approx(2 * 32 * 16 * 128 / 130 / 8)
    assert ours["NVLink's 450 GB/s is 60-85 % of peak"] == 100
    assert ours["InfiniBand's 40 GB/s is 60-85 % of peak"] == 80
    assert "same" in out and "DIFFERENT" not in out
    assert "1.88 ms" in out and "1.92 ms" in out  # in MiB and GiB/s, and as the notes worked it
    lines = [ln for ln in out.splitlines() if len(ln) > 100]
    assert not lines, lines


def test_03_other_world_size_voids_only_what_depends_on_it(tmp_path: Path) -> None:
    out = run_script(S03, "--world-size", "8", "--alpha-us", "2", "--beta-gbs", "25", "--size", "1MiB",
                     "--json", str(tmp_path / "o.json")).stdout
    found = claims(tmp_path / "o.json")
    for what in ("latency term 6α", "bandwidth term 1.5 × 64 MB / 50 GB/s",
                 "all-reduce time, NVLink 450 GB/s",
                 "a layer per rank: forward AG + backward RS (ring model)",
                 "TP a step per rank, 80 × (p-1)/p·A (ring model)"):
        assert found[what]["status"] == "other setting", what
    # the rows at a fixed setting keep their verdict: 39 GB is the 4-card figure whatever --world-size
    assert found["ring volume per rank, 8 cards (ring model)"]["status"] == "differs"
    assert found["TP per call per rank, in A (p = 4)"]["status"] == "differs"
    assert found["ring volume per rank, p = --world-size (ring model)"]["ours"] == pytest.approx(45.5)
    assert found["latency term 6α"]["ours"] == pytest.approx(14 * 2)  # 2(p-1)α with α = 2 µs
    assert found["the bandwidth term is close to 2 ms"]["ours"] == pytest.approx(1.75 * 2**20 / 25e9 * 1e3)
    assert "S = p·α·B = 390.6 KiB" in out  # 8 × 2 µs × 25 GB/s = 400,000 B


@pytest.mark.parametrize("p", ["2", "3", "13"])
def test_03_odd_world_sizes(p: str) -> None:
    out = run_script(S03, "--world-size", p, "--quick", "--micro-batches", "3").stdout
    assert "DIFFERENT" not in out and "Traceback" not in out
    if p == "13":
        assert "only 12 stages" in out


@pytest.mark.parametrize("args", [("--world-size", "0"), ("--world-size", "1"), ("--beta-gbs", "0"),
                                  ("--size", "12XB"), ("--alpha-us", "-1"), ("--micro-batches", "0"),
                                  ("--bogus",)])
def test_03_usage_errors(args: tuple[str, ...]) -> None:
    assert_usage_error(S03, *args)


def test_03_needs_no_torch() -> None:
    text = (Path(__file__).resolve().parents[2] / "code" / S03).read_text(encoding="utf-8")
    assert "import torch" not in text
