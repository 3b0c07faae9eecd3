"""code/cs336/08_pipeline_schedules.py: torch.distributed.pipelining's schedules on real ranks, run
as a student would (--quick --json: every row of engines.toml agrees), and made to disagree: a
stage that computes something else must end the run in exit 1 with one line naming the schedule
and its gap from one process; PyTorch's GPipe run where the script expects 1F1B must end it naming
the ranks off 1F1B's own rule. The order PyTorch's rule gives is written apart from the simulator
(so that the rows judge the simulator, the check PyTorch): both agree with what ran at the notes'
setting and on 2 and 3 ranks. tests/suite/test_mutations_cs336_pp_dp.py makes every row and check fail."""

from __future__ import annotations

from pathlib import Path

from conftest import assert_usage_error, load_script, run_patched, run_script

from common import checker
from cs336.engine_probes import as_megatron, pytorch_order

SCRIPT = "cs336/08_pipeline_schedules.py"
CODE = Path(__file__).resolve().parents[2] / "code"
SMALL = ["--pp", "2", "--micro-batches", "2", "--layers", "4", "--width", "8", "--batch", "4"]


def test_quick_run_every_row_agrees(quick_run) -> None:
    proc = quick_run(SCRIPT)      # the session's reproduction ran it
    data = proc.data
    rows = checker.rows_for(SCRIPT)
    claims = {c["ref"]: c for c in data["claims"]}
    assert rows and {r.id for r in rows} == set(claims)           # every row decided, none unrecorded
    assert all(c["status"] == "agrees" for c in claims.values()), [c for c in claims.values()
                                                                   if c["status"] != "agrees"]
    for part in range(1, 5):
        assert f"== Part {part}:" in proc.stdout   # the headers a reader matches with the notes' parts
    # marks: 4 runs × (one process in Part 1, order in Part 2), the run held to exit 0 by quick_run
    assert [row[-1] for row in data["parts"]["Part 1"]["tables"]["vs_one_process"]["rows"]] == ["ok"] * 4
    assert " ".join(proc.stdout.split()).count("every rank PyTorch's own rule (ok)") == 4
    values = data["parts"]["Part 1"]["values"]
    assert all(0 <= values[f"{key}_max_diff"] < 1e-12 for key in ("GPipe", "1F1B", "interleaved"))
    part2 = data["parts"]["Part 2"]["values"]
    # PyTorch's interleaved 1F1B at M = S parts ways with Megatron's order on some ranks, not all
    assert 0 < part2["interleaved_ms_ranks_as_simulated"] < part2["stages"] == 4
    # the charts' reading printed once, each chart's scale beside it
    assert proc.stdout.count("digit m = forward of micro-batch m") == 1
    assert proc.stdout.count("one column = ") == 4
    assert "bytes sent" in data["parts"]["Part 4"]["tables"]["sends"]["headers"]
    held = data["parts"]["Part 3"]["values"]
    assert held["GPipe_held"] == "8 8 8 8" and held["1F1B_held"] == "4 3 2 1"   # M; S - s


# Stage 1's layers scaled by 1.001 on PyTorch's side only: every schedule drifts from one process.
WRONG_STAGE = """
forward = module.StageBlock.forward
module.StageBlock.forward = lambda self, x: forward(self, x) * 1.001
"""
# PyTorch's GPipe where the script asks for 1F1B: still = one process, but not 1F1B's order.
GPIPE_AS_1F1B = "module.Schedule1F1B = module.ScheduleGPipe"


def _broken(tmp_path: Path, patch: str) -> list[str]:
    return [run_patched(tmp_path, SCRIPT, patch, SMALL)]


def test_a_stage_that_differs_ends_the_run_naming_its_gap(tmp_path: Path) -> None:
    line = _broken(tmp_path, WRONG_STAGE)[0]
    assert line.startswith("08_pipeline_schedules.py: error: GPipe, M = 2 against one process: "
                           "step 1 largest |difference| / its size "), line


def test_another_schedule_than_asked_ends_the_run_naming_its_order(tmp_path: Path) -> None:
    line = _broken(tmp_path, GPIPE_AS_1F1B)[0]
    assert line.startswith("08_pipeline_schedules.py: error: 1F1B, M = 2: ranks off PyTorch's own rule: "
                           "1 of "), line


def test_bad_input_is_one_line() -> None:
    assert_usage_error(SCRIPT, "--pp", "3", "--micro-batches", "4")


def test_pytorchs_rule_meets_the_simulator_where_megatron_and_pytorch_agree() -> None:
    """The script's two orders, written apart: PyTorch's rule (engine_probes.pytorch_order) is the
    simulator's on every rank of GPipe and 1F1B, and of interleaved 1F1B wherever as_megatron says
    they agree; at M = S it differs exactly on the ranks as_megatron names."""
    script = load_script(SCRIPT)
    for s in range(2, 7):
        for m in (s, 2 * s, 3 * s):
            for kind in ("GPipe", "1F1B", "interleaved"):
                sim = script.simulated(kind, s, m).orders
                rule = [pytorch_order(kind, s, m, r, script.VIRTUAL) for r in range(s)]
                agree = [kind != "interleaved" or as_megatron(s, m, r, script.VIRTUAL) for r in range(s)]
                assert [a == b for a, b in zip(rule, sim)] == agree, (kind, s, m)
                assert all(sorted(o) == sorted(x) for o, x in zip(rule, sim))   # the same passes


def test_three_ranks_run_pytorchs_rule() -> None:
    """At 3 ranks (M = 6, and M = S = 3) every rank runs what pytorch_order says: the run passes."""
    run_script(SCRIPT, "--pp", "3", "--micro-batches", "6", "--layers", "6", "--width", "16", "--batch", "12")
