"""The judge against solutions written as students write them. Every wrong one (tests/practice_wrong/,
one mistake each) fails under --quick, and so with the default flags too, and the first case it
fails gives the hint that names the property it broke; every correct one (tests/practice_right/)
passes every case. Files starting with "_" in practice_wrong are helper modules the fixtures
import from their own folder, as a student's solution may.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_practice import (
    HOSTILE,
    NUMBERED,
    PROBLEMS,
    RIGHT,
    WRONG,
    Case,
    failed,
    judge,
    judged,
    layout,
    verdict,
)

sys.path.insert(0, str(WRONG))      # the fixtures' helper modules, as the judge puts a solution's folder

# Fixture -> words of the hint its first failing quick case must give (the property it broke);
# None: it misbehaves (loops, exits, hangs), which test_practice_processes.py judges in processes.
WRONG_HINTS = {
    "113_backward_end_first_param.py": "exposed = step end − max(ready_s)",
    "113_drops_open_bucket.py": "every parameter in exactly one bucket",
    "113_exposed_after_backward.py": "a bucket still running when backward ends",
    "113_first_cap_for_all.py": "caps the first bucket only",
    "113_first_cap_two_buckets.py": "caps the first bucket only",
    "113_first_cap_zero_unset.py": "0 counts: only None means none",
    "113_forward_order.py": "REVERSE registration order",
    "113_launch_when_ready.py": "bucket b − 1's end",
    "113_misbehaves.py": None,
    "113_reverses_caller_list.py": "leave the caller's lists as they were",
    "113_ring_forgets_k.py": "n/K bytes, not the whole n",
    "113_ring_one_phase.py": "a reduce-scatter AND an all-gather",
    "113_seal_after_exceeding.py": ">=, not >",
    "113_sorted_inside.py": "in the order they were added",
    "113_timeline_bytes_in_mb.py": "allreduce_time(the bucket's BYTES",
    "113_timeline_last_added.py": "its LATEST gradient's ready time",
    "113_timeline_lowest_index.py": "its LATEST gradient's ready time",
    "114_averages_parameters.py": "average the GRADIENTS before optimizer.step()",
    "114_divides_by_two.py": "divide by dist.get_world_size()",
    "114_grad_none_zeroed.py": "grad is None (leave it None)",
    "114_loss_after_step.py": "THIS step's loss (loss.item() before the update)",
    "114_loss_averaged_over_ranks.py": "not one averaged over the ranks",
    "114_loss_swapped.py": "loss_fn(outputs, targets): the model's outputs first",
    "114_no_divide.py": "divide by dist.get_world_size()",
    "114_no_zero_grad.py": "zero_grad, forward",
    "114_partition_drops_remainder.py": "+1 for the first size % W",
    "114_partition_global_random.py": "leaves the global generator alone",
    "114_partition_strided.py": "CONTIGUOUS slices",
    "114_reduce_of_temp.py": "all_reduce p.grad ITSELF",
    "114_running_mean_loss.py": "THIS step's loss",
    "115_divides_mean.py": "the SUM over the ranks",
    "115_calls_all_reduce.py": "no collective",
    "115_chunk.py": "tensor.chunk(K) may give fewer",
    "115_float64_buffer.py": "same dtype, same number of elements",
    "115_misbehaves.py": None,
    "115_returns_sum.py": "sum INTO the tensor passed in",
    "115_recv_buffer_short.py": "receive into a buffer like the chunk",
    "115_two_directions.py": "the same neighbour",
    "115_whole_tensor.py": "each ONE chunk",
    "115_wrong_chunk.py": "reduce-scatter adds, all-gather copies",
    "116_callback_not_reset.py": "the counts must start afresh",
    "116_averages_micro_batches.py": "the .grad sums of every micro-batch",
    "116_counts_inside_no_sync.py": "BEFORE counting the gradient in its bucket",
    "116_flag_never_read.py": "return before any all_reduce",
    "116_global_flag.py": "belongs to the instance",
    "116_no_grad_inside.py": "not autograd: no torch.no_grad()",
    "116_no_divide.py": "divides by the world size",
    "116_no_finally.py": "in a finally: block",
    "116_prev_on_self.py": "PREVIOUS value, not True",
    "116_restores_true.py": "PREVIOUS value, not True",
    "116_swallows_exception.py": "must not catch the exception",
    "116_toggle.py": "PREVIOUS value, not True",
    "116_zero_grad_on_enter.py": "the .grad sums of every micro-batch",
    "117_allreduce_no_slice.py": "its own columns of the sum over ranks",
    "117_float32_buffer.py": "torch.zeros(shape) is float32",
    "117_no_sum_over_ranks.py": "a sum over ranks",
    "117_reversed_order.py": "in LAYER order",
    "117_skips_first_layer.py": "one dL/dW_r per layer",
    "117_start_from_own_width.py": "sum(widths[:rank])",
    "117_start_off_by_one.py": "sum(widths[:rank])",
    "117_tanh_gelu.py": "gelu'(z)",
}


def test_every_wrong_fixture_is_listed_with_the_property_it_breaks() -> None:
    numbers = {name[:3] for name in WRONG_HINTS}          # a problem's fixtures are listed, or none of them
    files = {p.name for p in WRONG.glob("*.py") if p.name[:3] in numbers}
    assert files == set(WRONG_HINTS)


@pytest.mark.parametrize("fixture", [f for f, words in WRONG_HINTS.items() if words])
def test_a_wrong_solution_fails_under_quick_with_the_hint_for_what_it_broke(fixture: str) -> None:
    """The quick cases in the judge's order, up to the first that fails: --quick runs those, the
    default flags every case, so failing here is failing under both."""
    number = fixture[:3]
    for case in NUMBERED[number].cases().CASES:
        if case.quick:
            outcome = judged(number, case.name, WRONG / fixture)
            if not outcome.get("passed"):
                assert WRONG_HINTS[fixture] in outcome["hint"], (case.name, outcome)
                return
    pytest.fail(f"{fixture} passes every quick case")


CASES_113 = PROBLEMS[0].cases().CASES


def _changes_order(case: Case) -> bool:
    """A bucket case where reversing param_bytes in place shows (not every list is a palindrome)."""
    return case.name.startswith("buckets:") and any(c[0] != c[0][::-1] for c in case.inputs["calls"])


@pytest.mark.parametrize("fixture, aimed_at, words, passes", [
    ("113_seal_after_exceeding.py", "buckets: a bucket that reaches the cap exactly", "[[3, 2], [1, 0]]",
     ("buckets: cap 0", "timeline:")),                            # > and >= agree at cap 0
    ("113_first_cap_zero_unset.py", "buckets: a first-bucket cap of 0 is given", "[[3], [2, 1], [0]]",
     ("buckets: lecture 15", "buckets: ResNet-50", "buckets: a first-bucket cap larger", "timeline:")),
    ("113_reverses_caller_list.py", _changes_order, "param_bytes unchanged", ("timeline:", "all-reduce")),
    ("113_launch_when_ready.py", "timeline: bucket 1 ready before bucket 0", "bucket 1 all-reduce from",
     ("buckets:", "timeline: lecture 15 exercise 4")),
    ("113_timeline_last_added.py", "timeline: inside a bucket, gradients ready out",
     "bucket 0 all-reduce from 6 to",
     ("buckets:", "timeline: lecture 15 exercise 4", "timeline: bucket 1 ready before")),
    ("113_timeline_lowest_index.py", "timeline: inside a bucket, gradients ready out",
     "bucket 0 all-reduce from 6 to",
     ("buckets:", "timeline: lecture 15 exercise 4", "timeline: bucket 1 ready before")),
    ("113_exposed_after_backward.py", "timeline: a bucket still running", "exposed communication 1.6 ms",
     ("buckets:", "timeline: lecture 15 exercise 4", "timeline: every gradient ready at once",
      "timeline: bucket 1 ready before", "timeline: inside a bucket")),
])
def test_113_wrong_solutions_fail_the_cases_aimed_at_them(fixture: str, aimed_at: Any, words: str,
                                                         passes: tuple[str, ...]) -> None:
    for case in CASES_113:
        aimed = aimed_at(case) if callable(aimed_at) else case.name.startswith(aimed_at)
        if not aimed and not case.name.startswith(passes):
            continue
        fail = verdict(case, WRONG / fixture)
        assert (fail is not None) == aimed, (case.name, fail and (fail.expected, fail.got))
        if fail is not None:
            assert words in str(fail.expected) + str(fail.got), (case.name, fail.expected, fail.got)


def test_113_the_case_that_catches_a_running_bucket_is_quick() -> None:
    catching = [c for c in CASES_113 if c.name.startswith("timeline:")
                and verdict(c, WRONG / "113_exposed_after_backward.py") is not None]
    assert catching and all(c.quick for c in catching[:1])


def test_113_random_case_shows_the_call_that_failed() -> None:
    case = next(c for c in PROBLEMS[0].cases().CASES if "random" in c.name)
    fail = verdict(case, WRONG / "113_seal_after_exceeding.py")
    assert fail is not None and "seed 113" in case.name
    assert set(fail.inputs) >= {"param_bytes", "cap_bytes"} and len(fail.inputs["param_bytes"]) <= 12


@pytest.mark.parametrize("number, fixture, case, words", [
    ("114", "114_no_divide.py", "average_gradients on 2", "the mean over 2 ranks"),
    ("114", "114_loss_swapped.py", "train_step on 2", "loss_fn(targets, outputs), the arguments swapped"),
    ("114", "114_running_mean_loss.py", "train_step on 2", "rank 0's loss at step 2 of 3 (SGD)"),
    ("114", "114_averages_parameters.py", "train_step on 2", "after 3 Adam steps"),
    ("115", "115_chunk.py", "4 ranks, 5 numbers", "tensor.chunk(K) may give fewer"),
    ("115", "115_wrong_chunk.py", "3 ranks, 12 numbers", "the sum over the ranks: [300, 306"),
    ("115", "115_calls_all_reduce.py", "2 ranks, 8 numbers", "rank 0 called all_reduce ×1"),
    ("115", "115_float64_buffer.py", "4 ranks, 10 float32", "received into"),
    ("116", "116_flag_never_read.py", "2 ranks, 2 micro-batches", "no communication inside no_sync"),
    ("116", "116_no_finally.py", "an exception inside no_sync",
     "all-reduces in the backward after an exception"),
    ("116", "116_restores_true.py", "no_sync inside no_sync", "the outer block after the inner one ended"),
    ("117", "117_no_sum_over_ranks.py", "2 ranks, 3 layers", "rank 0, layer 1"),   # the top layer is right
])
def test_wrong_solutions_on_ranks_fail_saying_what_is_wrong(number: str, fixture: str, case: str,
                                                            words: str) -> None:
    outcome = judged(number, case, WRONG / fixture)
    assert not outcome.get("passed") and words in " ".join(str(v) for v in outcome.values()), outcome


@pytest.mark.parametrize("fixture", sorted(p.name for p in RIGHT.glob("*.py")))
def test_a_correct_solution_passes_every_case(fixture: str) -> None:
    number = fixture[:3]
    for case in NUMBERED[number].cases().CASES:
        began = time.perf_counter()
        assert judged(number, case.name, RIGHT / fixture) == {"passed": True}, case.name
        if fixture in ("114_late_rank.py", "115_imported_isend.py") and case.inputs.get("world_size") == 2 \
                and case.name.startswith(("average", "2 ranks")):
            assert time.perf_counter() - began > 3          # the late rank did come late


def test_a_solution_folder_with_a_helper_module_passes(tmp_path: Path) -> None:
    out, record = judge("115", "--solution", str(RIGHT / "115_with_helper"), expect_rc=0, tmp_path=tmp_path)
    assert record["all_passed"] and "note:" not in out       # its folder imports; it writes nowhere (no note)


@pytest.mark.parametrize("number, fixture, words", [
    ("116", "116_edits_the_counter.py", "'s group ran "),     # clears the records of what ran in no_sync
    ("115", "115_edits_the_counter.py", "'s group ran "),     # deletes one all_reduce among its sends
])
def test_one_line_that_edits_the_counters_records_fails(number: str, fixture: str, words: str) -> None:
    for case in NUMBERED[number].cases().CASES:
        if case.quick and case.inputs["world_size"] > 1 and case.inputs.get("scenario", "plain") == "plain":
            outcome = judged(number, case.name, HOSTILE / fixture)
            assert not outcome.get("passed") and words in outcome.get("got", ""), (case.name, outcome)


def test_wrong_solutions_fail_under_quick_through_the_judge(tmp_path: Path) -> None:
    root = layout(tmp_path, {"113": WRONG / "113_first_cap_zero_unset.py",
                             "114": WRONG / "114_loss_swapped.py", "115": WRONG / "115_chunk.py",
                             "116": WRONG / "116_flag_never_read.py",
                             "117": WRONG / "117_no_sum_over_ranks.py"})
    out, record = judge("113", "114", "115", "116", "117", "--quick", "--solution", str(root), expect_rc=1,
                        tmp_path=tmp_path)
    first = failed(record, "113")
    assert list(first) == ["buckets: a first-bucket cap of 0 is given: "
                           "the first bucket seals after one parameter"]
    # the hint a student reads (the words are what is tested)
    assert "0 counts: only None means none" in next(iter(first.values()))["hint"]
    assert next(iter(first.values()))["inputs"] == ("{'param_bytes': [4, 4, 4, 4], 'cap_bytes': 8, "
                                                    "'first_cap_bytes': 0}")
    swapped = failed(record, "114")
    # what the judge tells the student it got
    assert len(swapped) == 2 and all("the arguments swapped" in c["got"] for c in swapped.values())
    chunk = failed(record, "115")
    assert list(chunk) == ["4 ranks, 5 numbers (chunks 2, 1, 1, 1; tensor.chunk(4) gives 3)"]
    only = next(iter(chunk.values()))
    # the error and the hint a student reads
    assert "IndexError" in only["message"] and "tensor.chunk(K) may give fewer" in only["hint"]
    assert "no communication inside no_sync" in next(iter(failed(record, "116").values()))["expected"]
    assert "4 ranks, 1 layer (no gradient flows below it)" not in failed(record, "117")
    assert all(c["inputs"] for c in record["cases"] if not c["passed"])      # every failure shows its inputs
    assert "inputs:   {'world_size': 4, 'numbers': 5, 'dtype': 'float64'}" in out   # printed for the student


def test_a_rank_late_to_a_collective_passes_through_the_judge(tmp_path: Path) -> None:
    # rank 1 starts its all-reduce 3 s after rank 0, under the default case limit of 10 s
    _, record = judge("114", "--quick", "--solution", str(RIGHT / "114_late_rank.py"), expect_rc=0,
                      tmp_path=tmp_path)
    seconds = {c["case"]: c["seconds"] for c in record["cases"]}
    assert seconds["average_gradients on 2 real ranks: the mean, grad None skipped"] > 3
