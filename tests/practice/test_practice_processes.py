"""practice/judge.py and processes: a solution that forks, starts a daemon, kills its parent, exits
with a code, loops, hangs a rank, hides its traffic or patches the judge's comparisons fails its
case (or passes, when it answered right) and leaves no process behind; the judge killed by SIGTERM
or SIGKILL leaves none either. A breakpoint() or input() fails its case at once, whatever the
judge's stdin; files written outside a case's folder are said, and the new ones removed. Every
judge run here carries a marker in its environment, inherited
by whatever it and the solution start; afterwards no live process may carry it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT
from test_practice import JUDGE, WRONG, by_name, failed, judge, layout, no_process_left

HOSTILE = ROOT / "tests" / "practice_hostile"


def marker() -> dict[str, str]:
    return {"JUDGE_TEST_MARK": f"judge-test-{uuid.uuid4().hex}"}


def test_a_hostile_solution_fails_only_its_cases_and_leaves_nothing(tmp_path: Path) -> None:
    env = marker()
    out, record = judge("113", "--solution", str(HOSTILE / "113_hostile.py"), expect_rc=1, tmp_path=tmp_path,
                        env=env)
    cases = {name: c for (_, name), c in by_name(record).items()}
    # Forked a sleeper: still right.
    assert cases["buckets: lecture 15 exercise 3, 10, 2, 8, 20, 4 MB, cap 12 MB (the notes: {p4, p3}, "
                 "{p2, p1, p0})"]["passed"]
    assert cases["buckets: a bucket that reaches the cap exactly is sealed"]["passed"]   # started a daemon
    killer = cases["buckets: cap 0 gives a bucket per parameter"]
    assert killer["message"].startswith("the solution killed the process that ran it")
    exited = cases["buckets: a cap above the total gives one bucket"]["message"]
    assert "exit code 3" in exited and "timed out" not in exited    # its fork kept the pipe open: no matter
    patched = cases["buckets: a parameter larger than the cap"]
    # It patched torch.allclose & co.:
    assert (patched["expected"], patched["got"]) == ("[[2, 1], [0]]", "[[0]]")
    # It patched the judge's modules:
    assert not cases["buckets: ResNet-50, first bucket 1 MiB, then 25 MiB"]["passed"]
    assert all(c["passed"] for name, c in cases.items() if name.startswith(("timeline:", "all-reduce")))
    assert [p["passed"] == p["cases"] for p in record["problems"]] == [False]   # 0 of 1 problems solved
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []



def test_reports_the_judge_cannot_read_fail_their_cases_only(tmp_path: Path) -> None:
    env = marker()
    out, record = judge("113", "--quick", "--solution", str(HOSTILE / "113_bad_reports.py"), expect_rc=1,
                        tmp_path=tmp_path, env=env)
    cases = {name.split(",")[0].split(" (")[0]: c for (_, name), c in by_name(record).items()}
    for name, words in (("buckets: lecture 15 exercise 3", "RecursionError"),
                        ("buckets: a bucket that reaches the cap exactly is sealed",
                         "invalid shape dimension"),
                        ("buckets: cap 0 gives a bucket per parameter", "unknown dtype 'qint8'"),
                        ("buckets: a cap above the total gives one bucket", "unreadable report")):
        message = cases[name]["message"]
        assert message.startswith("the solution's process sent an unreadable report"), cases[name]
        assert words in message, cases[name]
    assert cases["buckets: a parameter larger than the cap"]["passed"]        # its real report, read as usual
    assert [p["passed"] == p["cases"] for p in record["problems"]] == [False]   # 0 of 1 problems solved
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []


def test_a_header_forged_in_the_keepers_pipe_fails_its_case(tmp_path: Path) -> None:
    env = marker()
    out, record = judge("113", "--quick", "--solution", str(HOSTILE / "113_forged_header.py"), expect_rc=1,
                        tmp_path=tmp_path, env=env)
    assert record["cases"] and all(c["message"].startswith("the solution killed the process that ran it")
                                   for c in record["cases"])
    assert [p["passed"] for p in record["problems"]] == [0]   # 0 of 1 problems solved, 0 cases passed
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []



def test_a_case_that_prints_too_much_fails_at_the_limit(tmp_path: Path) -> None:
    env = marker()
    _, record = judge("113", "--quick", "--solution", str(HOSTILE / "113_prints_too_much.py"), expect_rc=1,
                      tmp_path=tmp_path, env=env)
    cases = {name.split(",")[0]: c for (_, name), c in by_name(record).items()}
    for name in ("buckets: lecture 15 exercise 3", "all-reduce time: ring α-β cost for K = 16"):
        message = cases[name]["message"]
        assert message.startswith("the solution printed 16 MiB, the most a case may print"), name
        assert cases[name]["seconds"] < 8, cases[name]                  # stopped by the limit, not the clock
    assert cases["buckets: a bucket that reaches the cap exactly is sealed"]["passed"]
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []

GUARD_DRIVER = """
import sys, types
sys.path[:0] = ["practice", "code"]
from pathlib import Path
from judging import engine

def fails(solution, inputs):
    raise ValueError("the solution's mistake")

def check(inputs, data):
    pass

module = types.SimpleNamespace(ERROR_HINTS=[None])    # a case module with a bug: hint_for raises
cases = [engine.Case("hint_for raises", {}, fails, check, "h"),
         engine.Case("passes", {}, lambda s, i: 1, check, "h")]
run = engine.run_problem("999", module, cases, Path(sys.argv[1]), 10.0)
print(repr([(r.case, r.passed, r.message) for r in run.results]))
"""


def test_an_error_inside_the_judge_fails_that_case_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("")
    proc = subprocess.run([sys.executable, "-c", GUARD_DRIVER, str(tmp_path / "empty.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (first, passed, message), second = eval(proc.stdout)
    assert first == "hint_for raises" and not passed, message
    assert message.startswith("the judge failed on this case (TypeError:")
    assert message.endswith("please report it")
    assert second == ("passes", True, "")

def _judge_until_started(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """Start the judge on a solution that forks a sleeper and spins; return once it spins."""
    env = marker()
    started = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, str(JUDGE), "113", "--solution", str(HOSTILE / "113_loops.py")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, JUDGE_TEST_STARTED=str(started), **env))
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists(), proc.communicate()
    return proc, env["JUDGE_TEST_MARK"]


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"),
                                             (signal.SIGINT, 130, "interrupted")])
def test_sigterm_or_ctrl_c_to_the_judge_takes_every_process_down(tmp_path: Path, sig: int, code: int,
                                                                   word: str) -> None:
    proc, mark = _judge_until_started(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code and err.strip().endswith(word) and "Traceback" not in err
    assert no_process_left(mark, patience_s=1.0) == []


def test_sigkill_of_the_judge_takes_every_process_down(tmp_path: Path) -> None:
    proc, mark = _judge_until_started(tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert no_process_left(mark) == []       # the keeper hears of it from the kernel and kills its tree


def test_misbehaving_code_is_a_failed_case_each(tmp_path: Path) -> None:
    env = marker()
    out, record = judge("113", "--quick", "--solution", str(WRONG / "113_misbehaves.py"),
                        "--case-limit-s", "2", expect_rc=1, tmp_path=tmp_path, env=env)
    cases = {name: c for (_, name), c in by_name(record).items()}
    loop = cases["buckets: a bucket that reaches the cap exactly is sealed"]
    # the hint a student reads (the words are what is tested)
    assert loop["message"].startswith("timed out after 2 s") and "a loop that never ends?" in loop["hint"]
    assert "sys.exit(3)" in cases["buckets: cap 0 gives a bucket per parameter"]["message"]
    assert "exit code 4" in cases["buckets: a cap above the total gives one bucket"]["message"]
    wrong_type = cases["buckets: a parameter larger than the cap"]
    assert wrong_type["got"] == "a str: 'one bucket, I think'" and "debug:" in wrong_type["output"]
    crash = cases["buckets: a first-bucket cap larger than the cap"]["message"]
    # the error a student reads names the file, line and function
    assert "ZeroDivisionError" in crash and "(113_misbehaves.py:22 in assign_buckets)" in crash
    assert cases["all-reduce time: one rank sends nothing"]["passed"]          # the runs after the kills
    assert "not written yet" not in out and "debug:" in out
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []


def test_a_crash_a_deadlock_and_a_hung_rank_on_real_ranks(tmp_path: Path) -> None:
    env = marker()
    _, record = judge("115", "--solution", str(WRONG / "115_misbehaves.py"), "--case-limit-s", "2", "--quick",
                      expect_rc=1, tmp_path=tmp_path, env=env)
    cases = failed(record, "115")
    crash = cases["2 ranks, 8 numbers"]["message"]
    assert crash.startswith("rank 1 failed: ZeroDivisionError: rank 1's bug")
    assert "115_misbehaves.py:15" in crash
    deadlock = cases["3 ranks, 12 numbers (K divides N)"]
    assert deadlock["message"].startswith("timed out after 2 s (+ 3 s for the ranks' report)")
    hung = cases["4 ranks, 16 numbers"]
    assert hung["message"].startswith("rank 2 stopped responding (at ring_allreduce (115_misbehaves.py:20))")
    # the hint a student reads (the words are what is tested)
    assert deadlock["hint"] == hung["hint"] and "send also waits for its receive on gloo" in hung["hint"]
    assert cases["3 ranks, 10 numbers (chunks 4, 3, 3)"]["message"].startswith("not written yet")
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []


def test_traffic_hidden_from_the_counter_fails(tmp_path: Path) -> None:
    _, record = judge("115", "--quick", "--solution", str(HOSTILE / "115_hostile_counter.py"), expect_rc=1,
                      tmp_path=tmp_path)
    cases = failed(record, "115")
    assert set(cases) == ({c["case"] for c in record["cases"]}
                          - {"1 rank: nothing to send, the tensor unchanged"})
    for name in ("2 ranks, 8 numbers", "4 ranks, 16 numbers",
                 "4 ranks, 10 float32 numbers (chunks 3, 3, 2, 2)"):
        assert cases[name]["got"] == "rank 0: the counter was not in place when its code returned", name
    for name in ("3 ranks, 12 numbers (K divides N)", "3 ranks, 10 numbers (chunks 4, 3, 3)"):
        # what the judge tells the student it got
        assert "1 operation(s) on a process group that the counter did not see" in cases[name]["got"], name


def test_files_that_do_not_load_are_said_once(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    sources = {"113": b"x = 1\ndef assign_buckets(:\n", "114": b"import no_such_module_here\n",
               "115": b"x = 1\ny = 2\0\n", "116": b"while True:\n    pass\n"}
    for number, text in sources.items():
        (bad / f"{number}.py").write_bytes(text)
    root = layout(tmp_path, {number: bad / f"{number}.py" for number in sources})
    env = marker()
    out, record = judge("113", "114", "115", "116", "--quick", "--case-limit-s", "2", "--solution", str(root),
                        expect_rc=1, tmp_path=tmp_path, env=env)
    errors = {p["number"]: p["error"] for p in record["problems"]}
    assert errors["113"] == "solution.py line 2: SyntaxError: invalid syntax"
    # the student's own error, as Python gave it
    assert "ModuleNotFoundError: No module named 'no_such_module_here'" in errors["114"]
    assert errors["115"].startswith("solution.py line 2: the file contains a null byte")
    assert "None" not in errors["115"]
    assert errors["116"] == "importing solution.py took more than 2 s"
    assert all(c["message"] == "not run: the file did not load" for c in record["cases"])
    assert out.count("could not load the file") == 4 and out.count("SyntaxError") == 1
    assert no_process_left(env["JUDGE_TEST_MARK"]) == []


# ---- a student's leftovers: input, and files written outside the case's folder ---------------------------
# case -> what its message says (113_asks_for_input.py's lines)
ASKED = {"buckets: lecture 15 exercise 3": "it called breakpoint() (113_asks_for_input.py:20 in",
         "buckets: a bucket that reaches": "it called input() or pdb (113_asks_for_input.py:22",
         "buckets: cap 0 gives": "it called pdb.set_trace() (113_asks_for_input.py:25",
         "buckets: a cap above the total": "it read sys.stdin (113_asks_for_input.py:27"}


@pytest.mark.parametrize("stdin", ["terminal", "pipe", "devnull"])
def test_a_breakpoint_or_input_fails_at_once_whatever_the_stdin(tmp_path: Path, stdin: str) -> None:
    ends: list[int] = []
    if stdin == "terminal":
        ends = list(os.openpty())                 # the judge's stdin a terminal nobody types in
    elif stdin == "pipe":
        ends = list(os.pipe())                    # a pipe nobody writes to, never closed
    try:
        given = ends[1 if stdin == "terminal" else 0] if ends else subprocess.DEVNULL
        proc = subprocess.run([sys.executable, str(JUDGE), "113", "--quick", "--solution",
                               str(HOSTILE / "113_asks_for_input.py"), "--json", str(tmp_path / "r.json")],
                              cwd=ROOT, stdin=given, capture_output=True, text=True, timeout=120)
    finally:
        for fd in ends:
            os.close(fd)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    cases = {c["case"]: c for c in json.loads((tmp_path / "r.json").read_text())["cases"]}
    for start, words in ASKED.items():
        case = next(c for name, c in cases.items() if name.startswith(start))
        assert case["message"].startswith("the solution waits for input: ") and words in case["message"], case
        # the hint a student reads (the words are what is tested)
        assert case["seconds"] < 3 and "remove breakpoint(), input() and pdb" in case["hint"], case
    assert sum(c["passed"] for c in cases.values()) == len(cases) - len(ASKED)


def test_a_breakpoint_on_a_rank_names_the_rank_at_once(tmp_path: Path) -> None:
    _, record = judge("115", "--quick", "--solution", str(HOSTILE / "115_breakpoint_on_rank.py"), expect_rc=1,
                      tmp_path=tmp_path)
    two = by_name(record)[("115", "2 ranks, 8 numbers")]
    assert two["message"] == ("the solution waits for input on rank 1: it called breakpoint() "
                              "(115_breakpoint_on_rank.py:12 in ring_allreduce)"), two
    assert two["seconds"] < 4


def test_files_written_outside_the_cases_folder_are_said_and_new_ones_removed(tmp_path: Path) -> None:
    folder, outside = tmp_path / "student", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    solution = folder / "solution.py"
    solution.write_text((HOSTILE / "113_writes_outside.py").read_text())
    old = tmp_path / "old.txt"
    old.write_text("before\n")
    out, record = judge("113", "--quick", "--solution", str(solution), expect_rc=0, tmp_path=tmp_path,
                        env={"JUDGE_TEST_OUTSIDE": str(outside), "JUDGE_TEST_OLD": str(old)})
    notes = {name: c["notes"] for (_, name), c in by_name(record).items()}

    def shown(path: Path) -> str:          # a path as a note shows it
        return "…/" + "/".join(path.parts[-3:])
    first = next(v for k, v in notes.items() if k.startswith("buckets: lecture 15 exercise 3"))
    assert first == [f"wrote {shown(folder / 'beside.log')} (removed)"]
    made = outside / "made"
    assert notes["buckets: a bucket that reaches the cap exactly is sealed"] == [   # relative.txt: its own
        f"made the folder {shown(made)} (removed)", f"made the folder {shown(made / 'inner')} (removed)",
        f"wrote {shown(made / 'inner' / 'notes.txt')} (removed)"]
    assert notes["buckets: cap 0 gives a bucket per parameter"] == [
        f"changed {shown(old)} (it was there before: left as it is)"]
    assert notes["buckets: a cap above the total gives one bucket"] == [
        f"{shown(folder / 'saved.pt')} appeared during the case (not through Python: left as it is)"]
    # the judge's own words are what the student reads (the record above holds the paths)
    assert sum(bool(v) for v in notes.values()) == 4 and "warning: 3 cases wrote outside" in out
    # saved.pt came past the audit hook (torch's C++ writer, another program, an editor): said apart
    assert "note: files beside the solution changed during 1 case, not through its Python" in out
    assert sorted(p.name for p in folder.iterdir()) == ["saved.pt", "solution.py"]
    assert list(outside.iterdir()) == [] and old.read_text() == "before\nappended\n"
