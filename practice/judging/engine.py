"""The judge's engine: run a problem's cases against a student's file, each case in a time limit.

    results, seconds = run_problem(problem, solution_path, limit_s=10.0)

One child process per problem (forked from the judge, so torch is already imported) loads the
student's file and runs the cases one after another, reporting each over a pipe. The parent holds
the clock: a case that runs past its limit gets its child killed (with any ranks it started: the
launcher's ranks die with their parent) and is reported "timed out"; a case whose code ends the
process (sys.exit, os._exit, a crash) is reported as such; the remaining cases then run in a fresh
child. Whatever happens, a case comes back as a `CaseResult`: never a traceback from the judge.

A case is a function `run(solution)` that calls the student's functions, compares with the
suite's own models and raises `Fail(expected, got, hint)` when they differ.
"""

from __future__ import annotations

import importlib.util
import io
import multiprocessing as mp
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from common.launcher import RankError

OUTPUT_LINES = 3    # lines of what a failed case printed that the report shows
TEXT_WIDTH = 88     # expected / got values are cut to this many characters


class Fail(Exception):
    """A case's verdict: the solution returned something other than what the model says."""

    def __init__(self, expected: Any, got: Any, hint: str | None = None) -> None:
        super().__init__(f"expected {expected}, got {got}")
        self.expected, self.got, self.hint = str(expected), str(got), hint


@dataclass(frozen=True)
class Case:
    """One check: `run(solution_module)` returns normally when the solution is right."""

    name: str
    run: Callable[[ModuleType], None]
    hint: str                 # shown when the case fails (points to the README's hints)
    quick: bool = True        # --quick runs only these


@dataclass
class CaseResult:
    problem: str
    case: str
    passed: bool
    seconds: float
    message: str = ""         # why it failed, one line (not implemented, timed out, an error)
    expected: str = ""
    got: str = ""
    hint: str = ""
    output: str = ""          # the last lines the solution printed, for a failed case

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SolutionError(Exception):
    """The student's file could not be loaded: one line saying why and where."""


# ---- loading the student's file ------------------------------------------------------------------
def load_solution(path: Path) -> ModuleType:
    """Import the file at `path` as a fresh module; a failure is one SolutionError line."""
    name = f"student_{path.parent.name}_{path.stem}".replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SolutionError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        raise SolutionError(f"{path.name} line {err.lineno}: SyntaxError: {err.msg}") from None
    except BaseException as err:  # noqa: BLE001 - whatever the file does at import is its failure
        if isinstance(err, KeyboardInterrupt):
            raise
        raise SolutionError(f"importing {path.name} failed: {error_line(err, path)}") from None
    return module


def function(solution: ModuleType, name: str) -> Callable[..., Any]:
    """The student's function `name`, or a Fail that says it is missing."""
    fn = getattr(solution, name, None)
    if not callable(fn):
        raise Fail(f"a function {name}(...) in the solution file", "no such function" if fn is None
                   else f"{name} is a {type(fn).__name__}", f"define {name} with the signature in the README")
    return fn


# ---- describing values and errors in one line -------------------------------------------------------
def show(value: Any, width: int = TEXT_WIDTH) -> str:
    """A value in one line, cut to `width` characters; floats to 6 significant digits."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, (list, tuple)):
            inner = ", ".join(fmt(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {fmt(x)}" for k, x in v.items()) + "}"
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return f"{type(v).__name__} of shape {tuple(v.shape)}, {v.dtype}"
        return repr(v)
    text = " ".join(fmt(value).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def kind(value: Any) -> str:
    """What came back, for wrong-type messages: 'None', 'a str', 'a list of 3 items'."""
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} item{'' if len(value) == 1 else 's'}: {show(value, 60)}"
    return f"a {type(value).__name__}: {show(value, 60)}"


def error_line(err: BaseException, path: Path | None = None, details: str = "") -> str:
    """'ValueError: bad (solution.py:12 in f)': the error and the student's line where it happened."""
    text = " ".join(str(err).split())
    where = ""
    if path is not None:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        if frames:
            where = f" ({path.name}:{frames[-1].lineno} in {frames[-1].name})"
        elif details:
            matches = re.findall(r'File "([^"]*)", line (\d+), in (\S+)', details)
            mine = [m for m in matches if Path(m[0]).name == path.name]
            if mine:
                where = f" ({path.name}:{mine[-1][1]} in {mine[-1][2]})"
        if isinstance(err, SyntaxError):
            where = f" ({path.name}:{err.lineno})"
    return f"{type(err).__name__}: {text}{where}" if text else f"{type(err).__name__}{where}"


def describe_failure(err: BaseException, path: Path) -> str:
    """A case's exception as the one line the report shows."""
    if isinstance(err, NotImplementedError):
        return f"not implemented: {' '.join(str(err).split()) or 'NotImplementedError'}"
    if isinstance(err, RankError):
        text = str(err)
        if "NotImplementedError" in text:
            text = re.sub(r"\s*\(then rank[^)]*failed too\)", "", text.split("NotImplementedError:", 1)[1])
            return "not implemented: " + text.strip()
        match = re.findall(r'File "([^"]*)", line (\d+), in (\S+)', err.details or "")
        mine = [m for m in match if Path(m[0]).name == path.name]
        return text + (f" ({path.name}:{mine[-1][1]} in {mine[-1][2]})" if mine else "")
    if isinstance(err, SystemExit):
        return f"the solution called sys.exit({err.code!r}): a function must return, not end the process"
    return f"the solution raised {error_line(err, path)}"


# ---- the child: one problem's cases --------------------------------------------------------------
def _child_main(cases: list[Case], solution_path: Path, start: int, conn: Any) -> None:
    """Load the solution, run cases[start:], report ("start", i), ("result", i, ...) per case."""
    import torch

    torch.set_num_threads(1)  # ranks are forked from here: no OpenMP team before the fork
    capture = tempfile.TemporaryFile()
    os.dup2(capture.fileno(), 1)   # what the solution (and its ranks) print goes to a file, not
    os.dup2(capture.fileno(), 2)   # between the judge's lines; failed cases show its last lines
    sys.stdout = sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), write_through=True)
    try:
        try:
            solution = load_solution(solution_path)
        except SolutionError as err:
            conn.send(("import_error", str(err)))
            return
        for index in range(start, len(cases)):
            case = cases[index]
            conn.send(("start", index))
            capture.seek(0)
            capture.truncate()
            began = time.perf_counter()
            outcome: dict[str, Any] = {"passed": True}
            try:
                case.run(solution)
            except Fail as verdict:
                outcome = {"passed": False, "expected": verdict.expected, "got": verdict.got,
                           "hint": verdict.hint or case.hint}
            except KeyboardInterrupt:
                raise
            except BaseException as err:  # noqa: BLE001 - the solution's failure is the case's verdict
                outcome = {"passed": False, "message": describe_failure(err, solution_path), "hint": case.hint}
            outcome["seconds"] = time.perf_counter() - began
            if not outcome["passed"]:
                sys.stdout.flush()
                capture.seek(0)
                lines = [ln for ln in capture.read().decode("utf-8", "replace").splitlines() if ln.strip()]
                outcome["output"] = "\n".join(ln[:TEXT_WIDTH] for ln in lines[-OUTPUT_LINES:])
            conn.send(("result", index, outcome))
    except KeyboardInterrupt:
        pass
    finally:
        conn.close()
        os._exit(0)   # no atexit handlers of the solution, no flushing of its buffers


def run_problem(problem: str, cases: list[Case], solution_path: Path, limit_s: float) -> tuple[list[CaseResult], float]:
    """Every case of one problem against the file at `solution_path`; (results, wall seconds)."""
    began = time.perf_counter()
    results: list[CaseResult] = []

    def failed(index: int, message: str, seconds: float = 0.0) -> None:
        results.append(CaseResult(problem, cases[index].name, False, seconds, message=message, hint=cases[index].hint))

    ctx = mp.get_context("fork")
    start = 0
    while start < len(cases):
        receiver, sender = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child_main, args=(cases, solution_path, start, sender), daemon=False)
        child.start()
        sender.close()
        current, case_began = None, time.perf_counter()
        try:
            while True:
                left = limit_s - (time.perf_counter() - case_began)
                if not receiver.poll(max(0.0, left)):
                    what = cases[current].name if current is not None else None
                    message = (f"timed out after {limit_s:g} s (stopped by the judge): an endless loop, or a "
                               "rank waiting for a message nobody sends?") if what else \
                        f"importing {solution_path.name} took more than {limit_s:g} s"
                    if current is None:   # the import hung: every remaining case fails
                        for i in range(start, len(cases)):
                            failed(i, message)
                        start = len(cases)
                    else:
                        failed(current, message, limit_s)
                        start = current + 1
                    break
                try:
                    message = receiver.recv()
                except (EOFError, OSError):   # the child is gone without a word
                    child.join(1.0)
                    code = child.exitcode
                    if current is None:
                        for i in range(start, len(cases)):
                            failed(i, f"loading {solution_path.name} ended the process (exit code {code})")
                        start = len(cases)
                    else:
                        failed(current, f"the solution ended the process (exit code {code}: sys.exit in a "
                                        "forked rank, os._exit, or a crash)", time.perf_counter() - case_began)
                        start = current + 1
                    break
                if message[0] == "import_error":
                    for i in range(start, len(cases)):
                        failed(i, message[1])
                    start = len(cases)
                    break
                if message[0] == "start":
                    current, case_began = message[1], time.perf_counter()
                elif message[0] == "result":
                    outcome = message[2]
                    results.append(CaseResult(problem, cases[message[1]].name, **outcome))
                    current = None
                    start = message[1] + 1
                    case_began = time.perf_counter()
                    if start == len(cases):
                        break
        finally:
            if child.is_alive():
                child.kill()
            child.join(2.0)
            receiver.close()
    return results, time.perf_counter() - began
