"""practice/judge.py both ways: the references pass every case, the untouched stubs fail every case
with "not implemented", deliberately wrong solutions (tests/practice_wrong/) fail the case aimed
at them, and a solution that hangs, exits, crashes a rank or returns the wrong type is one failed
case each, never a traceback from the judge. Usage errors: exit 2, one line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "practice"))
from judging import PROBLEMS  # noqa: E402

JUDGE = ROOT / "practice" / "judge.py"
WRONG = ROOT / "tests" / "practice_wrong"
FOLDERS = {p.number: p.folder for p in PROBLEMS}


def judge(*args: str, expect_rc: int, tmp_path: Path | None = None, timeout: float = 120) -> tuple[str, dict]:
    """Run the judge; check its exit status; return (stdout, the --json record or {})."""
    json_path = tmp_path / "judge.json" if tmp_path is not None else None
    extra = ["--json", str(json_path)] if json_path else []
    proc = subprocess.run([sys.executable, str(JUDGE), *args, *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == expect_rc, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert all(len(line) <= 100 for line in proc.stdout.splitlines()), proc.stdout
    record = json.loads(json_path.read_text()) if json_path and json_path.exists() else {}
    return proc.stdout, record


def layout(tmp_path: Path, files: dict[str, str]) -> Path:
    """A folder laid out like practice/: problem number -> a file under tests/practice_wrong/."""
    root = tmp_path / "solutions"
    for number, name in files.items():
        (root / FOLDERS[number]).mkdir(parents=True)
        shutil.copy(WRONG / name, root / FOLDERS[number] / "solution.py")
    return root


def verdicts(record: dict) -> dict[tuple[str, str], dict]:
    return {(c["problem"], c["case"]): c for c in record["cases"]}


def failed_cases(record: dict, problem: str) -> list[str]:
    return [c["case"] for c in record["cases"] if c["problem"] == problem and not c["passed"]]


def test_references_pass_every_case(tmp_path: Path) -> None:
    began = time.perf_counter()
    out, record = judge("--solution", "practice/reference", expect_rc=0, tmp_path=tmp_path)
    assert time.perf_counter() - began < 30
    assert record["all_passed"] and len(record["problems"]) == len(PROBLEMS)
    assert all(c["passed"] for c in record["cases"]) and "FAIL" not in out
    assert "summary: 5 of 5 problems solved" in out


def test_stubs_fail_every_case_as_not_implemented(tmp_path: Path) -> None:
    began = time.perf_counter()
    out, record = judge(expect_rc=1, tmp_path=tmp_path)
    assert time.perf_counter() - began < 30
    assert {p["number"] for p in record["problems"]} == set(FOLDERS)
    assert all(p["passed"] == 0 and p["cases"] > 0 for p in record["problems"])
    for case in record["cases"]:
        assert case["message"].startswith("not implemented: write "), case
        assert "solution.py" in case["message"], case
    assert "PASS" not in out and "summary: 0 of 5 problems solved" in out


def test_every_problem_has_a_statement_and_a_stub() -> None:
    for problem in PROBLEMS:
        folder = ROOT / "practice" / problem.folder
        readme = (folder / "README.md").read_text(encoding="utf-8")
        assert "python practice/judge.py" in readme and "## Hints" in readme, problem.folder
        assert "NotImplementedError" in (folder / "solution.py").read_text(encoding="utf-8")
        assert (ROOT / "practice" / "reference" / problem.folder / "solution.py").is_file()
        for name in problem.cases().FUNCTIONS:
            assert name in readme, (problem.folder, name)


def test_wrong_solutions_fail_the_case_aimed_at_them(tmp_path: Path) -> None:
    root = layout(tmp_path, {"113": "113_seal_after_exceeding.py", "114": "114_no_divide.py",
                             "115": "115_wrong_chunk.py", "116": "116_flag_never_read.py",
                             "117": "117_no_sum_over_ranks.py"})
    out, record = judge("--solution", str(root), expect_rc=1, tmp_path=tmp_path)
    cases = verdicts(record)
    exact = cases[("113", "buckets: a bucket that reaches the cap exactly is sealed")]
    assert not exact["passed"] and exact["expected"] == "[[3, 2], [1, 0]]" and exact["got"] == "[[3, 2, 1], [0]]"
    assert cases[("113", "buckets: cap 0 gives a bucket per parameter")]["passed"]   # > and >= agree there
    assert all(c["passed"] for (p, name), c in cases.items() if p == "113" and not name.startswith("buckets"))
    average = cases[("114", "average_gradients on 2 real ranks: the mean, grad None skipped")]
    assert not average["passed"] and "the mean over 2 ranks" in average["expected"]
    assert cases[("114", "partition: the split is random.Random(seed)'s shuffle, sliced in rank order")]["passed"]
    ring = failed_cases(record, "115")
    assert "3 ranks, 12 numbers (K divides N)" in ring and "4 ranks, 10 numbers (chunks 3, 3, 2, 2)" in ring
    assert "(dist.all_reduce)" in cases[("115", "3 ranks, 12 numbers (K divides N)")]["expected"]
    assert "no communication inside no_sync" in cases[("116", failed_cases(record, "116")[0])]["expected"]
    tp = cases[("117", "2 ranks, 3 layers, width 8, batch 5")]
    assert not tp["passed"] and "layer 1" in tp["expected"]   # the top layer is right, the one below not
    assert cases[("117", "4 ranks, 1 layer (no gradient flows below it)")]["passed"]


def test_more_wrong_solutions(tmp_path: Path) -> None:
    root = layout(tmp_path, {"113": "113_launch_when_ready.py", "115": "115_calls_all_reduce.py",
                             "116": "116_no_finally.py"})
    _, record = judge("113", "115", "116", "--solution", str(root), expect_rc=1, tmp_path=tmp_path)
    cases = verdicts(record)
    assert "timeline: bucket 1 ready before bucket 0 still waits" in failed_cases(record, "113")
    assert all(c["passed"] for (p, name), c in cases.items() if p == "113" and "exercise 4" in name)
    assert all(c["passed"] for (p, name), c in cases.items() if p == "113" and name.startswith("buckets"))
    waiting = cases[("113", "timeline: bucket 1 ready before bucket 0 still waits")]
    assert waiting["expected"].startswith("bucket 1 all-reduce from ") and waiting["got"].startswith("1 to ")
    ring = [c for c in record["cases"] if c["problem"] == "115"]
    assert all(not c["passed"] and "called dist.all_reduce ×1" in c["got"] for c in ring if "1 rank" not in c["case"])
    assert failed_cases(record, "116") == ["an exception inside no_sync leaves syncing on"]


def test_a_ring_of_blocking_send_and_recv_passes(tmp_path: Path) -> None:
    # torch's send calls isend inside: counted twice, the bytes would fail a correct ring.
    _, record = judge("115", "--solution", str(WRONG / "115_blocking_send_recv.py"), expect_rc=0, tmp_path=tmp_path)
    assert record["all_passed"]


def test_a_student_solution_written_into_the_116_stub_passes(tmp_path: Path) -> None:
    _, record = judge("116", "--solution", str(WRONG / "116_handbook_style.py"), expect_rc=0, tmp_path=tmp_path)
    assert record["all_passed"]


def test_misbehaving_code_is_a_failed_case_each(tmp_path: Path) -> None:
    out, record = judge("113", "--solution", str(WRONG / "113_misbehaves.py"), "--case-limit-s", "2",
                        expect_rc=1, tmp_path=tmp_path)
    cases = verdicts(record)
    by_name = {name: c for (_, name), c in cases.items()}
    assert len(by_name) == len(__import__("judging.p113_ddp_buckets").p113_ddp_buckets.CASES)  # every case ran
    assert by_name["buckets: a bucket that reaches the cap exactly is sealed"]["message"].startswith("timed out after 2 s")
    assert "sys.exit(3)" in by_name["buckets: cap 0 gives a bucket per parameter"]["message"]
    assert "exit code 4" in by_name["buckets: a cap above the total gives one bucket"]["message"]
    wrong_type = by_name["buckets: a parameter larger than the cap"]
    assert wrong_type["got"] == "a str: 'one bucket, I think'" and "debug:" in wrong_type["output"]
    crash = by_name["buckets: a first-bucket cap larger than the cap"]["message"]
    assert "ZeroDivisionError" in crash and "(113_misbehaves.py:21 in assign_buckets)" in crash
    assert by_name["all-reduce time: one rank sends nothing"]["passed"]          # the runs after the kills
    assert "not implemented" not in out and "debug:" in out


def test_a_crashing_rank_and_a_hang_on_real_ranks(tmp_path: Path) -> None:
    _, record = judge("115", "--solution", str(WRONG / "115_misbehaves.py"), "--case-limit-s", "3", "--quick",
                      expect_rc=1, tmp_path=tmp_path)
    by_name = {c["case"]: c for c in record["cases"]}
    crash = by_name["2 ranks, 8 numbers"]["message"]
    assert crash.startswith("rank 1 failed: ZeroDivisionError: rank 1's bug") and "115_misbehaves.py:14" in crash
    assert by_name["3 ranks, 12 numbers (K divides N)"]["message"].startswith("timed out after 3 s")
    assert by_name["4 ranks, 16 numbers"]["message"].startswith("timed out after 3 s")
    assert by_name["3 ranks, 10 numbers (chunks 4, 3, 3)"]["message"].startswith("not implemented")
    time.sleep(0.5)   # the killed children's ranks die with them: nothing of this run is left
    left = [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).find(str(tmp_path)) >= 0]
    assert not left, [_cmdline(p) for p in left]


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("text, phrase", [("def assign_buckets(:\n", "SyntaxError"),
                                          ("import no_such_module_here\n", "ModuleNotFoundError"),
                                          ("while True:\n    pass\n", "took more than 2 s")])
def test_a_file_that_does_not_load_fails_its_problem(tmp_path: Path, text: str, phrase: str) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n" + text)
    _, record = judge("113", "--solution", str(bad), "--case-limit-s", "2", expect_rc=1, tmp_path=tmp_path)
    messages = {c["message"] for c in record["cases"]}
    assert len(messages) == 1 and phrase in messages.pop()


@pytest.mark.parametrize("args", [["999"], ["113", "--solution", "no/such/file.py"], ["--solution", "README.md", "113"],
                                  ["113", "114", "--solution", "practice/reference/113_ddp_buckets/solution.py"],
                                  ["--case-limit-s", "0"], ["--case-limit-s", "1000"]])
def test_usage_errors(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, str(JUDGE), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_problem_names_by_number_folder_slug_or_path(tmp_path: Path) -> None:
    out, record = judge("113", "ddp_buckets", "practice/113_ddp_buckets/", "--solution", "practice/reference",
                        expect_rc=0, tmp_path=tmp_path)
    assert [p["number"] for p in record["problems"]] == ["113"]


def test_113_expected_buckets_agree_with_torch() -> None:
    """The judge's expected buckets (ddp_sim) are PyTorch's own on the first-bucket case's sizes."""
    from lecture15.ddp_sim import DEFAULT_FIRST_BUCKET_BYTES, MiB, assign_buckets, resnet50

    sizes = resnet50().param_bytes()
    tensors = [torch.empty(n // 4, dtype=torch.float32, device="meta") for n in reversed(sizes)]
    theirs, _ = torch.distributed._compute_bucket_assignment_by_size(
        tensors, [DEFAULT_FIRST_BUCKET_BYTES, 25 * MiB], [False] * len(tensors), list(range(len(tensors))))
    ours = assign_buckets(sizes, 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES)
    assert [[len(sizes) - 1 - i for i in bucket] for bucket in theirs] == ours
