"""Smoke tests of lecture 14 script 02 (real gloo ranks): it runs, its checks print 'yes', its claims
agree at the notes' defaults, other knobs work, bad flags exit 2."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from conftest import assert_usage_error, flat, load_script, run_script
from lecture14_shared import claims
from rank_faults import assert_named_at_once, signal_a_rank_during

S02 = "lecture14/02_primitives.py"


def test_02_default_world_size(tmp_path: Path, quick_run) -> None:
    run = quick_run(S02, json_to=tmp_path / "o.json")
    tables = run.data["parts"]["Part 1"]["tables"]   # each call's buffers, before and after
    assert list(tables) == ["broadcast", "reduce", "all-reduce", "reduce-scatter", "all-gather"]
    # the self-check's own line: the comparison with the simulator ran, under its name
    assert "check: the five collectives on 4 real ranks vs collectives.py: no difference: ok" in run.stdout
    # 10..13 + 20..23 + 30..33 + 40..43 on every rank
    assert [row[3] for row in tables["all-reduce"]["rows"]] == ["100 104 108 112"] * 4
    # rank 1's chunk of the sum
    assert tables["reduce-scatter"]["rows"][1] == ["1", "20 21 22 23", "4 × 4 B", "104", "1 × 4 B"]
    _assert_identities_hold(run.data)
    found = claims(tmp_path / "o.json")
    assert len(found) >= 6 and all(c["status"] == "agrees" for c in found.values()), found
    # Seen on real ranks, no formula.
    assert all(c["kind"] == "observed on real ranks" for c in found.values())
    assert found["L14-2.2-output-sizes"]["ours"] == 0.25
    # Part 4: the skipper.
    # the launcher's report of the skip is the lesson's finding (the message is what is tested)
    assert "rank 1 finished its work (so did rank 2, rank 3) while rank 0 waited" in flat(run.stdout)
    hang = found["L14-2.2-skipped-collective-hangs"]
    # the reason a reader sees says the launch failed (the words are what is tested)
    assert hang["ours"] is True and "the launch failed after" in hang["why"]


@pytest.mark.parametrize("call", ["reduce_scatter", "all_gather", "broadcast"])
@pytest.mark.parametrize("error", [ValueError, RuntimeError])
def test_02_an_error_in_a_rank_is_that_ranks(call: str, error: type) -> None:
    """rank_ops.reduce_scatter_real once caught a RuntimeError and fell back to an all-reduce, so
    a failing rank called a collective the others did not, and they waited for it."""
    assert_named_at_once(4, 2, call, 1, error, load_script(S02).primitives_worker, 4)


@pytest.mark.parametrize("rank, sig, says", [
    (2, signal.SIGKILL, "rank 2 was killed by SIGKILL"),     # a rank that skips, killed
    (0, signal.SIGKILL, "rank 0 was killed by SIGKILL"),     # the rank that waits, killed
    (2, signal.SIGSTOP, "rank 2 stopped responding"),        # a rank that skips, stopped
])
def test_02_a_rank_killed_or_stopped_in_part_4_is_a_failure(rank: int, sig: int, says: str) -> None:
    """Part 4 stages a skipped collective; another fault during it is not the lesson's result (it
    once printed the fault as the finding and its claim as agreeing, and exited 0)."""
    proc = signal_a_rank_during(S02, 4, rank, sig, "--quick", "--timeout-s", "8",
                                after_s=2.5 if sig == signal.SIGSTOP else 0.0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("02_primitives.py: error: Part 4 staged a skipped collective")
    assert says in lines[0]
    part4 = proc.stdout.split("== Part 4:")[1]
    assert "seen as" not in part4 and "matches" not in part4  # no row of Part 4 decided from that run


def test_02_three_ranks_uneven_chunks(tmp_path: Path) -> None:
    run_script(S02, "--world-size", "3", "--numbers", "7", "--json", str(tmp_path / "o.json"))
    data = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))
    # 7 numbers on 3 ranks: chunks of 3, 2, 2 (np.array_split); sums 60 + 3j.
    rows = data["parts"]["Part 1"]["tables"]["reduce-scatter"]["rows"]
    assert [row[3:] for row in rows] == [["60 63 66", "3 × 4 B"], ["69 72", "2 × 4 B"], ["75 78", "2 × 4 B"]]
    # bytes each rank handed to isend, counted on the ranks, and the simulator's ring: rank 0 sends
    # chunks 0 and 2, then 1 and 0, (3 + 2 + 2 + 3) × 4 B
    part3 = data["parts"]["Part 3"]
    assert part3["ring_bytes_counted"] == part3["ring_bytes_simulated"] == [40, 36, 36]
    _assert_identities_hold(data)
    # the identities hold at any K: their rows are still decided (seen as the notes say), not set aside
    found = {c["ref"]: c for c in data["claims"]}
    for ref in ("L14-2.2-allreduce-identities", "L14-2.2-allreduce-identities-rs-ag"):
        assert (found[ref]["ours"], found[ref]["status"]) == (True, "agrees"), found[ref]


def _assert_identities_hold(data: dict) -> None:
    """Part 2's table: each identity equal on the ranks, in the simulator where it has one, and the
    ranks' result the simulator's."""
    rows = data["parts"]["Part 2"]["tables"]["identities"]["rows"]
    assert [row[1:4] for row in rows] == [["yes", "yes", "ok"], ["yes", "yes", "ok"], ["yes", "-", "ok"]]


def test_02_bad_flags() -> None:
    assert_usage_error(S02, "--world-size", "1")
    assert_usage_error(S02, "--numbers", "0")


def test_the_staged_report_is_read_back_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """common.launch.staged_failure accepts only the skip it staged: the right ranks blamed and waiting, after
    the timeout; any other report is the run's failure (exit 1), with the report in its line."""
    from common.error_types import RunFailure
    from common.launch import RankError
    from common.launch import staged_failure as staged

    # The report is read by its fields: a message in the skip's words is no skip.
    skip = RankError(1, "finished its work (so did rank 2, rank 3) while rank 0 waited 1 s …", kind="skipped",
                     peers=(0,), also=(2, 3))
    words_only = RankError(1, "finished its work (so did rank 2, rank 3) while rank 0 waited 1 s …")
    for seconds, report, ok in [(1.2, skip, True), (0.3, skip, False), (1.2, words_only, False),
                                (1.2, RankError(2, "was killed by SIGKILL", kind="killed"), False),
                                (1.2, RankError(3, "finished …", kind="skipped", peers=(0, 1)), False)]:
        monkeypatch.setattr(staged, "launch_expecting_failure", lambda *a, **k: (seconds, report))  # noqa: B023
        run = lambda: staged.skipped_collective(None, 4, skippers=[1, 2, 3], waiters=[0], timeout_s=1.0,  # noqa: E731
                                                staged="Part 4 staged a skip")
        if ok:
            assert run() == (seconds, report)
        else:
            with pytest.raises(RunFailure, match=f"Part 4 staged a skip, but .*{re.escape(str(report))}"):
                run()
