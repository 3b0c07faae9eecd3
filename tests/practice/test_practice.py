"""practice/judge.py's verdicts: the references pass every case, the untouched stubs fail every case
with "not written yet", messages show inputs and differences, and usage errors are one line with
exit 2. The fixtures (every wrong solution fails naming the property it broke, every correct one
passes) are in test_practice_fixtures.py; what the judge does with processes (hostile solutions,
signals, hangs, input, files written outside a case's folder) in test_practice_processes.py.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, python

sys.path.insert(0, str(ROOT / "practice"))
from common.output_files import _write_all  # noqa: E402
from judging import PROBLEMS, engine, plain, sandbox  # noqa: E402
from judging.engine import Case  # noqa: E402
from judging.messages import cut_pair, render_pair  # noqa: E402
from judging.sandbox import Fail, load_solution  # noqa: E402

JUDGE = ROOT / "practice" / "judge.py"
WRONG, RIGHT = ROOT / "tests" / "practice_wrong", ROOT / "tests" / "practice_right"
HOSTILE = ROOT / "tests" / "practice_hostile"
FOLDERS = {p.number: p.folder for p in PROBLEMS}
NUMBERED = {p.number: p for p in PROBLEMS}


def judge(*args: str, expect_rc: int, tmp_path: Path | None = None, timeout: float = 120,
          env: dict[str, str] | None = None) -> tuple[str, dict]:
    """Run the judge; check its exit status; return (stdout, the --json record or {})."""
    json_path = tmp_path / "judge.json" if tmp_path is not None else None
    extra = ["--json", str(json_path)] if json_path else []
    proc = python(JUDGE, *args, *extra, timeout=timeout, env=env)
    assert proc.returncode == expect_rc, (f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n"
                                          f"{proc.stderr[-3000:]}")
    assert "Traceback" not in proc.stdout + proc.stderr
    assert all(len(line) <= 100 for line in proc.stdout.splitlines()), proc.stdout
    record = json.loads(json_path.read_text()) if json_path and json_path.exists() else {}
    return proc.stdout, record


def layout(tmp_path: Path, files: dict[str, Path]) -> Path:
    """A folder laid out like practice/: problem number -> a fixture file."""
    root = tmp_path / "solutions"
    for number, path in files.items():
        (root / FOLDERS[number]).mkdir(parents=True)
        shutil.copy(path, root / FOLDERS[number] / "solution.py")
    return root


def by_name(record: dict) -> dict[tuple[str, str], dict]:
    return {(c["problem"], c["case"]): c for c in record["cases"]}


def failed(record: dict, problem: str) -> dict[str, dict]:
    return {c["case"]: c for c in record["cases"] if c["problem"] == problem and not c["passed"]}


# ---- every case against the references and the stubs ----------------------------------------------------
def test_references_pass_every_case(tmp_path: Path) -> None:
    # How long it takes is bench/bench_scripts.py's business (a ratio to import torch), not a test's.
    out, record = judge("--solution", "practice/reference", expect_rc=0, tmp_path=tmp_path)
    assert record["all_passed"] and len(record["problems"]) == len(PROBLEMS)
    assert all(c["passed"] for c in record["cases"]) and "FAIL" not in out
    assert f"summary: {len(PROBLEMS)} of {len(PROBLEMS)} problems solved" in out   # the line a student reads


def test_stubs_fail_every_case_as_not_written_yet(tmp_path: Path) -> None:
    out, record = judge("--quick", expect_rc=1, tmp_path=tmp_path)
    assert {p["number"] for p in record["problems"]} == set(FOLDERS)
    assert all(p["passed"] == 0 and p["cases"] > 0 for p in record["problems"])
    for case in record["cases"]:
        assert case["message"].startswith("not written yet: write "), case
        assert "solution.py" in case["message"], case
    assert "PASS" not in out and f"summary: 0 of {len(PROBLEMS)} problems solved" in out   # as printed


def test_every_problem_has_a_statement_that_answers_the_questions_its_cases_ask() -> None:
    readmes = {}
    for problem in PROBLEMS:
        folder = ROOT / "practice" / problem.folder
        text = (folder / "README.md").read_text(encoding="utf-8")
        readmes[problem.number] = readme = " ".join(text.split())
        assert "python practice/judge.py" in readme and "## Hints" in readme, problem.folder
        assert "NotImplementedError" in (folder / "solution.py").read_text(encoding="utf-8")
        assert (ROOT / "practice" / "reference" / problem.folder / "solution.py").is_file()
        for name in problem.cases().FUNCTIONS:
            assert name in readme, (problem.folder, name)
    # what a student must read in the problems' READMEs (the words are what is tested)
    assert "`first_cap_bytes=0` is a cap of 0" in readmes["113"]
    assert "the *latest* of its gradients" in readmes["113"]
    assert "Return **this rank's** loss" in readmes["114"] and "`loss_fn(outputs, targets)`" in readmes["114"]
    assert "whatever the size (checked on torch 2.13: one number, or 8" in readmes["115"]
    assert "float64" in readmes["117"] and "at most 1e-12" in readmes["117"]
    assert "`torch.optim.Adam`, compares **every** loss" in readmes["114"]          # the promises checked
    assert "float64 and float32 tensors" in readmes["115"]
    assert "`monitored_barrier` is allowed" in readmes["115"]
    assert "a block nested in another" in readmes["116"] and "two models at once" in readmes["116"]
    assert "it must reach the code around the `with`" in readmes["116"]


# ---- one case judged in this process (tests/practice/test_practice_fixtures.py) --------------------
def verdict(case: Case, path: Path) -> Fail | None:
    """A pure-Python case judged in this process: collect, the trip through JSON, check."""
    data = plain.loads(plain.dumps(case.collect(load_solution(path), copy.deepcopy(case.inputs))))
    try:
        case.check(case.inputs, data)
    except Fail as fail:
        return fail
    return None


def judged(number: str, case_name: str, path: Path) -> dict[str, Any]:
    """One case judged in this process, without the judge's process tree (which
    test_practice_processes.py tests): the solution's report, its trip through JSON, the verdict
    and the hint the judge would give. Rank cases launch real ranks from here. The fixtures'
    folders are on this process's import path, as a solution's own folder is in the judge's."""
    module = NUMBERED[number].cases()
    case = next(c for c in module.CASES if c.name.startswith(case_name))
    own = dataclasses.replace(case, inputs=copy.deepcopy(case.inputs))    # the fork's copy, in effect
    outcome = engine.verdict(case, plain.loads(plain.dumps(sandbox.report(own, load_solution(path), path))))
    if "message" in outcome:
        outcome["hint"] = engine.hint_for(module, case, outcome["message"])
    return outcome


# ---- messages and data ----------------------------------------------------------------------------------
def test_expected_and_got_are_cut_where_they_differ() -> None:
    expected, got = [list(range(40)), 1.0], [list(range(40)), 1.0000000001]
    e, g = render_pair(expected, got)
    assert e != g and len(e) <= 88 and len(g) <= 88 and e.startswith("…") and "1.0000000001" in g
    long_a, long_b = "x" * 200 + "A" + "y" * 200, "x" * 200 + "B" + "y" * 200
    a, b = cut_pair(long_a, long_b)
    assert a != b and "A" in a and "B" in b and a.startswith("…") and a.endswith("…")
    # One a prefix of the other.
    assert cut_pair("x" * 100, "x" * 120)[0] != cut_pair("x" * 100, "x" * 120)[1]


def test_plain_data_round_trips_and_runs_no_code() -> None:
    value = {"t": torch.tensor([[0.1, -2.5e-300], [float("inf"), 3.0]], dtype=torch.float64),
             "h": torch.tensor([1.5, -0.25], dtype=torch.bfloat16), "i": torch.arange(3),
             "b": torch.tensor([True]),
             "tuple": (1, [2, None], "s"), 3: float("nan"), "obj": object()}
    back = plain.loads(plain.dumps(value))
    assert torch.equal(back["t"], value["t"])
    assert back["h"].dtype == torch.bfloat16 and torch.equal(back["h"], value["h"])
    assert torch.equal(back["i"], value["i"]) and back["b"].dtype == torch.bool
    assert back["tuple"] == (1, [2, None], "s") and back[3] != back[3] and back["obj"].type_name == "object"
    with pytest.raises(plain.Unreadable):
        plain.loads(b"\x80\x04\x95 a pickle")
    with pytest.raises(plain.Unreadable):
        plain.loads(b'{"$": "tensor", "dtype": "float32", "shape": [3], "values": [1.0]}')



@pytest.mark.parametrize("data", [
    b"[" * 20000 + b"]" * 20000,                                                       # RecursionError
    # torch refuses the shape:
    b'{"$": "tensor", "dtype": "float64", "shape": [-1, -2], "values": [1.0, 2.0]}',
    b'{"$": "tensor", "dtype": "float64", "shape": [0, -1], "values": []}',
    b'{"$": "tensor", "dtype": "qint8", "shape": [2], "values": [1, 2]}',              # a dtype no report has
    b'{"$": "tensor", "dtype": "complex64", "shape": [1], "values": [1.0]}',
], ids=["deep", "negative-shape", "empty-shape", "qint8", "complex"])
def test_plain_refuses_whatever_json_or_torch_would_raise_on(data: bytes) -> None:
    with pytest.raises(plain.Unreadable):
        plain.loads(data)


@pytest.mark.parametrize("header", [b'{"exit_code": "x"}', b'{"exit_code": true}', b'{"exit_code": 1e400}',
                                    b'{"exit_code": 99999999999999999999}', b'{"exit_code": 0, "more": 1}',
                                    b'{"keeper_error": 3}', b"[" * 20000, b'{"exit_code": 0}' + b" " * 2000,
                                    b"\xff"],
                         ids=["str", "bool", "float", "huge", "extra-key", "error-not-str", "deep", "long",
                              "bytes"])
def test_a_forged_keeper_header_is_no_header(header: bytes) -> None:
    case = PROBLEMS[0].cases().CASES[0]
    outcome = engine._outcome(case, sandbox.LOADED + header + b"\n" + plain.dumps({"data": []}), True, 10.0)
    assert outcome["message"].startswith("the solution killed the process that ran it"), outcome


def test_a_failure_that_is_not_a_dict_is_unreadable() -> None:
    case = PROBLEMS[0].cases().CASES[0]
    assert engine.verdict(case, {"fail": "x"}) == {
        "message": "the solution's process sent an unreadable report"}
    assert engine.verdict(case, {"fail": ["expected", "got"]})["message"].endswith("unreadable report")


def test_the_judge_reads_only_the_end_of_what_a_case_printed(tmp_path: Path) -> None:
    import tracemalloc

    with open(tmp_path / "printed", "w+b") as capture:
        capture.write(b"x" * 80 + b"\n" + b"debug line\n" * (1 << 20) + b"one\ntwo\nthree\n")
        tracemalloc.start()
        shown = engine._printed(capture)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert shown == "one\ntwo\nthree" and peak < 1 << 20, peak          # 11 MiB printed, < 1 MiB read


def test_the_judge_keeps_one_copy_of_its_helpers() -> None:
    """The loop that writes a whole buffer is common.output_files'; the handler that takes a process tree
    down on SIGTERM is procs.kill_tree_on, for the judge and the keeper alike."""
    sources = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "practice").rglob("*.py")}
    assert not [name for name, text in sources.items() if "def _write_all" in text or "def _on_term" in text]
    assert _write_all.__module__ == "common.output_files"

# ---- the command line -----------------------------------------------------------------------------------
def _judge_cli(*args: str) -> subprocess.CompletedProcess:
    """The judge run with these arguments, its output captured."""
    return python(JUDGE, *args, timeout=60)


@pytest.mark.parametrize("args", [["999"], ["113", "--solution", "no/such/file.py"],
                                  ["--solution", "README.md", "113"],
                                  ["113", "114", "--solution",
                                   "practice/reference/113_ddp_buckets/solution.py"],
                                  ["114", "--solution", "practice/reference/113_ddp_buckets"],
                                  ["--solution", str(WRONG / "113_misbehaves.py")],
                                  ["--case-limit-s", "0"], ["--case-limit-s", "1000"]])
def test_usage_errors(args: list[str]) -> None:
    proc = _judge_cli(*args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""



def usage_error(*args: str) -> str:
    """The judge's one line for a command line it refuses (exit 2, nothing on stdout)."""
    proc = _judge_cli(*args)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc
    return proc.stderr.strip()


REF_115 = "practice/reference/115_ring_allreduce"


@pytest.mark.parametrize("args, words", [
    (["113", "114", "--solution", str(WRONG / "113_misbehaves.py")], "name one problem, not 2 (113, 114)"),
    (["113", "--solution", ""], "--solution is empty"),
    (["113", "--solution", f"{REF_115}/solution.py"],
     "is a file in problem 115's folder, so it is judged as 115"),
    (["113", "--solution", REF_115], "is problem 115's folder, so it is judged as 115 only: name 115"),
    (["113", "114", "--solution", "practice/reference/113_ddp_buckets/solution.py"], "not 113 and 114"),
])
def test_usage_errors_say_what_is_wrong(args: list[str], words: str) -> None:
    assert words in usage_error(*args)


def test_a_fifo_as_solution_is_named_as_one(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ring.py")                        # a FIFO made here, never opened
    # the one-line stderr contract: what the path is instead of a file
    assert "a FIFO (named pipe), not a file" in usage_error("115", "--solution", str(tmp_path / "ring.py"))

def _judge_module() -> Any:
    spec = importlib.util.spec_from_file_location("practice_judge_cli", JUDGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_problem_names_and_one_problems_folder() -> None:
    cli = _judge_module()
    problems, files = cli.solution_files(["113", "ddp_buckets", "practice/113_ddp_buckets/"],
                                         "practice/reference/113_ddp_buckets")
    assert [p.number for p in problems] == ["113"] and files["113"].name == "solution.py"
    # The folder says which.
    problems, files = cli.solution_files([], "practice/reference/115_ring_allreduce/")
    assert [p.number for p in problems] == ["115"] and files["115"].parent.name == "115_ring_allreduce"
    problems, files = cli.solution_files([], "practice/reference/117_tp_backward/solution.py")
    assert [p.number for p in problems] == ["117"]
    problems, files = cli.solution_files(["114"], "practice/reference")
    assert files == {"114": Path("practice/reference/114_hw5_data_parallel/solution.py")}


def test_help_states_the_time_rule() -> None:
    proc = _judge_cli("--help")
    text = " ".join(proc.stdout.split())
    # --help states the rule in these words
    assert "waits at most half of it in one collective" in text and "limit + 3 s" in text


def test_113_expected_buckets_agree_with_torch() -> None:
    """The judge's expected buckets (ddp_sim) are PyTorch's own on the first-bucket case's sizes."""
    from common.units import MiB
    from lecture15.ddp_sim import DEFAULT_FIRST_BUCKET_BYTES, assign_buckets
    from lecture15.models import resnet50

    sizes = resnet50().param_bytes()
    tensors = [torch.empty(n // 4, dtype=torch.float32, device="meta") for n in reversed(sizes)]
    theirs, _ = torch.distributed._compute_bucket_assignment_by_size(
        tensors, [DEFAULT_FIRST_BUCKET_BYTES, 25 * MiB], [False] * len(tensors), list(range(len(tensors))))
    ours = assign_buckets(sizes, 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES)
    assert [[len(sizes) - 1 - i for i in bucket] for bucket in theirs] == ours


def marked(marker: str) -> list[str]:
    """Every live process whose environment carries `marker`: what a judge run left behind."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            if marker.encode() in (proc / "environ").read_bytes() and stat[stat.rfind(")") + 2] != "Z":
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return found


def no_process_left(marker: str, patience_s: float = 3.0) -> list[Any]:
    """Wait (a keeper may still be tearing down after its judge was killed); what is left, if anything."""
    deadline = time.monotonic() + patience_s
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked(marker)


@pytest.mark.parametrize("variable, value", [("COURSE_MAX_RANKS", "-1"), ("COURSE_MAX_MINUTES", "0"),
                                             ("COURSE_BACKEND", "mpi"), ("COURSE_BACKEND", "nccl"),
                                             ("COURSE_MAX_RANKS", "2")])   # valid, but not for 4-rank cases
def test_a_bad_course_variable_is_the_commands_error_not_every_cases(variable: str, value: str) -> None:
    """As the scripts refuse it: one line, exit 2, before any case (not "the solution raised")."""
    proc = python(JUDGE, "115", "--solution", str(ROOT / "practice" / "reference" / FOLDERS["115"]),
                  env={variable: value}, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and variable in lines[0], proc.stderr
    assert "PASS" not in proc.stdout and "FAIL" not in proc.stdout   # no case ran: a case prints one of them
