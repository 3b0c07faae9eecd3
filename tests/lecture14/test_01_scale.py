"""Lecture 14 script 01 (scale): its model against hand computations, and the script run as a student
would (--quick), output checked."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import assert_usage_error, load_script, run_script


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    return load_script("lecture14/01_scale.py")


# ---- 01: 6ND, walls, parameter server -----------------------------------------------------------

def test_six_nd_fractions_of_peak(scale: ModuleType) -> None:
    peak = 989e12
    # By hand: 6 · N · D / (GPU-hours · 3600) / peak.
    llama = 6 * 405e9 * 15.6e12 / (30.84e6 * 3600) / peak
    deepseek = 6 * 37e9 * 14.8e12 / (2.664e6 * 3600) / peak
    assert scale.fraction_of_peak(scale.LLAMA_31, peak) == pytest.approx(llama, rel=1e-12)
    assert scale.fraction_of_peak(scale.DEEPSEEK_V3, peak) == pytest.approx(deepseek, rel=1e-12)
    assert round(100 * llama, 1) == 34.5 and round(100 * deepseek, 1) == 34.6
    # Total parameters must not leak into the MoE model's compute.
    assert scale.training_flops(scale.DEEPSEEK_V3.active_params, 1.0) == 6 * 37e9


def test_memory_per_worker(scale: ModuleType) -> None:
    assert sum(scale.BYTES_PER_PARAM.values()) == 16
    state = scale.training_state_bytes(405e9)
    assert state == pytest.approx(6.48e12)
    assert state / (8 * 16) == pytest.approx(50.625e9)


@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_parameter_server_counts(scale: ModuleType, k: int) -> None:
    moved = scale.parameter_server_step_bytes(k, 3.0)
    assert moved["server"] == 2 * k * 3.0
    assert all(moved[f"worker {i}"] == 2 * 3.0 for i in range(k))
    assert scale.ks_up_to(k)[-1] == k and scale.ks_up_to(12) == [1, 2, 4, 8, 12]


def test_01_runs(tmp_path: Path, quick_run) -> None:
    out = tmp_path / "01.json"
    proc = quick_run("lecture14/01_scale.py", json_to=out)
    text = proc.stdout
    for part in range(1, 5):
        assert f"== Part {part}:" in text   # the headers a reader matches with the notes' part numbers
    data = json.loads(out.read_text())
    values = {name: v for part in data["parts"].values() for name, v in part.get("values", {}).items()}
    # 6ND over GPU-hours at the H100's 989 TFLOP/s, by hand, to the digits printed
    assert round(values["llama_peak_pct"], 2) == 34.52 == round(
        100 * 6 * 405e9 * 15.6e12 / (30.84e6 * 3600 * 989e12), 2)
    assert round(values["deepseek_peak_pct"], 2) == 34.64 == round(
        100 * 6 * 37e9 * 14.8e12 / (2.664e6 * 3600 * 989e12), 2)
    assert values["state_405b_tb"] == values["dp_state_per_worker_tb"] == pytest.approx(405e9 * 16 / 1e12)
    assert values["tp_pp_state_gb"] == pytest.approx(405e9 * 16 / (8 * 16) / 1e9)   # 50.625: 50.62 printed
    claims = data["claims"]
    assert claims and all(c["status"] == "agrees" for c in claims), claims


def test_01_flags_change_the_numbers(tmp_path: Path) -> None:
    out = tmp_path / "01.json"
    run_script("lecture14/01_scale.py", "--peak-tflops", "1979", "--tp", "4", "--pp", "4",
               "--world-size", "6", "--size", "1GB", "--json", str(out))
    data = json.loads(out.read_text())
    rows = data["parts"]["Part 4"]["tables"]["ps_traffic"]["rows"]
    assert [r[0] for r in rows] == [1, 2, 4, 6]
    assert rows[-1][2] == "12 GB"  # server: 2 · 6 · 1 GB
    fraction = next(c for c in data["claims"] if c["what"].startswith("LLaMA"))
    assert fraction["ours"] == pytest.approx(100 * 6 * 405e9 * 15.6e12 / (30.84e6 * 3600) / 1979e12)
    assert fraction["status"] == "other setting"  # the notes' ≈ 35 % goes with 989 TFLOP/s


@pytest.mark.parametrize("argv", [["--world-size", "0"], ["--peak-tflops", "-1"], ["--tp", "0"],
                                  ["--size", "12XB"], ["--gpu-memory-gb", "nan"]])
def test_01_bad_flags(argv: list[str]) -> None:
    assert_usage_error("lecture14/01_scale.py", *argv)
