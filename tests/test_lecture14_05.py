"""Smoke tests of code/lecture14/05_data_parallel.py: runs --quick and checks what it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_usage_error, flat, run_script

SCRIPT = "lecture14/05_data_parallel.py"


def _claims(path: Path) -> dict[str, dict]:
    return {c["what"]: c for c in json.loads(path.read_text())["claims"]}


def test_quick_run_prints_every_part_and_the_notes_speedups(tmp_path: Path) -> None:
    out = tmp_path / "05.json"
    proc = run_script(SCRIPT, "--quick", "--json", str(out))
    text = proc.stdout
    for part in range(1, 8):
        assert f"== Part {part}:" in text
    assert "3 3 2 2" in text                                # Part 1: 10 samples on 4 ranks
    assert "union covers every index exactly once: True" in text
    assert "global random state untouched by the shuffles: True" in text
    assert "real ranks bit-identical to each other  True" in text
    assert "diverged" in text                               # Part 5
    part5 = json.loads(out.read_text())["parts"]["Part 5"]
    rows = part5["tables"]["final_loss"]["rows"]             # lr, lr·λ, sync, async τ = 0, 1, 3, 7
    assert all(float(v) < float(rows[0][2]) for v in rows[0][3:])  # smallest lr: async beats sync
    assert rows[-1][3] == "diverged" and rows[-1][2] != "diverged"  # largest lr: τ = 0 blows up, sync not
    assert part5["observed"] == {"async_beats_sync_at_smallest_lr": True, "staler_better_at_smallest_lr": True,
                                 "staler_diverges_at_no_larger_lr": True, "tau0_diverges_at_largest_lr": True,
                                 "sync_diverges_at_largest_lr": False}
    assert "at lr 1 τ = 0 diverges" in flat(text) and "averaging 8 mini-batches, survives" in flat(text)
    assert "rank 1 finished its work (so did rank 2, rank 3) while rank 0 waited" in flat(text)   # Part 7: the skipper named
    claims = _claims(out)
    speedups = {what: c["ours"] for what, c in claims.items() if what.endswith("GPUs")}
    assert [round(v, 2) for v in speedups.values()] == [6.12, 2.09, 0.77]
    assert all(claims[w]["status"] == "agrees" for w in speedups)
    assert round(claims["HW5 1.4× on 2 GPUs needs T_comm/T1 ≤ 1/1.4 − 1/2"]["ours"], 4) == 0.2143
    assert claims["replicas bit-identical after training"]["ours"] is True
    diffs = [c["ours"] for w, c in claims.items() if "max |Δθ|" in w or "sum-then-divide" in w]
    assert diffs and all(0 <= d < 1e-12 for d in diffs)     # round-off only
    naive = claims["naive relative error, orthogonal per-sample grads (= weight-vector error)"]
    assert naive["ours"] == pytest.approx(100 * (1 / 24) ** 0.5, rel=1e-9)  # ‖Δw‖/‖w‖ for 3,3,2,2: 20.41 %
    assert naive["status"] == "differs"                     # 20.41 % is not the notes' 21 % to the unit


def test_other_world_size_and_link(tmp_path: Path) -> None:
    out = tmp_path / "05.json"
    proc = run_script(SCRIPT, "--quick", "--world-size", "3", "--ps-workers", "3", "--alpha-us", "0",
                      "--json", str(out))
    assert "3 real ranks, size 10" in proc.stdout
    assert "4 4 2" not in proc.stdout and "4 3 3" in proc.stdout  # 10 on 3 ranks: 4, 3, 3
    assert "async τ=2" in proc.stdout                           # τ = K − 1 with 3 workers
    data = json.loads(out.read_text())
    assert data["parts"]["Part 2"]["tables"]["real_ranks"]["rows"][0][1] == "True"
    # α = 0: ring time is 2(K−1)/K · N/β, so 10 MB on 8 GPUs gives 20 / (2.5 + 0.7) ms
    ours = _claims(out)["10 MB gradients on 8 GPUs"]["ours"]
    assert ours == pytest.approx(20 / (2.5 + 2 * 7 / 8 * 10e6 / 25e9 * 1e3), rel=1e-12)


@pytest.mark.parametrize("flag, value", [("--world-size", "0"), ("--world-size", "1"), ("--beta-gbs", "-3")])
def test_bad_flags_are_one_line_errors(flag: str, value: str) -> None:
    assert_usage_error(SCRIPT, flag, value)
