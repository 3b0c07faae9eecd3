"""CS336 lecture 8, script 03 (costs): 03_costs.py run as a student would (claims read from --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_script

S03 = "cs336/03_costs.py"


# ---- the script ----------------------------------------------------------------------------------

EXPECTED_03 = {  # row id → status at the notes' settings; every 'differs' is an erratum the script explains
    "CS-ab-first-order": "agrees",
    "CS-ab-ring": "agrees",
    "CS-ab-two-facts": "agrees",
    "CS-ab-example-latency": "agrees",
    "CS-ab-example-bandwidth": "agrees",  # a reading: MiB and GiB/s worked as MB and GB/s
    "CS-ab-example-near-2ms": "agrees",
    "CS-links-nvlink-bw": "agrees",
    "CS-links-ib": "agrees",
    "CS-links-roce": "agrees",
    "CS-links-nvlink-over-ib": "differs",
    "CS-links-ib-over-eth": "agrees",
    "CS-links-pcie": "differs",
    "CS-links-nvlink-450": "differs",
    "CS-links-ib-40": "agrees",
    "CS-links-ib-latency": "differs",
    "CS-llama-grads": "agrees",
    "CS-box-8-cards": "differs",
    "CS-box-nvlink-87": "agrees",
    "CS-box-ib-975": "agrees",
    "CS-llama-volume": "agrees",
    "CS-llama-t-nvlink": "agrees",
    "CS-llama-t-ib": "agrees",
    "CS-llama-t-eth": "agrees",
    "CS-llama-nvlink-hidden": "agrees",
    "CS-tpdp-example-act": "agrees",
    "CS-tp-calls": "agrees",
    "CS-tpdp-dp-calls": "agrees",
    "CS-tpdp-dp-per-call": "agrees",
    "CS-tpdp-tp-per-call": "differs",
    "CS-tpdp-tp-per-step": "differs",
    "CS-tpdp-example-tp-step": "differs",
    "CS-tpdp-example-tenth": "agrees",
    "CS-tpdp-example-with-sequence": "differs",
    "CS-tp-startups-nvlink": "agrees",
    "CS-tp-startups-ib": "agrees",
    "CS-tp-example-act": "agrees",
    "CS-tp-example-per-layer": "agrees",
    "CS-mlp4-layer-params": "agrees",
    "CS-mlp4-layer-mib": "agrees",
    "CS-mlp4-params": "agrees",
    "CS-mlp4-state": "agrees",  # a reading: GiB written for GB
    "CS-mlp4-act": "agrees",
}


def claims(path: Path) -> dict[str, dict]:
    return {c["ref"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


@pytest.fixture(scope="module")
def quick_03(tmp_path_factory: pytest.TempPathFactory, quick_run) -> tuple[str, dict, dict[str, dict]]:
    out = tmp_path_factory.mktemp("c03") / "o.json"
    proc = quick_run(S03, json_to=out)
    return proc.stdout, proc.data, claims(out)


def test_03_claims_at_the_notes_settings(quick_03: tuple[str, dict, dict[str, dict]]) -> None:
    out, data, found = quick_03
    assert {ref: c["status"] for ref, c in found.items()} == EXPECTED_03
    assert all(c["why"] and c["erratum"] for c in found.values() if c["status"] == "differs")
    assert all(c["rule"] for c in found.values())
    ours = {ref: c["ours"] for ref, c in found.items()}
    assert ours["CS-ab-example-bandwidth"] == pytest.approx(1.92)
    assert found["CS-ab-example-bandwidth"]["reading"]
    assert ours["CS-links-nvlink-over-ib"] == 9
    assert ours["CS-box-8-cards"] == pytest.approx(45.5)
    assert ours["CS-llama-t-nvlink"] == pytest.approx(39e9 / 450e9 * 1e3 + 6e-3)
    # the notes' MB is MiB (a reading): 1.25 MiB, ours in their unit
    act = found["CS-tpdp-example-act"]
    assert act["ours"] == pytest.approx(1.25) and act["unit"] == "MiB" and act["reading"]
    # 40 all-gathers and 40 reduce-scatters of (p-1)/p·A each: 75 MiB beside the notes' 150 (MiB, read so),
    # the notes inconsistent (all-gathers by name, all-reduces by volume)
    step = found["CS-tpdp-example-tp-step"]
    assert step["ours"] == pytest.approx(75) and step["unit"] == "MiB" and step["notes"] == 150
    assert step["error"] == "inconsistency" and step["reading"]
    assert "75 MiB" in step["why"] and "150 MiB" in step["why"]
    assert ours["CS-tpdp-tp-per-call"] == 0.75
    assert ours["CS-tpdp-tp-per-step"] == 1.5
    assert ours["CS-tp-example-per-layer"] == 384
    state = found["CS-mlp4-state"]
    assert state["ours"] == pytest.approx(3.221225472) and state["unit"] == "GB" and state["reading"]
    assert ours["CS-links-nvlink-bw"] == 900
    assert found["CS-links-pcie"]["erratum"] == found["CS-links-nvlink-over-ib"]["erratum"]
    assert found["CS-links-pcie"]["error"] == "inconsistency"
    assert ours["CS-tpdp-example-with-sequence"] == pytest.approx(8.26, abs=0.01)
    assert ours["CS-links-pcie"] == pytest.approx(2 * 32 * 16 * 128 / 130 / 8)
    assert ours["CS-links-nvlink-450"] == 100
    assert ours["CS-links-ib-40"] == 80
    part1 = data["parts"]["Part 1"]["values"]
    assert part1["ring_terms_counted"] is True and part1["first_order_same"] is True   # counted = closed
    # 1.5 × 64 MiB / 50 GiB/s, and as the notes worked it, in MB and GB/s (1.88 ms and 1.92 ms printed)
    assert part1["bandwidth_ms"] == pytest.approx(1.5 * 64 * 2**20 / (50 * 2**30) * 1e3, rel=1e-12)
    assert part1["bandwidth_decimal_ms"] == pytest.approx(1.5 * 64 / 50, rel=1e-12)
    lines = [ln for ln in out.splitlines() if len(ln) > 100]
    assert not lines, lines


def test_03_other_world_size_voids_only_what_depends_on_it(tmp_path: Path) -> None:
    run_script(S03, "--world-size", "8", "--alpha-us", "2", "--beta-gbs", "25", "--size", "1MiB",
               "--json", str(tmp_path / "o.json"))
    found = claims(tmp_path / "o.json")
    for ref in ("CS-ab-example-latency", "CS-ab-example-bandwidth",
                 "CS-llama-t-nvlink",
                 "CS-tp-example-per-layer",
                 "CS-tpdp-example-tp-step"):
        assert found[ref]["status"] == "other setting", ref
    # the rows at a fixed setting keep their verdict: 39 GB is the 4-card figure whatever --world-size
    assert found["CS-box-8-cards"]["status"] == "differs"
    assert found["CS-tpdp-tp-per-call"]["status"] == "differs"
    assert found["CS-llama-volume"]["ours"] == pytest.approx(45.5)
    assert found["CS-ab-example-latency"]["ours"] == pytest.approx(14 * 2)  # 2(p-1)α with α = 2 µs
    assert found["CS-ab-example-near-2ms"]["ours"] == pytest.approx(1.75 * 2**20 / 25e9 * 1e3)
    part1 = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"]["Part 1"]
    assert part1["balance_bytes"] == pytest.approx(8 * 2e-6 * 25e9)  # S = p·α·B = 400,000 B (390.6 KiB)


@pytest.mark.parametrize("p", ["2", "3", "13"])
def test_03_odd_world_sizes(p: str, tmp_path: Path) -> None:
    out = run_script(S03, "--world-size", p, "--quick", "--micro-batches", "3", "--json",
                     str(tmp_path / "o.json")).stdout
    part1 = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"]["Part 1"]["values"]
    assert part1["ring_terms_counted"] is True and part1["first_order_same"] is True
    assert "Traceback" not in out
    if p == "13":
        assert "only 12 stages" in out   # the reader is told why the chart has fewer stages than ranks


@pytest.mark.parametrize("args", [("--world-size", "0"), ("--world-size", "1"), ("--beta-gbs", "0"),
                                  ("--size", "12XB"), ("--alpha-us", "-1"), ("--micro-batches", "0"),
                                  ("--bogus",)])
def test_03_usage_errors(args: tuple[str, ...]) -> None:
    assert_usage_error(S03, *args)


def test_03_needs_no_torch() -> None:
    text = (Path(__file__).resolve().parents[2] / "code" / S03).read_text(encoding="utf-8")
    assert "import torch" not in text
