"""lecture14/06_debug_collectives.py: a mismatched collective, plain gloo against DEBUG=DETAIL."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import python, run_script

from common import checker

SCRIPT = "lecture14/06_debug_collectives.py"
CODE = Path(__file__).resolve().parents[2] / "code"


def test_detail_names_the_mismatch_at_once_where_plain_gloo_waits(tmp_path: Path) -> None:
    out = tmp_path / "06.json"
    proc = run_script(SCRIPT, "--world-size", "3", "--json", str(out), timeout=180)
    data = json.loads(out.read_text())
    claims = {c["ref"]: c for c in data["claims"]}
    assert sorted(claims) == sorted(r.id for r in checker.rows_for(SCRIPT)) and len(claims) == 6
    assert all(c["status"] == "agrees" for c in claims.values()), claims
    values = {k: v for part in data["parts"].values() for k, v in part.get("values", {}).items()}
    assert values["plain_seconds"] >= values["timeout_s"] > values["detail_seconds"]
    assert "ALLREDUCE" in values["detail_error"] and "ALLGATHER" in values["detail_error"]
    assert any(s in values["plain_line"] for s in ("Timed out", "Connection closed", "pair closure"))
    assert "ALL" not in values["plain_line"]
    assert proc.stderr == "" and all(len(line) <= 100 for line in proc.stdout.splitlines())
    # DETAIL's cost, counted: 2 all-gathers + a monitored barrier a collective (rank 0's barrier
    # exchanges a message with each of the 2 others), not the one extra collective once guessed
    assert values["detail_extra_ops"] == 3
    assert values["detail_extra_text"] == "2 all-gathers and 1 monitored barrier"
    rows = {row[0]: row for row in data["parts"]["Part 2"]["tables"]["detail_cost"]["rows"]}
    assert rows[0][2] == rows[0][3] == "2 all_gather + 2 recv + 2 send", rows
    assert rows[1][2] == rows[2][2] == "2 all_gather + 1 recv + 1 send", rows
    assert "(call 0)" in values["detail_error"]   # the count ran on groups of its own


# DETAIL switched off: Part 2 then meets the same silent timeout as Part 1, and the run must fail in one
# line (gloo closes the timed-out pairs, so the launcher reports the ranks before our check can).
WITHOUT_DETAIL = """
import sys, contextlib
sys.path.insert(0, {code!r})
sys.argv = ["06_debug_collectives.py", "--world-size", "2", "--timeout-s", "1"]
import importlib.util
spec = importlib.util.spec_from_file_location("debug", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules["debug"] = module
spec.loader.exec_module(module)
module.debug_detail = contextlib.nullcontext
from common.script_end import run_main
run_main(module.main)
"""


def test_without_detail_the_run_fails_naming_the_check(tmp_path: Path) -> None:
    wrapper = tmp_path / "without_detail.py"
    wrapper.write_text(WITHOUT_DETAIL.format(code=str(CODE), script=str(CODE / SCRIPT)), encoding="utf-8")
    proc = python(wrapper, timeout=180)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("06_debug_collectives.py: error: rank "), lines[0]
    assert "timeout" in lines[0] and "ALL" not in lines[0], lines[0]


# No mismatch at all (every rank all-reduces): the staged failure did not happen, and the run says so.
NO_MISMATCH = WITHOUT_DETAIL.replace("module.debug_detail = contextlib.nullcontext",
                                     "module.mismatched_call = lambda rank, world: module.dist.all_reduce("
                                     "module.torch.ones(4))")


def test_a_collective_that_matches_is_no_lesson(tmp_path: Path) -> None:
    wrapper = tmp_path / "no_mismatch.py"
    wrapper.write_text(NO_MISMATCH.format(code=str(CODE), script=str(CODE / SCRIPT)), encoding="utf-8")
    proc = python(wrapper, timeout=180)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    # the one-line stderr contract: the staged failure that did not fail, named
    assert "Part 1 staged a mismatched collective (all_reduce against all_gather), but it completed" \
        in lines[0]


def test_quick_is_not_offered_as_a_shorter_run() -> None:
    """--quick, which reproduce.py passes to every script, says it runs the same (nothing long to cut)."""
    from reproduction.suite import Script

    assert not Script(CODE / SCRIPT).shortened
    # --help says it in these words
    assert "the run is the same" in " ".join(run_script(SCRIPT, "--help", timeout=60).stdout.split())
