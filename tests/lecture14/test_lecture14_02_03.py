"""Smoke tests of lecture 14 scripts 02 (real gloo ranks) and 03 (model only): they run, their
checks print 'yes', their claims agree at the notes' defaults, other knobs work, bad flags exit 2."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from conftest import assert_usage_error, flat, load_script, run_script
from rank_faults import assert_named_at_once, signal_a_rank_during

from lecture14.symbolic import symbolic_inputs

S02, S03 = "lecture14/02_primitives.py", "lecture14/03_ring_allreduce.py"


def claims(path: Path) -> dict[str, dict]:
    """The run's decided rows of the notes' table, by id."""
    return {c["ref"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


def test_02_default_world_size(tmp_path: Path, quick_run) -> None:
    out = quick_run(S02, json_to=tmp_path / "o.json").stdout
    for name in ("broadcast", "reduce", "all-reduce", "reduce-scatter", "all-gather"):
        assert f"\n  {name}: " in out  # each call's buffers, before and after
    assert "check: the five collectives on 4 real ranks vs collectives.py: no difference: ok" in out
    assert "100 104 108 112" in out  # 10..13 + 20..23 + 30..33 + 40..43
    assert re.search(r"^  1\s+20 21 22 23\s+4 × 4 B\s+104\s+1 × 4 B", out, re.M)  # rank 1's chunk of the sum
    assert "NO" not in out
    found = claims(tmp_path / "o.json")
    assert len(found) >= 6 and all(c["status"] == "agrees" for c in found.values()), found
    # Seen on real ranks, no formula.
    assert all(c["kind"] == "observed on real ranks" for c in found.values())
    assert found["L14-2.2-output-sizes"]["ours"] == 0.25
    # Part 4: the skipper.
    assert "rank 1 finished its work (so did rank 2, rank 3) while rank 0 waited" in flat(out)
    hang = found["L14-2.2-skipped-collective-hangs"]
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


def test_02_three_ranks_uneven_chunks() -> None:
    out = run_script(S02, "--world-size", "3", "--numbers", "7").stdout
    # 7 numbers on 3 ranks: chunks of 3, 2, 2 (np.array_split); sums 60 + 3j.
    assert re.search(r"^  0 .*60 63 66\s+3 × 4 B", out, re.M)
    assert re.search(r"^  2 .*75 78\s+2 × 4 B", out, re.M)
    assert "bytes each rank handed to isend (counted): 40 36 36, collectives.py's ring: 40 36 36" in flat(out)
    assert "NO" not in out and "FAILED" not in out
    # the identities hold at any K: their rows are still decided (seen as the notes say), not set aside
    assert re.search(r"^  all-reduce = reduce \+ broadcast +True +True +seen as the notes say$", out, re.M)


def test_02_bad_flags() -> None:
    assert_usage_error(S02, "--world-size", "1")
    assert_usage_error(S02, "--numbers", "0")


def test_03_quick_reproduces_the_notes(tmp_path: Path, quick_run) -> None:
    out = quick_run(S03, json_to=tmp_path / "o.json").stdout
    assert "a0           a1+b1+c1+d1  a2+c2+d2     a3+d3" in out
    assert "tick simulation equals the closed form (ticks exactly, time to rounding): yes" in out
    assert "10 ticks = K - 2 + S = 10" in out  # K = 8, S = 4
    assert "recomputed at their setting" not in out  # the defaults are the notes' setting
    found = claims(tmp_path / "o.json")
    assert all(c["status"] == "agrees" for c in found.values()), found
    # Simulation = closed forms where K divides N.
    assert found["L14-3.3-traffic-closed-forms"]["ours"] is True
    assert found["L14-3.1-best-s"]["ours"] == 64
    assert found["L14-3.1-best-s-time"]["ours"] == pytest.approx(3.15, abs=1e-9)
    assert found["L14-3.1-unsplit"]["ours"] == pytest.approx(17.955, abs=1e-9)
    assert 5e-6 < found["L14-3.3-fp-order-1e-5"]["ours"] < 2e-5
    # "a few float32 spacings": the max difference over the spacing at the largest sum, from the table
    fp_rows = dict(json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["parts"]["Part 2"]["tables"]
                   ["fp_order"]["rows"])
    spacing = fp_rows["float32 spacing at the largest |sum|"]
    assert spacing == 2.0 ** -18  # float32 spacing in [32, 64)
    assert (fp_rows["max |ring - np.sum| / that spacing"]
            == fp_rows["max |ring - np.sum| over all elements"] / spacing)
    assert 1 <= fp_rows["max |ring - np.sum| / that spacing"] <= 10


def test_03_other_world_size_and_size(tmp_path: Path) -> None:
    raw = run_script(S03, "--world-size", "5", "--size", "1MB", "--traffic-size", "64KiB", "--quick",
                     "--json", str(tmp_path / "o.json")).stdout
    out = flat(raw)
    assert "ring all-reduce on 5 workers" in out and "e4" in out
    assert "a0+b0+c0+d0+e0" in out
    assert "8 rounds = 2(K - 1)" in out and "each term once: yes" in out
    assert "K = 5, N = 1 MB" in out and "7 ticks = K - 2 + S = 7" in out
    # α = 5 µs, β = 25 GB/s, K = 5, N = 1 MB: (3 + S)(5 µs + 40 µs/S) is least at S = 4 among powers of two.
    assert "best power of two S = 4: 105 µs" in out
    # The notes' broadcast statements are at K = 8, 64 MB: recomputed there, and said so, so they
    # stay checked whatever the flags; the K = 4 buffers likewise. A row that depends on a flag
    # this run moved is not compared, and says which flag.
    assert "vs the notes: recomputed at their setting, K = 8, N = 64 MB, α = 5 µs, β = 25 GB/s" in out
    found = claims(tmp_path / "o.json")
    assert found["L14-3.1-best-s"]["ours"] == 64 and found["L14-3.1-best-s"]["status"] == "agrees"
    assert found["L14-3.2-reduce-scatter-state"]["status"] == "agrees"
    fp = found["L14-3.3-fp-order-1e-5"]
    assert fp["status"] == "other setting"
    assert "--traffic-size 65536 (notes' setting: 262144)" in fp["decision"]
    assert re.search(r"^  max \|ring - np.sum\|, float32, K = 64 .* other setting$", raw, re.M)


def test_03_uneven_traffic_size_and_many_workers() -> None:
    out = run_script(S03, "--world-size", "12", "--traffic-size", "1001B", "--alpha-us", "0",
                     "--quick").stdout
    assert "only the end of each phase is printed" in out
    assert "N = 250 float32 = 1,000 B per device (--traffic-size rounded down" in out
    assert "no interior optimum" in out
    assert "no: N/K not whole" in out  # rounds and totals still equal the closed forms there
    assert re.search(r"^  simulated rounds and bytes = the closed forms +True +True +matches$", out,
                     re.M)


def test_03_bad_flags() -> None:
    for flag, value in (("--world-size", "0"), ("--world-size", "1"), ("--size", "0"),
                        ("--alpha-us", "-1"), ("--traffic-size", "lots"),
                        ("--traffic-size", "999999999"), ("--traffic-size", "3MiB")):  # 64 devices hold it
        assert_usage_error(S03, flag, value)


def test_03_explicit_world_size_8_is_part_3s_notes_setting(tmp_path: Path) -> None:
    """--world-size 8 is the notes' K for Part 3 (the default None means 8 there): Part 3 runs at
    their setting and says nothing of recomputing; Part 1 runs 8 workers, and the notes' K = 4
    buffers are computed at K = 4 for their rows."""
    out = flat(run_script(S03, "--world-size", "8", "--quick", "--json", str(tmp_path / "o.json")).stdout)
    assert "ring all-reduce on 8 workers" in out and "recomputed at their setting" not in out
    found = claims(tmp_path / "o.json")
    assert all(c["status"] == "agrees" for c in found.values()), found
    assert found["L14-3.1-best-s"]["ours"] == 64 and found["L14-3.1-unsplit"]["ours"] == pytest.approx(17.955)
    assert found["L14-3.2-reduce-scatter-state"]["ours"] == "a0  a1+b1+c1+d1  a2+c2+d2  a3+d3"


def test_03_mpi_indices_and_owner_chunk_claims_for_other_k(tmp_path: Path) -> None:
    """The §3.2 statements hold for any K: claimed at K = 5 too; and the simulator's owner chunk is
    (r + 1) mod K, not another one (an independent recount of the symbolic terms)."""
    from lecture14 import collectives as col
    out = tmp_path / "o.json"
    run_script(S03, "--world-size", "5", "--quick", "--json", str(out))
    found = claims(out)
    assert found["L14-3.2-mpi-chunk-indices"]["status"] == "agrees"
    assert found["L14-3.2-owner-chunk"]["status"] == "agrees"
    res = col.ring_allreduce(symbolic_inputs(5), history=True)
    rs_end = [r for r in res.rounds if r.phase == "reduce-scatter"][-1].state
    for r in range(5):
        full = [j for j in range(5) if len(rs_end[r][j].terms) == 5]
        assert full == [(r + 1) % 5]


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
