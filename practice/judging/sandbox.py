"""The two processes below the judge for one case: the keeper, and the solution's process under it.

    judge ── keeper (own session, subreaper, dies with the judge) ── solution's process ── ranks …

The keeper forks the solution's process, relays what it reports, and when it has ended (exit,
crash, os._exit) kills everything left below it: forks, daemons, ranks. Only the keeper talks to
the judge: the solution's process gets a pipe to the keeper and nothing of the judge's, so its forks
cannot hold the judge waiting, and `os.kill(os.getppid(), …)` hits the keeper, never the judge.
Before it loads the student's file, the solution's process moves into the case's folder
(judging.casefolder) and refuses input: breakpoint(), input(), pdb.set_trace() and reads of
sys.stdin raise AskedForInput at once, naming the call and the student's line, where a terminal
would wait for a key nobody presses and the case would time out as a "deadlock".

Keeper -> judge, one pipe: b"L" as soon as the solution's file is loaded, then one line of JSON
{"exit_code": …} (negative: killed by that signal), then the bytes the solution's process reported
(plain.dumps of {"data": …}, {"fail": …}, {"error": …} or {"import_error": …}).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import resource
import select
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from common.output_files import _write_all
from common.script_end import ENDING_SIGNALS
from judging import plain, procs
from judging.messages import describe_failure, error_line, kind

if TYPE_CHECKING:
    from judging.casefolder import CaseFolder
    from judging.engine import Case

LOADED = b"L"
MAX_REPORT_BYTES = 64 << 20       # more than any case sends; a runaway report is cut, then unreadable
OUTPUT_LIMIT_BYTES = 16 << 20     # what a case may print (its file, and any other file it writes)


class AskedForInput(BaseException):
    """The solution waited for input (breakpoint(), input(), pdb, sys.stdin): the judge gives none.
    A BaseException, so an `except Exception` in the solution does not swallow it."""


def _asked(what: str, path: Path) -> AskedForInput:
    """What asked for input, and the student's line that did: found on the stack now, because
    pdb asks from a trace function, whose traceback does not reach the student's frame."""
    frame = sys._getframe(1)
    while frame is not None and Path(frame.f_code.co_filename) != path:
        frame = frame.f_back
    where = f" ({path.name}:{frame.f_lineno} in {frame.f_code.co_name})" if frame is not None else ""
    return AskedForInput(what + where)


class _NoInput(io.TextIOBase):
    """sys.stdin in the solution's process: any read says at once what asked for input."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        raise _asked("read sys.stdin", self.path)

    def readline(self, size: int | None = -1) -> str:   # type: ignore[override]
        raise _asked("read sys.stdin", self.path)


def _refuse_input(path: Path) -> None:
    """breakpoint(), input(), pdb and reads of sys.stdin raise AskedForInput at once, whatever stdin
    was (a terminal would wait for a key the student never presses, a pipe would give EOF); file
    descriptor 0 reads /dev/null, so C code that reads it gets end of file, not a wait."""
    import builtins

    def asked(what: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise _asked(what, path)
        return refuse
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = _NoInput(path)
    builtins.input = asked("called input() or pdb")
    sys.breakpointhook = asked("called breakpoint()")
    if "pdb" in sys.modules:         # the judge imported it (engine.take_charge): its line, not the next
        sys.modules["pdb"].set_trace = asked("called pdb.set_trace()")


class SolutionError(Exception):
    """The student's file could not be loaded: one line saying why and where."""


class Fail(Exception):
    """A case's verdict: what the suite's model expected, what came back, and a hint. Raised by a
    case's `check` in the judge's process (and by `function` when the file lacks a function)."""

    def __init__(self, expected: Any, got: Any, hint: str | None = None, inputs: Any = None) -> None:
        super().__init__(f"expected {expected}, got {got}")
        self.expected, self.got, self.hint, self.inputs = expected, got, hint, inputs


# ---- in the solution's process ----------------------------------------------------------------------
def load_solution(path: Path) -> ModuleType:
    """Import the file at `path` as a fresh module; a failure is one SolutionError line."""
    source = path.read_bytes()
    if b"\0" in source:   # Python's own message has no line number ("line None")
        line = source[:source.index(b"\0")].count(b"\n") + 1
        raise SolutionError(f"{path.name} line {line}: the file contains a null byte (\\0); "
                            "save it as plain UTF-8 text")
    name = f"student_{path.parent.name}_{path.stem}".replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SolutionError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        where = f" line {err.lineno}" if err.lineno else ""
        raise SolutionError(f"{path.name}{where}: SyntaxError: {err.msg}") from None
    except BaseException as err:  # noqa: BLE001 - whatever the file does at import is its failure
        raise SolutionError(f"importing {path.name} failed: {error_line(err, path)}") from None
    return module


def function(solution: ModuleType, name: str) -> Callable[..., Any]:
    """The student's function `name`, or a Fail that says it is missing."""
    fn = getattr(solution, name, None)
    if not callable(fn):
        raise Fail(f"a function {name}(...) in the solution file", "no such function" if fn is None
                   else f"{name} is {kind(fn)}", f"define {name} with the signature in the README")
    return fn


def call(solution: ModuleType, name: str, *args: Any) -> dict[str, Any]:
    """Call the student's `name`(*args); what it returned, and the arguments as they are afterwards
    (the judge compares those with what it sent: a function must not change its caller's lists)."""
    returned = function(solution, name)(*args)
    return {"returned": returned, "args": list(args)}


def _redirect_output(capture_fd: int) -> None:
    """What the solution (and its ranks) print goes to the case's file, not between the judge's lines.
    The file is a regular one so that the kernel's file size limit can bound it: a print loop fills
    16 MiB, then every write fails (EFBIG; Python ignores SIGXFSZ), instead of filling the disk.
    Soft and hard limit alike, so the solution cannot raise it (short of being root)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
    os.dup2(capture_fd, 1)
    os.dup2(capture_fd, 2)
    sys.stdout = sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), write_through=True)


def report(case: Case, solution: ModuleType, path: Path) -> dict[str, Any]:
    """Run the case's collect on the loaded solution: {"data": …}, or why there is none."""
    from judging import ranks

    ranks.SOLUTION = solution                   # the ranks forked from here find it loaded
    try:
        return {"data": case.collect(solution, case.inputs)}
    except Fail as fail:
        return {"fail": {"expected": fail.expected, "got": fail.got, "hint": fail.hint}}
    except BaseException as err:  # noqa: BLE001 - the solution's failure is the case's verdict
        return {"error": describe_failure(err, path)}


def _solution_main(case: Case, folder: CaseFolder, report_fd: int) -> None:
    """Load the student's file, run the case's collect, report (the caller exits)."""
    path = folder.solution
    try:
        folder.enter()
    except OSError as err:            # the judge's own failure: said as the case's error
        _write_all(report_fd, LOADED + plain.dumps({"error": f"the judge could not prepare the case's folder "
                                                              f"({type(err).__name__}: {err})"}))
        return
    _refuse_input(path)
    try:
        solution = load_solution(path)
    except SolutionError as err:
        _write_all(report_fd, plain.dumps({"import_error": str(err)}))
        return
    _write_all(report_fd, LOADED)
    try:
        data = plain.dumps(report(case, solution, path))
    except Exception as err:  # noqa: BLE001 - a value no encoder expected
        data = plain.dumps({"error": f"what came back could not be sent to the judge ({type(err).__name__})"})
    with contextlib.suppress(OSError):     # past the output limit the last print cannot be written
        sys.stdout.flush()
    _write_all(report_fd, data)


# ---- the keeper ------------------------------------------------------------------------------------------
def _relay(read_fd: int, pid: int, judge_fd: int) -> tuple[bytes, int]:
    """Read the solution's report until the process has ended (its exit, not the pipe's end: a fork
    may hold the pipe open); pass LOADED on at once. Returns (report, exit code)."""
    report, watch = bytearray(), [read_fd]
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    while True:
        ready, _, _ = select.select(watch + ([pidfd] if pidfd is not None else []), [], [], 0.05)
        if read_fd in ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                watch = []
            elif len(report) < MAX_REPORT_BYTES:
                if not report and chunk.startswith(LOADED):
                    os.write(judge_fd, LOADED)
                    chunk = chunk[1:]
                report += chunk
        ended, status = os.waitpid(pid, os.WNOHANG)   # a pidfd says so at once; without one, we poll
        if ended:
            break
    if pidfd is not None:
        os.close(pidfd)
    os.set_blocking(read_fd, False)
    try:                                  # what it wrote just before it ended
        while (chunk := os.read(read_fd, 1 << 16)) and len(report) < MAX_REPORT_BYTES:
            report += chunk
    except BlockingIOError:
        pass
    return bytes(report), os.waitstatus_to_exitcode(status)


def keeper_main(case: Case, folder: CaseFolder, judge_pid: int, judge_fd: int, capture_fd: int) -> None:
    """Run one case below this process and report it to the judge (never returns)."""
    try:
        procs.kill_tree_on(signal.SIGTERM)    # the judge died or stops the case: the tree goes with us
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the judge's to handle
        signal.signal(signal.SIGHUP, signal.SIG_IGN)    # so is a closed terminal
        signal.pthread_sigmask(signal.SIG_UNBLOCK, ENDING_SIGNALS)   # held by the judge while it forked
        os.setsid()                       # its own session: a terminal's signals reach the judge only
        procs.become_subreaper()          # orphans below (daemons) come back to us, not to init
        procs.die_with_parent(signal.SIGTERM, judge_pid)
        _redirect_output(capture_fd)
        read_fd, write_fd = os.pipe()
        keeper = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_fd)
                os.close(judge_fd)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                procs.die_with_parent(signal.SIGKILL, keeper)
                _solution_main(case, folder, write_fd)
            finally:
                os._exit(0)   # no atexit handlers of the solution, no flushing of its buffers
        os.close(write_fd)
        report, exit_code = _relay(read_fd, pid, judge_fd)
        procs.kill_tree()          # before the judge hears of it: nothing of the case outlives its report
        header = json.dumps({"exit_code": exit_code}).encode()
        _write_all(judge_fd, header + b"\n" + report)
    except BaseException as err:  # noqa: BLE001 - the keeper's own failure is reported, not raised
        try:
            _write_all(judge_fd,
                       json.dumps({"keeper_error": f"{type(err).__name__}: {err}"}).encode() + b"\n")
        except OSError:
            pass
    finally:
        os._exit(0)
