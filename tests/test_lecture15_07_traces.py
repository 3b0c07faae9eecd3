"""lecture15/07_traces.py: a real DDP step (torch.profiler) and ddp_sim's, as Chrome-trace JSON."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import python, run_script

from common import checker

SCRIPT = "lecture15/07_traces.py"
CODE = Path(__file__).resolve().parents[1] / "code"
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
    for rank in range(4):
        real = complete_events(json.loads((traces / f"lecture15_07_real_rank{rank}.json").read_text()))
        backward_end = max(e["ts"] + e["dur"] for e in real if e["name"].startswith(BACKWARD))
        first_launch = min(e["ts"] for e in real if e["name"] == "c10d::allreduce_")
        assert first_launch < backward_end, rank   # from the hook: load delays gloo's threads only
        assert sum(e["name"] == "gloo:all_reduce" for e in real) == sum(e["name"] == "c10d::allreduce_"
                                                                        for e in real), rank
    sim = json.loads((traces / "lecture15_07_ddp_sim.json").read_text())
    spans = complete_events(sim)
    tracks = {e["tid"]: e["args"]["name"] for e in sim["traceEvents"] if e.get("name") == "thread_name"}
    assert len(tracks) == 2 and {e["tid"] for e in spans} == set(tracks)
    values = {k: v for part in data["parts"].values() for k, v in part.get("values", {}).items()}
    assert sum(e["cat"] == "comm" for e in spans) == values["sim_buckets"] == values["real_allreduces"] > 1
    assert (figs / "lecture15_07_timelines.png").stat().st_size > 10_000
    assert all(len(line) <= 100 for line in proc.stdout.splitlines() if "figure written: " not in line)


# Our side made to disagree: ddp_sim's rule replaced by one bucket for everything.
ONE_BUCKET = """
import sys
sys.path.insert(0, {code!r})
sys.argv = ["07_traces.py", "--world-size", "2", "--layers", "3", "--width", "128", "--batch", "16",
            "--bucket-cap-mb", "0.05", "--repeats", "1"]
import importlib.util
spec = importlib.util.spec_from_file_location("traces", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules["traces"] = module
spec.loader.exec_module(module)
module.assign_buckets = lambda sizes, cap, first: [list(range(len(sizes)))]
from common.cli import run_main
run_main(module.main)
"""


def test_buckets_that_disagree_end_the_run_naming_the_check(tmp_path: Path) -> None:
    wrapper = tmp_path / "one_bucket.py"
    wrapper.write_text(ONE_BUCKET.format(code=str(CODE), script=str(CODE / SCRIPT)), encoding="utf-8")
    proc = python(wrapper, timeout=240)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0] == ("07_traces.py: error: all-reduces in the profiled step against ddp_sim's buckets: "
                        "max |difference| 2, above the tolerance 0"), lines[0]


def test_trace_into_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    proc = run_script(SCRIPT, "--trace", str(tmp_path / "file"), expect_rc=2, timeout=60)
    assert len(proc.stderr.strip().splitlines()) == 1 and "--trace" in proc.stderr
