"""Smoke tests of code/lecture14/05_data_parallel.py: runs --quick and checks what it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_script
from rank_faults import assert_named_at_once

SCRIPT = "lecture14/05_data_parallel.py"


def _claims(path: Path) -> dict[str, dict]:
    return {c["what"]: c for c in json.loads(path.read_text())["claims"]}


def test_quick_run_prints_every_part_and_the_notes_speedups(tmp_path: Path) -> None:
    out = tmp_path / "05.json"
    figs = tmp_path / "figs"
    proc = run_script(SCRIPT, "--quick", "--json", str(out), "--save-figs", str(figs))
    text = proc.stdout
    for part in range(1, 7):
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
    claims = _claims(out)
    for name in ("async_sgd_loss", "speedup"):  # the figures exist and hold a real picture
        png = figs / f"lecture14_05_{name}.png"
        assert png.is_file() and png.stat().st_size > 20_000, png
    speedups = {what: c["ours"] for what, c in claims.items() if what.endswith("GPUs")}
    assert [round(v, 2) for v in speedups.values()] == [6.12, 2.09, 0.77]
    assert all(claims[w]["status"] == "agrees" for w in speedups)
    assert round(claims["HW5 1.4× on 2 GPUs needs T_comm/T1 ≤ 1/1.4 − 1/2"]["ours"], 4) == 0.2143
    assert claims["replicas bit-identical after training"]["ours"] is True
    diffs = [c["ours"] for w, c in claims.items()
             if ("max |Δθ|" in w or "sum-then-divide" in w) and not isinstance(c["ours"], bool)]
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


def test_async_sgd_claims_say_where_the_notes_hold(tmp_path: Path) -> None:
    """§4.3 at the notes' setting: τ = 0 is sequential SGD, staleness hurts wherever τ = 0 converges,
    large lr diverges; at the unconverged smallest lr staleness helps, and the claim says why."""
    out = tmp_path / "05.json"
    run_script(SCRIPT, "--quick", "--json", str(out))
    found = {c["what"]: c for c in json.loads(out.read_text())["claims"] if c["ref"].startswith("L14-4.3")}
    status = {w: c["status"] for w, c in found.items()}
    assert status["async τ = 0 is sequential mini-batch SGD (same final loss, lr 0.01)"] == "agrees"
    assert status["lr 0.01: async τ = 0 (8× the updates) ends below sync"] == "agrees"
    assert status["staler ends worse at every lr where τ = 0 converges (within 1.5× the optimum)"] == "agrees"
    assert status["with 4000 gradients, staler ends worse at lr 0.01"] == "agrees"
    assert status["staler gradients diverge at a smaller or equal lr"] == "agrees"
    assert status["at the largest lr, 1, every async column diverges"] == "agrees"
    smallest = found["staler ends worse also at the smallest lr, 0.01"]
    assert smallest["status"] == "differs" and not smallest["erratum"]
    assert "no run has converged" in smallest["why"] and "slightly larger step" in smallest["why"]
    grid = found["async τ = 0 ends below sync at every lr of the grid"]
    assert grid["status"] == "differs" and "from lr 0.2 sync ends lower" in grid["why"]


def test_a_changed_flag_makes_claims_other_setting(tmp_path: Path) -> None:
    out = tmp_path / "05.json"
    run_script(SCRIPT, "--quick", "--seed", "1", "--step-ms", "40", "--json", str(out))
    found = _claims(out)
    assert found["staler gradients diverge at a smaller or equal lr"]["status"] == "other setting"
    assert "--seed 1 (notes' setting: 0)" in found["staler gradients diverge at a smaller or equal lr"]["decision"]
    assert found["10 MB gradients on 8 GPUs"]["status"] == "other setting"
    assert "--step-ms 40" in found["10 MB gradients on 8 GPUs"]["decision"]
    # claims no flag can change are still compared
    assert found["async τ = 0 is sequential mini-batch SGD (same final loss, lr 0.01)"]["status"] == "agrees"
    assert found["HW5 1.4× on 2 GPUs needs T_comm/T1 ≤ 1/1.4 − 1/2"]["status"] == "agrees"


def _gloo_avg_worker(rank: int, world_size: int) -> bool:
    import torch
    import torch.distributed as dist
    try:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.AVG)
        return False
    except (RuntimeError, ValueError):
        return True


def _average_checks_worker(rank: int, world_size: int) -> dict:
    import torch

    from lecture14 import hw5_checks
    return hw5_checks.average_checks(rank, torch.device("cpu"))


@pytest.mark.parametrize("nth", [1, 2])  # the AVG all-reduce (or, without AVG, average_gradients'), then the next
def test_an_error_in_the_average_checks_is_that_ranks(nth: int) -> None:
    """hw5_checks once caught any RuntimeError or ValueError of its AVG all-reduce as "gloo has no
    AVG": a rank that really failed there was reported as a lesson, and the others waited."""
    assert_named_at_once(3, 1, "all_reduce", nth, RuntimeError, _average_checks_worker)


def test_average_gradients_claims_from_real_ranks(tmp_path: Path) -> None:
    """§4.1: 'gloo has no AVG' decided by this torch's gloo (tried here in a run of our own);
    SUM then ÷ W and the grad-None skip agree; staleness K − 1 and 8× the updates at 8 workers."""
    from common.launcher import launch
    out = tmp_path / "05.json"
    run_script(SCRIPT, "--quick", "--json", str(out))
    claims = {c["ref"]: c for c in json.loads(out.read_text())["claims"] if c["ref"]}
    rejects = launch(_gloo_avg_worker, 2, timeout_s=20)[0]
    assert claims["L14-4.1-gloo-no-avg"]["ours"] is rejects
    assert claims["L14-4.1-gloo-no-avg"]["status"] == ("agrees" if rejects else "differs")
    for ref in ("L14-4.1-sum-then-divide", "L14-4.1-skip-none-grads", "L14-4.1-proportional-drops",
                "L14-4.2-weighted-fix", "L14-4.3-8x-updates"):
        assert claims[ref]["status"] == "agrees", ref
    assert claims["L14-4.3-staleness-k-minus-1"]["ours"] == 7 and claims["L14-4.3-staleness-k-minus-1"]["notes"] == 7
