"""Problems 118-120 (CS336 lecture 8: a 1F1B pipeline, ZeRO-1 by hand, nccl-tests' arithmetic): the
references pass every case, the stubs fail every case as not written yet, each wrong solution in
tests/practice_wrong/ fails every quick case aimed at it with the hint of the property it breaks
(so it fails with --quick and without), correct spellings pass, and the statements' worked
examples are what the suite's models give.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from test_practice import RIGHT, WRONG, failed, judge, judged, layout

sys.path.insert(0, str(ROOT / "practice"))
from judging import PROBLEMS, p118_pipeline, p119_zero, p120_busbw  # noqa: E402

NEW = ("118", "119", "120")
NUMBERED = {p.number: p for p in PROBLEMS}
# fixture -> words its quick cases' hints must hold (the property it breaks), and where they fail
# (None: every quick case)
FIXTURES = {
    "118_gpipe.py": (p118_pipeline.HINT_HELD, ("2 ranks", "4 ranks, 4 layers, batch 13")),   # M > S: held
    "118_no_warmup.py": (p118_pipeline.HINT_ORDER, None),
    "118_mean_loss.py": (p118_pipeline.HINT_LOSS, None),
    "118_no_zero_grad.py": (p118_pipeline.HINT_STEP, None),
    "118_warmup_unclipped.py": (p118_pipeline.HINT_ORDER, ("4 ranks, 4 layers, batch 6",)),
    "118_returns_everywhere.py": (p118_pipeline.HINT_OUTPUT, None),
    "118_float32_recv.py": (p118_pipeline.HINT_BUFFER, None),
    "118_no_requires_grad.py": (p118_pipeline.HINT_GRAD, None),
    "118_step_per_micro.py": (p118_pipeline.HINT_STEP, None),
    "118_zero_grad_after_step.py": (p118_pipeline.HINT_STEP, None),         # no .grad left after step()
    "118_results_not_detached.py": (p118_pipeline.HINT_OUTPUT, None),
    "118_returns_last_micro.py": (p118_pipeline.HINT_OUTPUT, None),
    "119_full_state.py": (p119_zero.HINT_SHARD, None),
    "119_all_reduce.py": (p119_zero.HINT_RS, None),
    "119_no_all_gather.py": (p119_zero.HINT_AG, None),
    "119_sums_gradients.py": (p119_zero.HINT_MEAN, None),
    "119_no_bias_correction.py": (p119_zero.HINT_WRITE, None),   # m and v right, the update not
    "119_float32_state.py": (p119_zero.HINT_DTYPE, None),
    "119_global_cache.py": (p119_zero.HINT_SHARD, None),
    "119_closure_buffer.py": (p119_zero.HINT_SHARD, None),
    "119_unpadded_offset.py": (p119_zero.HINT_WRITE, ("3 ranks",)),      # rank 1 blamed, not rank 0
    "119_beta1_for_v.py": (p119_zero.HINT_ADAM, None),           # v wrong everywhere: the arithmetic
    "119_state_reset_each_step.py": (p119_zero.HINT_ADAM, None),
    "119_step_count_after.py": (p119_zero.HINT_ADAM, None),      # 1 − β⁰ = 0: ZeroDivisionError
    "120_lecture_size.py": (p120_busbw.HINT_SLIP, ("the lecture's", "every collective")),
    "120_gib.py": (p120_busbw.HINT_GB, None),
    "120_one_factor.py": (p120_busbw.HINT_FACTOR, ("the lecture's", "every collective")),
    "120_rank0_time.py": (p120_busbw.HINT_TIME, ("the lecture's", "every collective", "the time")),
    "120_mean_time.py": (p120_busbw.HINT_TIME, None),
    "120_upper_median.py": (p120_busbw.HINT_TIME, ("the time",)),
    "120_bcast_like_gather.py": (p120_busbw.HINT_FACTOR, ("every collective",)),
}


@pytest.fixture(scope="module", autouse=True)
def _optimizers_imported() -> None:
    """What the judge does before its forks: each rank forked from here then inherits torch.optim's
    imports instead of making them (a second or more each, on a busy machine)."""
    for module in (p118_pipeline, p119_zero):
        module.prepare()


def quick_cases(number: str) -> list[str]:
    return [c.name for c in NUMBERED[number].cases().CASES if c.quick]


def test_references_pass_every_case(tmp_path: Path) -> None:
    out, record = judge(*NEW, "--solution", "practice/reference", expect_rc=0, tmp_path=tmp_path)
    assert record["all_passed"] and [p["number"] for p in record["problems"]] == list(NEW)
    assert "summary: 3 of 3 problems solved" in out and "FAIL" not in out   # the judge's printed summary


def test_stubs_fail_every_case_as_not_written_yet(tmp_path: Path) -> None:
    out, record = judge(*NEW, "--quick", expect_rc=1, tmp_path=tmp_path)
    assert record["cases"] and all(not c["passed"] for c in record["cases"])
    for case in record["cases"]:
        assert case["message"].startswith("not written yet: write "), case
        assert f"{case['problem']}'s solution.py" in case["message"], case


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_each_wrong_solution_fails_its_quick_cases_naming_the_property(fixture: str) -> None:
    number, (hint, aimed) = fixture[:3], FIXTURES[fixture]
    names = [n for n in quick_cases(number) if aimed is None or n.startswith(aimed)]
    assert names, fixture
    for name in names:
        outcome = judged(number, name, WRONG / fixture)
        assert not outcome.get("passed") and outcome.get("hint") == hint, (name, outcome)


def test_119_blames_the_rank_whose_own_shard_is_wrong() -> None:
    """Rank 1 updates the wrong elements; rank 0's gathered parameters are wrong because of it, its
    own shard right: the failure names rank 1 (it named rank 0, the first it looked at)."""
    outcome = judged("119", quick_cases("119")[1], WRONG / "119_unpadded_offset.py")
    assert outcome["expected"].startswith("rank 1: its own shard"), outcome


def test_wrong_solutions_fail_under_quick_through_the_judge(tmp_path: Path) -> None:
    root = layout(tmp_path, {"118": WRONG / "118_gpipe.py", "119": WRONG / "119_all_reduce.py",
                             "120": WRONG / "120_lecture_size.py"})
    out, record = judge(*NEW, "--quick", "--solution", str(root), expect_rc=1, tmp_path=tmp_path)
    held = failed(record, "118")
    assert list(held) == quick_cases("118")
    assert all("held 4 at once" in c["got"] or "held 6 at once" in c["got"]      # with M < S GPipe holds only
               for name, c in held.items() if "M < S" not in name), held            # M: its order fails there
    scatter = failed(record, "119")
    assert all("all-reduce N = " in c["got"] and c["hint"] == p119_zero.HINT_RS for c in scatter.values())
    slip = failed(record, "120")
    assert next(iter(slip.values()))["got"] == "size_bytes = 268,435,456: one rank's output chunk, S/n"
    assert "inputs:   {'collective': 'reduce-scatter', 'world_size': 4" in out   # printed for the student


def test_blocking_sends_deadlock_and_get_the_send_hint(tmp_path: Path) -> None:
    _, record = judge("118", "--quick", "--case-limit-s", "2", "--solution",
                      str(WRONG / "118_blocking_send.py"), expect_rc=1, tmp_path=tmp_path)
    cases = failed(record, "118")
    assert list(cases) == quick_cases("118")
    for case in cases.values():
        assert case["message"].startswith("timed out") and case["hint"] == p118_pipeline.HINT_DEADLOCK, case


def test_another_shard_layout_passes() -> None:
    for name in quick_cases("119"):
        assert judged("119", name, RIGHT / "119_tensor_split_shards.py") == {"passed": True}, name


# ---- the statements say what the suite's models say ---------------------------------------------------
def statement(folder: str) -> str:
    return " ".join((ROOT / "practice" / folder / "README.md").read_text(encoding="utf-8").split())


def test_statements_name_what_the_cases_call_and_stubs_raise() -> None:
    for number in NEW:
        problem = NUMBERED[number]
        text = statement(problem.folder)
        assert f"python practice/judge.py {number}" in text and "## Hints" in text, number
        assert "## Worked example" in text, number
        assert all(name in text for name in problem.cases().FUNCTIONS), number
        assert "NotImplementedError" in (ROOT / "practice" / problem.folder / "solution.py").read_text()


def test_118_worked_example_is_the_simulators_order() -> None:
    from common.costmodel.steps import pp_step_traffic
    from cs336 import pipeline as pp

    text, orders = statement("118_pipeline_1f1b"), pp.one_f_one_b_order(2, 4)
    said = {0: "Stage 0 (warm-up S − s − 1 = 1 forward) runs", 1: "stage 1 (no warm-up) runs"}
    for rank, words in said.items():
        assert f"{words} `{p118_pipeline.order_text([(k, m) for k, m, _ in orders[rank]])}`" in text
    # the statement a student reads gives the figure pp_step_traffic gives
    assert pp_step_traffic(2, 0, 4, 8, 8, 8) == (4, 512) and "512 bytes in all at B = 8, d = 8" in text


def test_119_worked_example_is_the_ledgers() -> None:
    from common.costmodel.collectives import padded_shard_elements
    from common.costmodel.steps import zero_step_traffic
    from cs336 import ledger

    text = statement("119_zero_by_hand")
    assert padded_shard_elements(50, 3) == 17 and ledger.optimizer_state_bytes(50, 3, 16) == 272
    assert zero_step_traffic(3, 50, 8) == (2, 544.0)
    assert "2 × 17 × 8 = 272 bytes" in text and "= (2 calls, 544 bytes)" in text


def test_120_worked_example_is_busbw_pys() -> None:
    from cs336 import busbw as bw

    text, size, seconds = statement("120_busbw"), 1 << 30, 0.05
    # the statement a student reads gives cs336.busbw's figures, as printed
    assert f"algbw = S / t = {bw.algbw(size, seconds) / 1e9:.2f} GB/s" in text
    assert f"= {bw.busbw('reduce-scatter', 4, size, seconds) / 1e9:.2f} GB/s" in text
    slip = bw.chunk_slip_busbw("reduce-scatter", 4, size, seconds)
    # and the slip the problem is about, in the units it was printed in
    assert f"= {slip / 1e9:.2f} (printed as {slip / 2**30:.2f} \"GB/s\"" in text


def test_119_a_state_at_another_offset_is_named_as_such() -> None:
    """The hint for a wrong m or v: found elsewhere in the whole state, the offset (hint 1);
    nowhere, the arithmetic (hint 4); a zero stretch (the padding) matches nothing."""
    whole = torch.arange(1.0, 13.0, dtype=torch.float64)
    assert p119_zero._found_at(whole[4:8].clone(), whole, 0) == 4
    assert p119_zero._found_at(whole[0:4] * 1.5, whole, 0) is None
    padded = torch.cat([whole, torch.zeros(4, dtype=torch.float64)])
    assert p119_zero._found_at(torch.zeros(4, dtype=torch.float64), padded, 0) is None
