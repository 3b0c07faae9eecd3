"""Every model-only script that takes --world-size, at the edges: K = 1, 2, 3 and 1024. Each must
finish, print no inf / nan, no failed check ("NO"), no runaway numbers, and nothing listed per
device at K = 1024 (a bounded output: what grows with K is summarised). Its time at K = 1024
(the model-only budget, 1.5 s on a 2-core machine) is bench/bench_scripts.py's: a CPU-time limit
here failed on a machine busy with other work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import assert_usage_error, flat, run_script

from reproduction.suite import scripts

MAX_LINES = 300  # at K = 1024; the most any of them prints at K = 8 is 291
# Model-only scripts that mention --world-size (each says how to run it with one in its docstring).
WITH_WORLD_SIZE = sorted(s.name for s in scripts()
                         if not s.real and "--world-size" in s.path.read_text(encoding="utf-8"))
NEEDS_TWO = {"lecture14/03_ring_allreduce.py",  # a broadcast from one device to others: K >= 2 by design
             "cs336/03_costs.py"}  # communication costs: with one GPU nothing is communicated


def sane(out: str) -> list[str]:
    """Lines that look wrong: inf or nan, a failed check, or a number of 16+ digits (the timeline
    strips, '|...|', are bucket indices, not numbers)."""
    bad = []
    for line in out.splitlines():
        digits = line.replace(",", "")
        if (re.search(r"(?<![\w.])-?(inf|nan)(?![\w])", line, re.I) or re.search(r"\bNO\b", line)
                or ("|" not in line and re.search(r"\d{16,}", digits))):
            bad.append(line)
    return bad


def test_the_list_is_what_the_suite_has() -> None:
    assert {"lecture14/01_scale.py", "lecture14/03_ring_allreduce.py", "lecture15/03_overlap.py",
            "lecture15/05_scaling.py"} <= set(WITH_WORLD_SIZE)


@pytest.mark.parametrize("script", WITH_WORLD_SIZE)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_small_world_sizes(script: str, k: int) -> None:
    if script in NEEDS_TWO and k == 1:
        assert_usage_error(script, "--world-size", "1")
        return
    out = run_script(script, "--world-size", str(k), "--quick").stdout
    assert not sane(out), sane(out)


@pytest.mark.parametrize("script", WITH_WORLD_SIZE)
def test_world_size_1024_is_summarised(script: str, tmp_path: Path) -> None:
    counted = script == "lecture14/03_ring_allreduce.py"
    json_to = ["--json", str(tmp_path / "o.json")] if counted else []
    out = run_script(script, "--world-size", "1024", *json_to).stdout
    assert not sane(out), sane(out)
    assert "1024" in out.replace(",", "")
    lines = out.splitlines()
    assert len(lines) <= MAX_LINES, (f"{script} at K = 1024 prints {len(lines)} lines: "
                                     "something is listed per device")
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    if counted:
        counted_view_at_1024(out, json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"])


def counted_view_at_1024(out: str, parts: dict) -> None:
    part1 = parts["Part 1"]
    assert part1["title"] == "ring all-reduce on 1024 workers, counted" and part1["values"]["ring_k"] == 1024
    assert "shown for K <= 8 only" in flat(out)   # the reader is told why no symbols (the note is tested)
    assert part1["rounds"] == 2046 and part1["each_term_once"] is True
    counts = {row[0]: row[1:] for row in part1["tables"]["ring_counts"]["rows"]}
    assert counts["rounds"] == [2046, 2046, "2(K - 1)"]
    # chunks of N/K = 8 B, 2(K - 1) = 2046 of them sent by each worker
    assert counts["largest message (B)"][:2] == [8, 8]
    assert counts["bytes each worker sends (fewest, most)"][:2] == ["16,368, 16,368", "16,368"]
    part3 = parts["Part 3"]
    assert part3["demo_ticks"] == {"segments": 4, "ticks": 1026, "every_device_holds": True}   # K - 2 + S
    assert part3["values"]["tick_simulation_ok"] is True
