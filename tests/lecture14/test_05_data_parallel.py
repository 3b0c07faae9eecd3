"""Smoke tests of code/lecture14/05_data_parallel.py: runs --quick and checks what it prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, load_script, python, run_script
from rank_faults import assert_named_at_once

SCRIPT = "lecture14/05_data_parallel.py"


def _claims(path: Path) -> dict[str, dict]:
    """The run's decided rows of the notes' table, by id."""
    return {c["ref"]: c for c in json.loads(path.read_text())["claims"]}


def test_quick_run_prints_every_part_and_the_notes_speedups(tmp_path: Path, quick_run) -> None:
    out = tmp_path / "05.json"
    proc = quick_run(SCRIPT, json_to=out)
    figs = proc.figures
    text = proc.stdout
    for part in range(1, 7):
        assert f"== Part {part}:" in text   # the headers a reader matches with the notes' part numbers
    # Part 1: 10 samples on 4 ranks (no FAILED mark anywhere: quick_run holds the run to exit 0)
    part1 = json.loads(out.read_text())["parts"]["Part 1"]
    assert {row[0]: row[1] for row in part1["tables"]["sizes"]["rows"]}[10] == "3 3 2 2"
    real = json.loads(out.read_text())["parts"]["Part 2"]["tables"]["replicas"]["rows"][-1]
    assert real[0] == "4 real ranks" and real[2] == "yes" and real[-1] == "ok"  # bit-identical, = one process
    part5 = json.loads(out.read_text())["parts"]["Part 5"]
    rows = part5["tables"]["final_loss"]["rows"]             # lr, lr·λ, sync, async τ = 0, 1, 3, 7
    assert all(float(v) < float(rows[0][2]) for v in rows[0][3:])  # smallest lr: async beats sync
    assert rows[-1][3] == "diverged" and rows[-1][2] != "diverged"  # largest lr: τ = 0 blows up, sync not
    claims = _claims(out)
    # Part 1 on real ranks: the slices cover every index once and the global random state is untouched
    assert claims["L14-4.1-partition-no-communication"]["ours"] is True
    for name in ("async_sgd_loss", "speedup"):  # the figures exist and hold a real picture
        png = figs / f"lecture14_05_{name}.png"
        assert png.is_file() and png.stat().st_size > 20_000, png
    speedups = {ref: c["ours"] for ref, c in claims.items() if ref.startswith("L14-4.4-speedup-")}
    assert [round(v, 2) for v in speedups.values()] == [6.12, 2.09, 0.77]
    assert all(claims[ref]["status"] == "agrees" for ref in speedups)
    assert round(claims["L14-4.4-hw5-budget"]["ours"], 4) == 0.2143
    assert claims["L14-4.2-replicas-identical"]["ours"] is True
    refs = ("L14-4.2-full-batch-gap", "L14-4.2-accumulation-gap", "L14-4.2-fixed-error")
    diffs = [claims[ref]["ours"] for ref in refs]
    assert all(0 <= d < 1e-12 for d in diffs)     # round-off only
    naive = claims["L14-4.2-naive-error-21pct"]
    assert naive["ours"] == pytest.approx(100 * (1 / 24) ** 0.5, rel=1e-9)  # ‖Δw‖/‖w‖ for 3,3,2,2: 20.41 %
    assert naive["status"] == "ours only"  # a data-free model: the notes' 21 % is their data's
    mlp = claims["L14-4.2-naive-error-21pct-mlp"]
    assert mlp["status"] == "differs" and not mlp["erratum"]  # our data's, against theirs


def test_other_world_size_and_link(tmp_path: Path) -> None:
    out = tmp_path / "05.json"
    run_script(SCRIPT, "--quick", "--world-size", "3", "--ps-workers", "3", "--alpha-us", "0",
               "--json", str(out))
    assert len(json.loads(out.read_text())["parts"]["Part 1"]["tables"]["real_ranks"]["rows"]) == 3
    parts = json.loads(out.read_text())["parts"]
    sizes = {row[0]: row[1] for row in parts["Part 1"]["tables"]["sizes"]["rows"]}
    assert sizes[10] == "4 3 3"   # 10 on 3 ranks: 4, 3, 3 (not 4, 4, 2)
    headers = parts["Part 5"]["tables"]["final_loss"]["headers"]
    assert headers[3:] == ["async τ=0", "async τ=1", "async τ=2"]   # τ up to K − 1 with 3 workers
    real = json.loads(out.read_text())["parts"]["Part 2"]["tables"]["replicas"]["rows"][-1]
    assert real[0] == "3 real ranks" and real[2] == "yes" and real[-1] == "ok"  # ranks 1–2 = rank 0's bits
    # α = 0: ring time is 2(K−1)/K · N/β, so 10 MB on 8 GPUs gives 20 / (2.5 + 0.7) ms
    ours = _claims(out)["L14-4.4-speedup-10mb"]["ours"]
    assert ours == pytest.approx(20 / (2.5 + 2 * 7 / 8 * 10e6 / 25e9 * 1e3), rel=1e-12)


@pytest.mark.parametrize("flag, value", [("--world-size", "0"), ("--world-size", "1"), ("--beta-gbs", "-3")])
def test_bad_flags_are_one_line_errors(flag: str, value: str) -> None:
    assert_usage_error(SCRIPT, flag, value)


def test_async_sgd_claims_say_where_the_notes_hold(tmp_path: Path, quick_run) -> None:
    """§4.3 at the notes' setting: τ = 0 is sequential SGD, staleness hurts wherever τ = 0 converges,
    large lr diverges; at the unconverged smallest lr staleness helps, and the claim says why."""
    out = tmp_path / "05.json"
    quick_run(SCRIPT, json_to=out)
    found = _claims(out)
    for ref in ("L14-4.3-tau0-sequential", "L14-4.3-async-tau0-faster", "L14-4.3-staleness-worse",
                "L14-4.3-staleness-worse-longer-run", "L14-4.3-diverges-large-lr",
                "L14-4.3-diverges-large-lr-all-async"):
        assert found[ref]["status"] == "agrees", ref
    smallest = found["L14-4.3-staleness-worse-smallest-lr"]  # the notes name no lr: ours only
    assert smallest["status"] == "ours only" and not smallest["erratum"] and smallest["ours"] is False
    # the reasons a reader sees (the words are what is tested)
    assert "no run has converged" in smallest["why"] and "slightly larger step" in smallest["why"]
    grid = found["L14-4.3-async-tau0-faster-every-lr"]
    # (and this row's: the lr from which sync ends lower, in the words a reader sees)
    assert grid["status"] == "ours only" and "From lr 0.2 sync ends lower" in grid["why"]


def test_a_changed_flag_makes_claims_other_setting(tmp_path: Path) -> None:
    out = tmp_path / "05.json"
    run_script(SCRIPT, "--quick", "--seed", "1", "--step-ms", "40", "--json", str(out))
    found = _claims(out)
    assert found["L14-4.3-diverges-large-lr"]["status"] == "other setting"
    # the decision a reader sees names the flag off the notes' setting
    assert "--seed 1 (notes' setting: 0)" in found["L14-4.3-diverges-large-lr"]["decision"]
    assert found["L14-4.4-speedup-10mb"]["status"] == "other setting"
    assert "--step-ms 40" in found["L14-4.4-speedup-10mb"]["decision"]
    # rows no flag can change are still compared
    assert found["L14-4.3-tau0-sequential"]["status"] == "agrees"
    assert found["L14-4.4-hw5-budget"]["status"] == "agrees"


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

    return load_script(SCRIPT).average_checks(rank, torch.device("cpu"))


# The all-reduce that fails: the AVG one (or, without AVG, average_gradients'), then the next.
@pytest.mark.parametrize("nth", [1, 2])
def test_an_error_in_the_average_checks_is_that_ranks(nth: int) -> None:
    """average_checks (now in 05_data_parallel.py, then in hw5_checks.py) once caught any RuntimeError
    or ValueError of its AVG all-reduce as "gloo has no AVG": a rank that really failed there was
    reported as a lesson, and the others waited."""
    assert_named_at_once(3, 1, "all_reduce", nth, RuntimeError, _average_checks_worker)


def test_average_gradients_claims_from_real_ranks(tmp_path: Path, quick_run) -> None:
    """§4.1: 'gloo has no AVG' decided by this torch's gloo (tried here in a run of our own);
    SUM then ÷ W and the grad-None skip agree; staleness K − 1 and 8× the updates at 8 workers."""
    from common.launch import launch
    out = tmp_path / "05.json"
    quick_run(SCRIPT, json_to=out)
    claims = _claims(out)
    rejects = launch(_gloo_avg_worker, 2, timeout_s=20)[0]
    assert claims["L14-4.1-gloo-no-avg"]["ours"] is rejects
    assert claims["L14-4.1-gloo-no-avg"]["status"] == ("agrees" if rejects else "differs")
    for ref in ("L14-4.1-sum-then-divide", "L14-4.1-skip-none-grads", "L14-4.1-proportional-drops",
                "L14-4.2-weighted-fix", "L14-4.3-8x-updates"):
        assert claims[ref]["status"] == "agrees", ref
    assert (claims["L14-4.1-gloo-no-avg"]["kind"] == claims["L14-4.1-sum-then-divide"]["kind"]
            == "observed on real ranks")
    staleness = claims["L14-4.3-staleness-k-minus-1"]
    assert staleness["ours"] == 7 and staleness["notes"] == 7


# Average without dividing by W (the bug HW5's average_gradients guards against), installed before
# the script runs: forked ranks inherit it.
_BROKEN_AVERAGE = """
import runpy, sys
sys.path.insert(0, {code!r})
from lecture14 import data_parallel as dp

def average_without_divide(model):
    for param in model.parameters():
        if param.grad is not None:
            dp.dist.all_reduce(param.grad)

dp.average_gradients = average_without_divide
sys.argv = [{script!r}, *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_real_ranks_that_differ_from_one_process_fail_the_run(tmp_path: Path) -> None:
    """A data-parallel run whose ranks sum gradients but never divide by W trains differently from
    one process: the run prints its results, then exits 1 with one line naming the comparison and
    the gap (the claims of such a run once all read 'agrees')."""
    broken = tmp_path / "broken_average.py"
    broken.write_text(_BROKEN_AVERAGE.format(code=str(ROOT / "code"), script=str(ROOT / "code" / SCRIPT)),
                      encoding="utf-8")
    proc = python(broken, "--quick", "--world-size", "2", timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
    match = re.fullmatch(r"05_data_parallel\.py: error: HW5 on 2 ranks \(shards simulated\) against one "
                         r"process: trained weights (\S+) = (\S+) × the \S+ they moved > 1e-06 "
                         r"\(and \d+ more\)", lines[0])
    assert match and float(match[1]) > 1e-6 and float(match[2]) > 1e-3, lines[0]
    # a failed run writes no --json: what it printed is what is tested, the mark in Part 2's table
    assert re.search(r"^  2 real ranks .* FAILED$", proc.stdout, re.M)
    assert "== Part 6:" in proc.stdout  # the whole output first, then the failure
