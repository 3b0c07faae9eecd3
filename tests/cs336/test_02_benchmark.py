"""CS336 lecture 8, script 02 (the collective benchmark): the real ranks' correctness column, runs on
one, three and four ranks and under torchrun, and bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, run_script

from cs336 import busbw as bw

SCRIPT = "cs336/02_benchmark.py"


# ---- the script: real ranks, --json, bad flags ---------------------------------------------------

def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_quick_run_on_four_ranks(tmp_path: Path, quick_run) -> None:
    proc = quick_run(SCRIPT, json_to=tmp_path / "q.json")
    data = load(tmp_path / "q.json")
    part1 = data["parts"]["Part 1"]
    for collective in bw.COLLECTIVES:
        table = part1["tables"][collective]
        assert len(table["rows"]) == 7  # 1 KiB … 4 MiB by 4
        assert all(row[table["headers"].index("ok")] == "yes" for row in table["rows"]), collective
        for row in part1[collective]:
            assert row["ok"] is True
            assert row["busbw"] == pytest.approx(row["S"] / row["t"] * bw.bus_factor(collective, 4))
            assert row["p10"] <= row["t"] <= row["p90"]
    assert [r["S"] for r in part1["reduce-scatter"]] == [1024 * 4**k for k in range(7)]
    # what a reader is told busbw is (the words are what is tested): the ring model's rate, and gloo's
    # reduce-scatter is no ring
    text = " ".join(proc.stdout.split())
    assert text.count("the ring model's share") == 4
    # the sentence a student reads on what gloo ran instead (the words are what is tested)
    assert "gloo runs it here as an all-reduce of the whole input" in text
    claims = {c["ref"]: c for c in data["claims"]}
    assert claims["CS-bench-correct"]["status"] == "agrees"
    assert "CS-ab-example-latency" not in claims  # the notes' worked example is 03_costs.py's, counted once
    # the lecture code's reduce-scatter figure, from one rank's output bytes: busbw / n, a row of its own
    lecture = claims["CS-bench-lecture-rs-size"]
    assert (
        lecture["ours"] == pytest.approx(0.25)
        and lecture["status"] == "ours only"
        and "1024³" in lecture["why"]
    )
    assert claims["CS-bench-small-startup"]["rule"] == "above 0.5"
    assert part1["copy_Bps"] > 1e8 and part1["link_Bps"] > 0
    assert (proc.figures / "cs336_02_busbw.png").stat().st_size > 10_000
    # the column header a student reads says whose GB/s the column is
    assert "lecture code's GB/s" in part1["tables"]["reduce-scatter"]["headers"]


def test_one_and_three_ranks_with_uneven_sizes(tmp_path: Path) -> None:
    run_script(SCRIPT, "--world-size", "3", "--min-bytes", "1000", "--max-bytes", "64KB", "--step-factor",
               "8", "--repeats", "2", "--json", str(tmp_path / "three.json"))
    part1 = load(tmp_path / "three.json")["parts"]["Part 1"]
    assert [r["S"] for r in part1["all-gather"]] == [996, 7992, 63996]  # multiples of 3 × 4 B, rounded down
    assert [r["S"] for r in part1["all-reduce"]] == [1000, 8000, 64000]
    assert all(r["ok"] for c in bw.COLLECTIVES for r in part1[c])
    out = run_script(SCRIPT, "--world-size", "1", "--max-bytes", "16KiB", "--repeats", "2",
                     "--json", str(tmp_path / "one.json")).stdout
    part1 = load(tmp_path / "one.json")["parts"]["Part 1"]
    assert all(r["busbw"] == 0 and r["ok"] for c in bw.COLLECTIVES for r in part1[c])
    assert "bus bandwidth is undefined" in out   # what one rank is told (the sentence is what is tested)


def test_bad_flags() -> None:
    """Each is one stderr line and exit 2 before any rank starts (the rest of the sweep's checks are
    size_sweep's, tested above without a process)."""
    assert_usage_error(SCRIPT, "--min-bytes", "4MiB", "--max-bytes", "1KiB")
    assert_usage_error(SCRIPT, "--step-factor", "1")
    assert_usage_error(SCRIPT, "--min-bytes", "0")


def test_under_torchrun(tmp_path: Path) -> None:
    """torchrun owns the processes: its 2 ranks replace --world-size, rank 0 alone prints."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(ROOT / "code" / SCRIPT), "--max-bytes", "4KiB", "--repeats", "2", "--json",
           str(tmp_path / "t.json")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("02_benchmark.py:") == 1   # one title printed: rank 0 alone prints
    part1 = load(tmp_path / "t.json")["parts"]["Part 1"]
    assert part1["title"].endswith("on 2 gloo ranks (cpu)")
    assert all(r["ok"] and r["busbw"] == pytest.approx(r["algbw"] * bw.bus_factor(c, 2))
               for c in bw.COLLECTIVES for r in part1[c])
