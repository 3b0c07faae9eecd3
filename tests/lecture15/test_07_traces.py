"""lecture15/07_traces.py: a real DDP step (torch.profiler) and ddp_sim's, as Chrome-trace JSON."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_script

from common import checker

SCRIPT = "lecture15/07_traces.py"
CODE = Path(__file__).resolve().parents[2] / "code"
BACKWARD = "autograd::engine::evaluate_function: "


def complete_events(trace: dict) -> list[dict]:
    """The trace's "X" events, each checked for what a viewer needs (not the script's own check)."""
    assert isinstance(trace["traceEvents"], list)
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    for e in spans:
        assert all(isinstance(e[k], (int, float)) for k in ("ts", "dur")), e
        assert all(isinstance(e[k], (int, float, str)) for k in ("pid", "tid")), e   # torch's window: names
        assert e["dur"] >= 0 and isinstance(e["name"], str)
    return spans


def compute_during_allreduce(real: list[dict]) -> float:
    """µs of backward compute (the *Backward nodes on the backward's thread, not AccumulateGrad, which
    runs DDP's hook) during which some gloo:all_reduce ran: computed here, apart from the script."""
    nodes = [e for e in real if e["name"].startswith(BACKWARD)]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in nodes
               if e["tid"] == nodes[0]["tid"] and not e["name"].endswith("AccumulateGrad")]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in real if e["name"] == "gloo:all_reduce"]
    steps = sorted({t for span in compute + comm for t in span})
    return sum(b - a for a, b in zip(steps, steps[1:])
               if any(s <= a and b <= e for s, e in compute) and any(s <= a and b <= e for s, e in comm))


def test_both_traces_are_valid_and_the_real_one_overlaps(tmp_path: Path) -> None:
    traces, figs, out = tmp_path / "traces", tmp_path / "figs", tmp_path / "07.json"
    proc = run_script(SCRIPT, "--quick", "--trace", str(traces), "--save-figs", str(figs), "--json", str(out),
                      timeout=240)
    data = json.loads(out.read_text())
    claims = {c["ref"]: c for c in data["claims"]}
    assert sorted(claims) == sorted(r.id for r in checker.rows_for(SCRIPT)) and len(claims) == 4
    assert all(c["status"] == "agrees" for c in claims.values()), claims
    names = sorted(p.name for p in traces.iterdir())
    assert names == ["lecture15_07_ddp_sim.json"] + [f"lecture15_07_real_rank{r}.json" for r in range(4)]
    overlapped = []
    for rank in range(4):
        real = complete_events(json.loads((traces / f"lecture15_07_real_rank{rank}.json").read_text()))
        overlapped.append(compute_during_allreduce(real))
        assert sum(e["name"] == "gloo:all_reduce" for e in real) == sum(e["name"] == "c10d::allreduce_"
                                                                        for e in real), rank
    # some rank's gloo thread ran an all-reduce while its backward computed (load may delay others')
    part2 = data["parts"]["Part 2"]["values"]
    assert max(overlapped) > 0 and part2["real_overlap"] is True, overlapped
    assert 1 <= part2["real_overlap_ranks"] <= part2["real_ranks"] == 4
    sim = json.loads((traces / "lecture15_07_ddp_sim.json").read_text())
    spans = complete_events(sim)
    tracks = {e["tid"]: e["args"]["name"] for e in sim["traceEvents"] if e.get("name") == "thread_name"}
    assert len(tracks) == 2 and {e["tid"] for e in spans} == set(tracks)
    values = {k: v for part in data["parts"].values() for k, v in part.get("values", {}).items()}
    assert sum(e["cat"] == "comm" for e in spans) == values["sim_buckets"] == values["real_allreduces"] > 1
    assert (figs / "lecture15_07_timelines.png").stat().st_size > 10_000
    assert all(len(line) <= 100 for line in proc.stdout.splitlines() if "figure written: " not in line)


def test_trace_into_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    proc = run_script(SCRIPT, "--trace", str(tmp_path / "file"), expect_rc=2, timeout=60)
    assert len(proc.stderr.strip().splitlines()) == 1 and "--trace" in proc.stderr   # names the flag


SMALL = ["--world-size", "2", "--layers", "3", "--width", "128", "--batch", "16", "--repeats", "1"]


def test_one_bucket_is_no_overlap_and_its_row_flips(tmp_path: Path) -> None:
    """--bucket-cap-mb 100: one all-reduce, launched by the backward's last AccumulateGrad after every
    compute node: "no overlap" on every rank (the old check, launch before the backward's end, said yes)."""
    traces, out = tmp_path / "traces", tmp_path / "07.json"
    proc = run_script(SCRIPT, *SMALL, "--bucket-cap-mb", "100", "--trace", str(traces), "--json", str(out),
                      timeout=240)
    # the self-check's own line: it ran, under its name
    assert "check: overlap found vs 1 all-reduce (none expected): no difference: ok" in proc.stdout
    data = json.loads(out.read_text())
    part2 = data["parts"]["Part 2"]["values"]
    assert part2["real_overlap"] is False and (part2["real_overlap_ranks"], part2["real_ranks"]) == (0, 2)
    assert part2["real_allreduces"] == 1
    claim = next(c for c in data["claims"] if c["ref"] == "EN-L15-trace-real-overlap")
    assert claim["ours"] is False and claim["status"] == "other setting", claim
    for rank in range(2):
        real = complete_events(json.loads((traces / f"lecture15_07_real_rank{rank}.json").read_text()))
        assert sum(e["name"] == "gloo:all_reduce" for e in real) == 1
        assert compute_during_allreduce(real) == 0, rank
        backward_end = max(e["ts"] + e["dur"] for e in real if e["name"].startswith(BACKWARD))
        launch = min(e["ts"] for e in real if e["name"] == "c10d::allreduce_")
        assert launch < backward_end   # what the old check tested: true here too, so it could not fail


def test_quick_is_not_offered_as_a_shorter_run() -> None:
    """--quick, which reproduce.py passes to every script, says it runs the same (nothing long to cut).
    (suite.py counts it shortened all the same: model_vs_real, which it imports, reads --quick in
    its own main.)"""
    import re

    from reproduction.suite import SHORTENS

    assert not re.search(SHORTENS, (CODE / SCRIPT).read_text(encoding="utf-8"))
    # --help says it in these words
    assert "the run is the same" in " ".join(run_script(SCRIPT, "--help", timeout=60).stdout.split())
