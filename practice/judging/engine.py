"""The judge's engine: run a problem's cases against a student's file, so that only the judge can
say PASS, every case gets the same clock, and nothing the solution starts outlives its case.

    run = run_problem("113", module, cases, solution_path, limit_s=10.0)   # .results, .seconds, .error

**Cases split in two.** A case has plain, seeded `inputs` (shown when it fails), a `collect(solution,
inputs)` that runs in the solution's process (it calls the student's functions, or launches ranks
whose workers call them) and returns plain data, and a `check(inputs, data)` that runs here, in the
judge's process, and raises `Fail(expected, got, hint)`, the hint chosen by the check that failed
and by what differed (the case's own `hint` is the fallback: for a Fail without one, and for an
error whose words match no entry of the problem's ERROR_HINTS). Whatever the solution patches in
its own process (torch.allclose, the judge's modules) cannot reach a comparison; the data `collect` returns
can be edited there, so rank cases also read the process groups' own operation counts, not only the
counter's records (judging.ranks). What comes back travels as JSON (judging.plain), never as a
pickle, so nothing it sends can run code here, and no report, however malformed, ends the run.

**One process tree per case** (judging.sandbox, judging.procs):

    judge (subreaper) ── keeper (setsid, subreaper, SIGTERM when the judge dies) ── solution's process
                                                               (SIGKILL when the keeper dies) ── ranks

The keeper watches the solution's process end (its pid, not a pipe that a fork may keep open, so an
exit code is reported as it was), relays its report, and kills everything left below it. Then the
judge kills whatever is left below itself: on a pass, a failure or a timeout alike, no process of
the case survives it. A solution that kills its parent kills the keeper, not the judge: its case
fails ("killed the process that ran it") and the next case runs. If the judge is killed, the keeper
gets SIGTERM from the kernel and takes its tree down; SIGTERM to the judge kills its trees and exits
143, Ctrl-C exits 130. The judge itself never imports the student's file. What this costs: two
forks of a process with torch loaded, and their exits, about 40-60 ms of a 2-core machine per case
(problem 113's 17 pure-Python cases: about 1 s, where calling them in one process took 0.05 s).

**Its own folder** (judging.casefolder): the solution's process works in a temporary folder made
for the case, imports from the solution's folder, and records what it writes elsewhere; when the
case is over the judge removes what it created there and says what it touched (CaseResult.notes).
A read of stdin (breakpoint(), input(), pdb) fails the case at once (judging.sandbox).

**Time.** A case has `limit_s` from its fork; one on ranks gets `ranks.RANK_GRACE_S` more, the time
the launcher needs to name a rank that stopped responding (a rank waits at most
`ranks.collective_wait_s(limit_s)` in one collective). Past that the judge kills the tree and says
"timed out". Cases run one after another: two cores are shared with the ranks.
"""

from __future__ import annotations

import json
import os
import select
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Callable

from common import raise_terminated
from common.script_end import signals_held
from judging import plain, procs, ranks, sandbox
from judging.casefolder import CaseFolder
from judging.messages import TEXT_WIDTH, choose_hint, cut, render_pair, show
from judging.sandbox import Fail

__all__ = ["Case", "CaseResult", "ProblemRun", "hint_for", "run_problem", "take_charge", "verdict"]

OUTPUT_LINES = 3    # lines of what a failed case printed that the report shows
OUTPUT_TAIL_BYTES = 64 << 10    # the judge reads only this much of the end of what a case printed
MAX_HEADER_BYTES = 1024     # the keeper's header is a few dozen bytes
MESSAGE_CHARS, HINT_CHARS = 2000, 300   # what the solution's process says is cut to this
NOT_RUN = "not run: the file did not load"
DEFAULT_DEADLOCK_HINT = "every rank must call the same collectives in the same order; a loop must end"


@dataclass(frozen=True)
class Case:
    """One check: collect(solution, inputs) in the solution's process, check(inputs, data) here."""

    name: str
    inputs: dict[str, Any]
    collect: Callable[[ModuleType, dict[str, Any]], Any]
    check: Callable[[dict[str, Any], Any], None]
    hint: str                 # shown when the case fails (points to the README's hints)
    quick: bool = True        # --quick runs only these
    ranks: bool = False       # runs on real ranks: the clock allows the launcher's report


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
    inputs: str = ""          # what the case handed the solution, for a failed case
    notes: list[str] = field(default_factory=list)   # what it wrote outside its folder (judging.casefolder)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProblemRun:
    results: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""           # the file did not load: said once, its cases not run


# ---- the judge's own process --------------------------------------------------------------------------
def take_charge() -> None:
    """Make this process the judge: orphans below it come back to it, SIGTERM takes its trees down."""
    procs.become_subreaper()
    # SIGTERM: the trees down, then raised as run_main's Terminated: the case's folder and a
    # half-written --json are cleaned by the finally blocks (an os._exit here left both)
    procs.kill_tree_on(signal.SIGTERM, raise_terminated)
    # Once here, so that each case's process can replace pdb.set_trace: pdb itself stops at the
    # line AFTER set_trace, the replacement names the line that called it.
    import pdb  # noqa: F401


def _read_until_eof(fd: int, load_deadline: float, deadline: float) -> tuple[bytes, bool]:
    """Everything the keeper writes, until it closes the pipe (ended) or time is up: `load_deadline`
    while the solution's file is not loaded yet, `deadline` once it is."""
    data = bytearray()
    while True:
        left = (deadline if data.startswith(sandbox.LOADED) else load_deadline) - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return bytes(data), False
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return bytes(data), True
        if len(data) <= sandbox.MAX_REPORT_BYTES:
            data += chunk


def _run_tree(case: Case, folder: CaseFolder, limit_s: float, capture: IO[bytes]) -> tuple[bytes, bool]:
    """Fork the case's keeper, read what it says; afterwards nothing below the judge is left."""
    read_fd, write_fd = os.pipe()
    judge = os.getpid()
    # Ctrl-C, SIGTERM, SIGHUP held while forking: one that landed inside fork's own hooks was
    # swallowed ("Exception ignored in _releaseLock") and the judge went on to exit 0. The keeper
    # inherits the mask and lifts it once its own dispositions are set (sandbox.keeper_main).
    with signals_held(mask=True):
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_fd)
                sandbox.keeper_main(case, folder, judge, write_fd, capture.fileno())
            finally:
                os._exit(70)
    os.close(write_fd)
    began = time.monotonic()
    try:
        return _read_until_eof(read_fd, began + limit_s,
                               began + limit_s + (ranks.RANK_GRACE_S if case.ranks else 0.0))
    finally:
        os.close(read_fd)
        procs.kill_tree()   # the keeper's tree, and whatever was re-parented to us


# ---- turning what came back into a verdict -------------------------------------------------------------
def _exit_words(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        return f"the solution's process was killed by {name}"
    return (f"the solution ended its process with exit code {code} before reporting "
            "(os._exit, sys.exit in a forked process, or a crash)")


def verdict(case: Case, report: dict[str, Any]) -> dict[str, Any]:
    """{"passed": True} or the failure's fields, from the solution's report (as plain.loads gives
    it); only the case's `check`, run here, can pass a case."""
    if "data" in report:
        try:
            case.check(case.inputs, report["data"])
        except Fail as fail:
            expected, got = render_pair(fail.expected, fail.got)
            return {"expected": expected, "got": got, "hint": fail.hint or case.hint,
                    "inputs": None if fail.inputs is None else cut(show(fail.inputs))}
        except Exception as err:  # noqa: BLE001 - data no check foresaw is a failure, never a pass
            return {"message": f"what came back is not what the case expects ({type(err).__name__}: "
                               f"{cut(str(err), 60)})"}
        return {"passed": True}
    said = report.get("fail")
    if isinstance(said, dict):    # a missing function, said by the solution's process
        expected, got = render_pair(str(said.get("expected")), str(said.get("got")))
        return {"expected": expected, "got": got, "hint": cut(str(said.get("hint") or case.hint), HINT_CHARS)}
    if "error" in report:
        return {"message": cut(str(report["error"]), MESSAGE_CHARS)}
    return {"message": "the solution's process sent an unreadable report"}


def _header(line: bytes) -> dict[str, Any] | None:
    """The keeper's header line, or None when it is not one the keeper writes: a solution that
    opens the keeper's pipe (through /proc) can write anything before it kills the keeper."""
    try:
        head = json.loads(line.decode()) if 0 < len(line) <= MAX_HEADER_BYTES else None
    except Exception:  # noqa: BLE001 - bytes a solution may have forged: never an error of the judge's
        return None
    if not isinstance(head, dict) or len(head) != 1:
        return None
    value = head.get("exit_code", head.get("keeper_error"))
    if "exit_code" in head and type(value) is int and -256 < value < 256:
        return head
    return head if isinstance(head.get("keeper_error"), str) else None


def _outcome(case: Case, stream: bytes, ended: bool, limit_s: float) -> dict[str, Any]:
    """What the keeper's stream says about the case: a verdict's fields, or why there is none."""
    loaded = stream.startswith(sandbox.LOADED)
    stream = stream[1:] if loaded else stream
    if not ended:
        grace = f" (+ {ranks.RANK_GRACE_S:g} s for the ranks' report)" if case.ranks else ""
        return {"message": f"timed out after {limit_s:g} s{grace}, stopped by the judge: a loop that never "
                           "ends, or ranks waiting for each other?", "loaded": loaded}
    header, _, report = stream.partition(b"\n")
    head = _header(header)
    if head is None:
        return {"message": "the solution killed the process that ran it (the judge's keeper, its parent) or "
                           "wrote to its pipe: a case must only return", "loaded": True}
    if "keeper_error" in head:
        return {"message": f"the judge failed to run the case: {head['keeper_error']}"}
    if not report:
        return {"message": _exit_words(head["exit_code"])}
    try:
        parsed = plain.loads(report)
    except plain.Unreadable as err:
        return {"message": f"the solution's process sent an unreadable report ({err})"}
    if isinstance(parsed, dict) and "import_error" in parsed:
        return {"import_error": str(parsed["import_error"])}
    return verdict(case, parsed if isinstance(parsed, dict) else {})


def hint_for(module: ModuleType, case: Case, message: str) -> str:
    """The hint for a failure that has a message: the problem's deadlock hint, one keyed by the
    error's words, or the case's own."""
    return choose_hint(message, case.hint, getattr(module, "HINT_DEADLOCK", DEFAULT_DEADLOCK_HINT),
                       getattr(module, "ERROR_HINTS", []))


def _printed(capture: IO[bytes]) -> str:
    """The last lines the case printed (from its last 64 KiB: what it printed may be 16 MiB)."""
    size = os.fstat(capture.fileno()).st_size
    capture.seek(max(0, size - OUTPUT_TAIL_BYTES))
    tail = capture.read(OUTPUT_TAIL_BYTES)
    lines = [ln for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    return "\n".join(ln[:TEXT_WIDTH] for ln in lines[-OUTPUT_LINES:])


def _printed_too_much(outcome: dict[str, Any], capture: IO[bytes]) -> dict[str, Any]:
    """The outcome, unless the case printed up to the limit: then that is why it failed (its
    prints failed past it, or made it slow; a right answer beside them does not count)."""
    if os.fstat(capture.fileno()).st_size < sandbox.OUTPUT_LIMIT_BYTES:
        return outcome
    words = (f"printed {sandbox.OUTPUT_LIMIT_BYTES >> 20} MiB, the most a case may print (a print past it "
             "fails with OSError: File too large)")
    if "import_error" in outcome or outcome.get("loaded") is False:
        return {"import_error": f"importing the file {words}"}
    return {"message": f"the solution {words}: print less, and never in an endless loop"}


def _result(problem: str, module: ModuleType, case: Case, outcome: dict[str, Any], seconds: float,
            capture: IO[bytes]) -> CaseResult:
    """The case's line in the report, from its outcome."""
    if outcome.get("passed"):
        return CaseResult(problem, case.name, True, seconds)
    message = outcome.get("message", "")
    return CaseResult(problem, case.name, False, seconds, message=message,
                      expected=outcome.get("expected", ""),
                      got=outcome.get("got", ""), hint=outcome.get("hint") or hint_for(module, case, message),
                      output=_printed(capture), inputs=outcome.get("inputs") or cut(show(case.inputs)))


def _judge_failed(problem: str, case: Case, seconds: float, err: Exception) -> CaseResult:
    """A case the judge itself could not judge: failed, saying so, and the run goes on."""
    return CaseResult(problem, case.name, False, seconds, hint=case.hint, inputs=cut(show(case.inputs)),
                      message=f"the judge failed on this case ({type(err).__name__}: {cut(str(err), 80)}); "
                              "please report it")


def _judge_one(problem: str, module: ModuleType, case: Case, solution_path: Path, limit_s: float,
               capture: IO[bytes]) -> tuple[CaseResult, str]:
    """One case in its own folder: its result, and why the file did not load ('' when it did)."""
    capture.seek(0)
    capture.truncate()
    began, folder, error = time.perf_counter(), None, ""
    try:
        with signals_held():   # made and known together: a signal in between left it (1 run in 300)
            folder = CaseFolder.make(solution_path.resolve())
        outcome = _outcome(case, *_run_tree(case, folder, limit_s, capture), limit_s)
        outcome = _printed_too_much(outcome, capture)
        if "import_error" in outcome or outcome.get("loaded") is False:
            error = (outcome.get("import_error")
                     or f"importing {solution_path.name} took more than {limit_s:g} s")
            result = CaseResult(problem, case.name, False, 0.0, message=NOT_RUN)
        else:
            result = _result(problem, module, case, outcome, time.perf_counter() - began, capture)
    except Exception as err:  # noqa: BLE001 - the judge's own failure costs one case, not the run
        result = _judge_failed(problem, case, time.perf_counter() - began, err)
    finally:   # interrupted too (Ctrl-C, SIGTERM): the case's folder goes, what it wrote is said
        with signals_held():
            notes = folder.settle() if folder is not None else []
    result.notes = notes
    return result, error


def run_problem(problem: str, module: ModuleType, cases: list[Case], solution_path: Path,
                limit_s: float) -> ProblemRun:
    """Every case of one problem against the file at `solution_path`, one after another."""
    run, began = ProblemRun(), time.perf_counter()
    with tempfile.TemporaryFile() as capture:
        for index, case in enumerate(cases):
            result, run.error = _judge_one(problem, module, case, solution_path, limit_s, capture)
            run.results.append(result)
            if run.error:
                run.results += [CaseResult(problem, c.name, False, 0.0, message=NOT_RUN)
                                for c in cases[index + 1:]]
                break
    run.seconds = time.perf_counter() - began
    return run
