"""The runtime as a user meets it: usage errors before any work, output paths checked and files
written whole, a closed pipe and Ctrl-C ending quietly, one meaning per flag, readable output."""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, load_script, popen, python

from common import cli, flags
from common.launch import machine
from common.output import Report
from common.output_files import write_json
from common.units import fmt_num
from reproduction.suite import Script, scripts

REAL = "lecture14/02_primitives.py"     # starts ranks; default run a couple of seconds
MODEL = "lecture15/03_overlap.py"       # model only, draws figures


def _usage_error_before_any_work(relpath: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = python(ROOT / "code" / relpath, *args, timeout=60, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == "", "the script started work before it checked its input"
    return lines[0]


@pytest.mark.parametrize("env, args, says", [
    ({"COURSE_BACKEND": "nccl"}, (), "backend nccl needs a GPU per rank"),
    ({"COURSE_BACKEND": "mpi2"}, (), "unknown backend 'mpi2'"),
    ({}, ("--timeout-s", "0.01"), "--timeout-s"),
    ({}, ("--timeout-s", "1e9"), "--timeout-s"),
    ({}, ("--world-size", "1000"), "at most"),
    ({"COURSE_MAX_RANKS": "2"}, ("--world-size", "3"), "COURSE_MAX_RANKS"),
    # garbage in the override is refused, naming the variable (it was ignored: the machine's limit held)
    ({"COURSE_MAX_RANKS": "abc"}, (), "COURSE_MAX_RANKS='abc' is not a number of ranks"),
    ({"COURSE_MAX_RANKS": "0"}, (), "COURSE_MAX_RANKS='0'"),
    ({"COURSE_MAX_RANKS": "-1"}, (), "COURSE_MAX_RANKS='-1'"),
    ({"COURSE_MAX_RANKS": "1e3"}, (), "COURSE_MAX_RANKS='1e3'"),
])
def test_real_scripts_refuse_what_this_machine_cannot_run(env: dict, args: tuple, says: str) -> None:
    if env.get("COURSE_BACKEND") == "nccl":
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has GPUs")
    assert says in _usage_error_before_any_work(REAL, *args, env=env)


def test_the_world_size_limit_says_why() -> None:
    limit, why = machine.max_local_ranks()
    assert 1 <= limit and why
    message = _usage_error_before_any_work(REAL, "--world-size", str(limit + 1))
    assert f"at most {limit}" in message and "torchrun" in message


def test_model_world_sizes_are_bounded() -> None:
    assert "4,096" in _usage_error_before_any_work(MODEL, "--world-size", "100000")


@pytest.mark.parametrize("flag, make, says", [
    ("--json", lambda d: d, "is a folder"),
    ("--json", lambda d: d / "file.txt" / "out.json", "is a file, not a folder"),
    ("--json", lambda d: Path("/proc/out.json"), "cannot write"),
    ("--json", lambda d: Path("/proc/nope/out.json"), "no such folder"),
    ("--save-figs", lambda d: d / "file.txt", "is a file; give a folder"),
])
def test_output_paths_are_checked_before_the_run(tmp_path: Path, flag: str, make, says: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    assert says in _usage_error_before_any_work(MODEL, flag, str(make(tmp_path)))


def test_files_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_json(str(target), {"a": 1})

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("cannot be written")

    with pytest.raises(RuntimeError):
        write_json(str(target), {"a": 2, "b": Unprintable()})
    assert json.loads(target.read_text()) == {"a": 1}          # the old file, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600


def test_json_is_strict_and_numbers_stay_readable(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = argparse.Namespace(json=str(tmp_path / "o.json"), quick=False, save_figs=None)
    rep = Report("demo.py", "demo", args)
    rep.table(["x"], [[math.inf], [math.nan], [10**300]])
    rep.value("overflowed", math.inf)
    rep.finish()

    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    data = json.loads((tmp_path / "o.json").read_text(), parse_constant=refuse)
    assert next(iter(data["parts"].values()))["values"]["overflowed"] == "inf"
    assert len(fmt_num(10**300)) < 12 and len(fmt_num(-(10**40))) < 12
    assert all(len(line) <= 100 for line in capsys.readouterr().out.splitlines())


@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_interrupted_run_leaves_no_file_and_no_rank(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    proc = popen(ROOT / "code" / "lecture14/04_alpha_beta.py", "--json", out)
    deadline = time.monotonic() + 60
    children: list[str] = []
    while not children and time.monotonic() < deadline:  # interrupt while ranks run (Part 2)
        time.sleep(0.05)
        pgrep = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        children = pgrep.stdout.split()
    assert children, "the script never started its ranks"
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip() == "interrupted", err
    assert list(tmp_path.iterdir()) == []
    time.sleep(0.5)
    assert all(not Path(f"/proc/{c}").exists() or "Z" in Path(f"/proc/{c}/stat").read_text().split()[2]
               for c in children)


CLEANUP_FAILS = """
import os, signal, sys
sys.path.insert(0, {code!r})
from common.script_end import run_main
def main():
    read, write = os.pipe()
    try:
        os.kill(os.getpid(), signal.{sig})   # the signal lands while the run works
    finally:
        os.close(read)
        os.close(read)                       # clean-up then fails: EBADF, as a closed rank pipe gives
run_main(main)
"""


@pytest.mark.parametrize("sig, code, word", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_a_clean_up_that_fails_after_a_signal_ends_as_the_signal(sig: str, code: int, word: str) -> None:
    # CI once saw "OSError: [Errno 9] Bad file descriptor", exit 1, after a Ctrl-C.
    proc = subprocess.run([sys.executable, "-c", CLEANUP_FAILS.format(code=str(ROOT / "code"), sig=sig)],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (code, f"{word}\n")


@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_while_torch_is_still_importing_is_one_word() -> None:
    proc = subprocess.Popen([sys.executable, str(ROOT / "code" / REAL)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until torch's library is loaded, then interrupt at once
        try:
            if "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text():
                break
        except OSError:
            pass
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert out == "", "the interrupt landed after the imports: the test needs an earlier moment"
    assert err.strip() == "interrupted", err
    assert proc.returncode in (130, -signal.SIGINT)


@pytest.mark.timeout(120)
def test_a_closed_pipe_ends_quietly() -> None:
    proc = popen(ROOT / "code" / REAL)  # forked after torch's import (conftest), unbuffered
    assert proc.stdout.readline()  # `| head -1`: read the title, then stop reading
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 141 and err == "", err


# ---- one meaning per flag -----------------------------------------------------------------------

class _Parsed(Exception):
    pass


def _parser_of(relpath: str, monkeypatch: pytest.MonkeyPatch) -> cli.OneLineParser:
    """Build a script's parser as its main() does, without running anything."""
    seen: list[cli.OneLineParser] = []

    def capture(self: cli.OneLineParser, *args: object, **kwargs: object) -> None:
        seen.append(self)
        raise _Parsed

    monkeypatch.setattr(cli.OneLineParser, "parse_args", capture)
    module = load_script(relpath)
    with pytest.raises(_Parsed):
        module.main()
    return seen[0]


SCRIPTS = [s.name for s in scripts()]
UNITLESS = {"lr", "lr_small", "lr_large"}   # a learning rate is a bare number


def test_every_flag_offered_twice_means_one_thing(monkeypatch: pytest.MonkeyPatch) -> None:
    used: dict[str, list[tuple[str, argparse.Action]]] = {}
    for name in SCRIPTS:
        for action in _parser_of(name, monkeypatch)._actions:
            for option in action.option_strings:
                used.setdefault(option, []).append((name, action))
    common_flags = {"-h", "--help", "--quick", "--json", "--save-figs", "--timeout-s"}
    shared = {f"--{n.replace('_', '-')}" for n in flags.FLAGS}
    for option, uses in used.items():
        if len(uses) > 1 and option not in common_flags:
            scripts = [n for n, _ in uses]
            assert option in shared, f"{option} is defined in {scripts}: define it once in flags.FLAGS"
            types = {a.type for _, a in uses}
            dests = {a.dest for _, a in uses}
            assert len(types) == 1 and len(dests) == 1, f"{option} has different rules in {scripts}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_shows_the_description_every_default_and_figures_only_where_drawn(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser_of(name, monkeypatch)
    module = load_script(name)
    assert parser.description == module.__doc__.strip()
    formatter = parser._get_formatter()
    for action in parser._actions:
        # every option that takes a value says its default, None ("not written") included; 02's
        # --bucket-cap-mb, whose help spoke of "the default", hid its value
        if action.option_strings and action.nargs != 0 and action.default != argparse.SUPPRESS:
            assert "(default" in formatter._get_help_string(action), f"{name} {action.option_strings}"
        # a count N, a size BYTES, a time MS: argparse's NAME shouted back only for a unitless number
        if action.option_strings and action.nargs != 0 and action.metavar is None:
            assert action.dest in UNITLESS, f"{name} {action.option_strings}: a metavar that says the unit"
    draws = Script(ROOT / "code" / name).draws
    offers = any("--save-figs" in a.option_strings for a in parser._actions)
    assert draws == offers, f"{name}: draws a figure: {draws}, offers --save-figs: {offers}"


def _quick_overrides(source: str, dests: set[str]) -> list[str]:
    """Where --quick picks a flag's value after parsing: `min(args.steps, 2) if args.quick else
    args.steps`, or `if args.quick:` replacing args.x, or a local read from args.x."""
    def flags_in(node: ast.AST) -> set[str]:
        return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in dests
                and isinstance(n.value, ast.Name) and n.value.id == "args"}

    def reads_quick(node: ast.AST) -> bool:
        return "quick" in {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}

    found = []
    for func in [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]:
        from_flags = {t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and flags_in(n.value)
                      for t in ast.walk(n.targets[0]) if isinstance(t, ast.Name)}
        for node in ast.walk(func):
            if isinstance(node, ast.IfExp) and reads_quick(node.test) and flags_in(node):
                found.append(ast.unparse(node))
            if isinstance(node, ast.If) and reads_quick(node.test):
                for assign in [n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Assign)]:
                    names = {t.id for t in ast.walk(assign.targets[0]) if isinstance(t, ast.Name)}
                    if flags_in(assign.targets[0]) or names & from_flags:
                        found.append(ast.unparse(assign))
    return found


def test_quick_never_overrides_a_flag_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """--quick scales defaults only (make_parser's quick=): no script picks a flag's value by
    args.quick after parsing (`--steps 7 --quick` once ran 2 steps)."""
    old = "steps = min(args.steps, 2) if args.quick else args.steps\nif args.quick:\n    width = 128"
    body = old.replace(chr(10), chr(10) + '    ')
    # The rule finds both forms.
    assert len(_quick_overrides(f"def f(args):\n    width = args.width\n    {body}", {"steps", "width"})) == 2
    for name in SCRIPTS:
        dests = {a.dest for a in _parser_of(name, monkeypatch)._actions} - {"quick", "help"}
        found = _quick_overrides((ROOT / "code" / name).read_text(encoding="utf-8"), dests)
        assert not found, f"{name}: --quick overrides a flag after parsing: {found}"


# ---- every script as the instructor runs it -----------------------------------------------------

@pytest.mark.timeout(600)
def test_every_script_runs_fits_the_page_and_keeps_stderr_clean(quick_reproduction: dict) -> None:
    runs = quick_reproduction["runs"]
    assert {r["script"] for r in runs} == set(SCRIPTS)
    problems = []   # every script's, so one script's slip does not hide the next one's
    for run in runs:
        name = run["script"]
        if run["rc"] != 0:
            problems.append(f"{name} exited {run['rc']}: {run['stderr'][-500:]}")
        if run["stderr"] != "":
            problems.append(f"{name} wrote to stderr (a third-party warning?):\n{run['stderr'][-500:]}")
        wide = [line for line in run["stdout"].splitlines() if len(line) > 100]
        if wide:
            problems.append(f"{name}: lines over 100 columns:\n" + "\n".join(wide))
        if re.search(r"Traceback", run["stdout"]):
            problems.append(f"{name} printed a traceback")
    assert not problems, "\n".join(problems)


ENDING = """
import atexit, json, os, sys, threading, time
sys.path.insert(0, {code!r})
from common import script_end
class Teardown:
    def __del__(self):
        os.write(1, b"[modules torn down]")
json.probe = Teardown()   # in a module of its own: only the modules' teardown deletes it
kept = []
def main():
    atexit.register(print, "atexit ran")
    kept.append(open({out!r}, "w"))
    kept[0].write("written, never closed")
    local = open({out!r} + ".local", "w")   # main's own: its frame lives on in a failure's traceback
    local.write("written in main, never closed")
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined"))).start()
    print("printed")
    if {fail}:
        raise script_end.UsageError("bad")
script_end.run_main(main)
"""


@pytest.mark.parametrize("fail", [False, True])
def test_run_main_ends_as_python_does_less_the_modules_teardown(tmp_path: Path, fail: bool) -> None:
    # What a fresh process's end guarantees still holds; only the teardown (about 1 s with torch
    # loaded) is left out. Under cProfile, which writes its profile once the script returns, the
    # script returns (the profile is there) and the same probe sees the teardown.
    outcomes = {}
    for tool in ([], ["-m", "cProfile", "-o", str(tmp_path / "profile")]):
        out = tmp_path / f"{len(tool)}.txt"
        script = tmp_path / "ending.py"
        script.write_text(ENDING.format(code=str(ROOT / "code"), out=str(out), fail=fail), encoding="utf-8")
        proc = subprocess.run([sys.executable, *tool, str(script)], capture_output=True, text=True,
                              timeout=60)
        assert out.read_text() == "written, never closed"
        assert Path(f"{out}.local").read_text() == "written in main, never closed"
        outcomes[bool(tool)] = (proc.returncode, proc.stdout, proc.stderr)
    said = "ending.py: error: bad\n" if fail else ""
    assert outcomes[False] == (2 if fail else 0, "printed\nthread joined\natexit ran\n", said)
    # (cProfile drops the script's exit status: it catches SystemExit)
    assert outcomes[True][1:] == ("printed\nthread joined\natexit ran\n[modules torn down]", said)
    assert (tmp_path / "profile").stat().st_size > 0


def test_python_i_still_reaches_the_prompt_after_run_main(tmp_path: Path) -> None:
    script = tmp_path / "inspect_me.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'code')!r})\n"
                      "from common.script_end import run_main\nanswer = 42\nrun_main(lambda: print('ran'))\n",
                      encoding="utf-8")
    proc = subprocess.run([sys.executable, "-i", str(script)], input="print('prompt', answer)\n",
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["ran", "prompt", "42"], proc
