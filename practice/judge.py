"""The local judge for the practice problems: run each problem's cases against your solution.

    python practice/judge.py                          every problem: practice/<problem>/solution.py
    python practice/judge.py 113                      one problem (number, folder name or slug)
    python practice/judge.py 115 --solution ring.py   a file holds ONE problem's functions
    python practice/judge.py --solution practice/reference/113_ddp_buckets   one problem's folder
    python practice/judge.py --solution practice/reference   a folder laid out like practice/

Every case prints PASS or FAIL; a failure shows the case's inputs, what was expected, what came back
and a hint into the problem's README, chosen by the check that failed. A case runs in a temporary
folder of its own, with the solution's folder on its import path; what it writes elsewhere is said
under it (`note:`, and removed when the case made it), and a breakpoint() or input() fails it at
once. Your code runs in processes of its own, one tree per case, all killed when the case ends; the
verdict is reached in the judge's process (judging/engine.py).
Each case has --case-limit-s seconds (a loop that never ends is stopped and reported); on real gloo
ranks a rank waits at most half of it in one collective, and the case gets 3 s more for the
launcher to name a rank that stopped responding. Exit status: 0 when every case of the chosen
problems passes, 1 when some fail, 2 for a usage error, 130 on Ctrl-C, 143 on SIGTERM.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import stat
import time
from typing import TYPE_CHECKING, Any

sys.path.insert(1, str(Path(__file__).resolve().parent))   # the judge's own package, judging/

from common.cli import make_parser
from common.error_types import UsageError
from common.output_files import write_json
from common.script_end import run_main
from common.text import wrap
from judging import PROBLEMS, Problem
from judging.messages import NOT_WRITTEN

if TYPE_CHECKING:
    from judging.engine import CaseResult, ProblemRun

PRACTICE = Path(__file__).resolve().parent
DEFAULT_LIMIT_S = 10.0   # a case takes well under a second here; 10 s means "stuck"


def choose(names: list[str]) -> list[Problem]:
    """Problems by number ('113'), folder ('113_ddp_buckets', also as a path) or slug ('ddp_buckets');
    none named: an empty list (every problem, unless --solution says which)."""
    chosen: list[Problem] = []
    for name in names:
        key = Path(name.rstrip("/")).name
        match = [p for p in PROBLEMS if key in (p.number, p.slug, p.folder)]
        if not match:
            known = ", ".join(p.folder for p in PROBLEMS)
            raise UsageError(f"no problem {name!r} (known: {known})")
        if match[0] not in chosen:
            chosen.append(match[0])
    return chosen


def _problem_of_folder(folder: Path) -> Problem | None:
    return next((p for p in PROBLEMS if p.folder == folder.name), None)


def _belongs_elsewhere(given: str, owner: Problem | None, problems: list[Problem], what: str) -> None:
    """Refuse one problem's folder, or a file in it, named for other problems: its folder says
    which problem it holds."""
    if owner is not None and problems and problems != [owner]:
        named = " and ".join(p.number for p in problems)
        raise UsageError(f"--solution {given} is {what} {owner.number}'s folder, so it is judged as "
                         f"{owner.number} only: name {owner.number} (or no problem), not {named}")


def _one_file(problems: list[Problem], given: str, path: Path, what: str) -> dict[str, Path]:
    """A single file (or one problem's folder): for the one problem named, or the folder's problem."""
    owner = _problem_of_folder(path.parent)
    _belongs_elsewhere(given, owner, problems, what)
    if len(problems) > 1:
        raise UsageError(f"--solution {given} holds one problem's functions: name one problem, not "
                         f"{len(problems)} ({', '.join(p.number for p in problems)})")
    if not problems and owner is None:
        raise UsageError(f"--solution {given} holds one problem's functions: name the problem "
                         f"(e.g. python practice/judge.py 113 --solution {given})")
    return {(problems or [owner])[0].number: path}


def _not_a_file(path: Path) -> str:
    """Why a path that is no regular file nor folder cannot be a solution, in a few words."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "no such file or folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a file: the judge reads a .py file"
    return f"a {'socket' if stat.S_ISSOCK(mode) else 'device'}, not a file: the judge reads a .py file"


def solution_files(names: list[str], given: str | None) -> tuple[list[Problem], dict[str, Path]]:
    """The problems to judge and the file each one's cases load: practice/<folder>/solution.py
    unless --solution names a file, one problem's folder, or a folder laid out like practice/."""
    problems = choose(names)
    if given is None:
        problems = problems or list(PROBLEMS)
        return problems, {p.number: PRACTICE / p.folder / "solution.py" for p in problems}
    if not given:                 # Path("") would be ".", the folder the judge runs in
        raise UsageError("--solution is empty: give a .py file, one problem's folder or a folder laid out "
                         "like practice/")
    path = Path(given)
    if path.is_dir() and (path / "solution.py").is_file():          # one problem's folder
        files = _one_file(problems, given, path / "solution.py", "problem")
        return [p for p in PROBLEMS if p.number in files], files
    if path.is_dir():
        problems = problems or list(PROBLEMS)
        files = {p.number: path / p.folder / "solution.py" for p in problems}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise UsageError(f"--solution {given}: a folder laid out like practice/ needs {missing[0]}")
        return problems, files
    if not path.is_file():
        raise UsageError(f"--solution {given}: {_not_a_file(path)}")
    if path.suffix != ".py":
        raise UsageError(f"--solution {given}: not a .py file")
    files = _one_file(problems, given, path, "a file in problem")
    return [p for p in PROBLEMS if p.number in files], files


def secs(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds:.2f} s"


def shown_path(path: Path) -> str:
    """The file relative to here; a long path by its last three parts (a line stays <= 100 columns)."""
    try:
        text = str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        text = str(path)
    return text if len(text) <= 80 else "…/" + "/".join(path.parts[-3:])[-78:]


def print_case(index: int, result: CaseResult) -> None:
    status = "PASS" if result.passed else "NOT RUN" if result.message.startswith("not run") else "FAIL"
    print(wrap(result.case, " " * 12, f"  {status:<7} {index:2d} "))
    for note in result.notes:        # files written outside the case's folder: said, pass or fail
        print(wrap(note, " " * 18, " " * 12 + "note: "))
    if result.passed or status == "NOT RUN":
        return
    stub = result.message.startswith(NOT_WRITTEN)      # the message says it all
    for label, text in (("", result.message), ("inputs:   ", "" if stub else result.inputs),
                        ("expected: ", result.expected), ("got:      ", result.got),
                        ("hint:     ", "" if stub else result.hint)):
        if text:
            print(wrap(text, " " * (12 + len(label)), " " * 12 + label))
    if result.output:
        print(wrap("it printed (last lines):", " " * 12))
        for line in result.output.splitlines():
            print(" " * 14 + line[:86])


def judge_problem(problem: Problem, path: Path, quick: bool, limit_s: float) -> ProblemRun:
    """One problem's cases, printed as they are judged; a file that does not load is said once."""
    from judging.engine import run_problem

    module = problem.cases()
    cases = [c for c in module.CASES if c.quick or not quick]
    print(wrap(f"{problem.number} {problem.title}  [{shown_path(path)}]", "    ", "\n"))
    run = run_problem(problem.number, module, cases, path, limit_s)
    if run.error:
        print(wrap(run.error, " " * 12, "  could not load the file: "))
        print(wrap(f"its {len(cases)} cases did not run (counted as failed)", " " * 12, " " * 12))
    for index, result in enumerate(run.results, 1):
        print_case(index, result)
    passed = sum(r.passed for r in run.results)
    print(f"  -> {problem.number}: {passed} of {len(run.results)} cases passed ({secs(run.seconds)})")
    return run


def parse_args() -> Any:
    parser = make_parser(__doc__, case_limit_s=DEFAULT_LIMIT_S, help_for={
        "quick": "only the quick cases (every problem keeps most of its cases)",
        "json": "write every case's verdict (inputs, expected, got, hint, seconds) as JSON to PATH"},
        context={"case_limit_s": "on real ranks a rank waits at most half of it in one collective, and "
                                 "the case is stopped at the limit + 3 s, time to name a rank that hangs"})
    parser.add_argument("problems", nargs="*", metavar="PROBLEM",
                        help="problems to judge: 113, 113_ddp_buckets or ddp_buckets (default: all)")
    parser.add_argument("--solution", metavar="PATH", default=None,
                        help="a .py file with one problem's functions, one problem's folder (holding "
                             "solution.py), or a folder laid out like practice/ "
                             "(<folder>/<problem>/solution.py) (default: practice/<problem>/solution.py)")
    return parser.parse_args()


OTHER_HAND = "not through Python"      # casefolder's words for a change its audit hook did not see


def report(runs: list[tuple[Problem, ProblemRun]], seconds: float, json_path: str | None) -> bool:
    """The summary line, and the --json record; True when every case passed."""
    counts = [(p, sum(r.passed for r in run.results), len(run.results), run) for p, run in runs]
    solved = [p.number for p, passed, total, _ in counts if passed == total]
    cases_passed, cases_total = sum(c[1] for c in counts), sum(c[2] for c in counts)
    results = [r for _, run in runs for r in run.results]
    noted = sum(any(OTHER_HAND not in n for n in r.notes) for r in results)   # through the solution's Python
    seen = sum(bool(r.notes) and all(OTHER_HAND in n for n in r.notes) for r in results)
    if noted:
        cases = f"{noted} cases" if noted != 1 else "1 case"
        print("\n" + wrap(f"warning: {cases} wrote outside the case's temporary folder (the notes above): "
                          "write to a relative path, or under tempfile.gettempdir()", "    ", ""))
    if seen:
        cases = f"{seen} cases" if seen != 1 else "1 case"
        print("\n" + wrap(f"note: files beside the solution changed during {cases}, not through its Python "
                          "(another program, an editor's autosave, or a subprocess of the solution): the "
                          "notes above", "    ", ""))
    print("\n" + wrap(f"summary: {len(solved)} of {len(runs)} problems solved"
                      f"{' (' + ', '.join(solved) + ')' if solved else ''}; {cases_passed} of {cases_total} "
                      f"cases passed; {secs(seconds)} "
                      f"({', '.join(f'{p.number} {secs(run.seconds)}' for p, run in runs)})", "    ", ""))
    if json_path:
        write_json(json_path,
                   {"problems": [{"number": p.number, "folder": p.folder, "passed": passed, "cases": total,
                                             "seconds": run.seconds, "error": run.error}
                                            for p, passed, total, run in counts],
                               "cases": [r.as_dict() for _, run in runs for r in run.results],
                               "all_passed": cases_passed == cases_total})
    return cases_passed == cases_total


def check_machine(problems: list[Problem], quick: bool) -> None:
    """The ranks the chosen cases start, against this machine and COURSE_BACKEND, before any case
    (a case would fail as if the solution were wrong)."""
    from common.error_types import UsageError
    from common.launch import check_backend, max_local_ranks

    sizes = [c.inputs.get("world_size", 1) for p in problems for c in p.cases().CASES
             if isinstance(c.inputs, dict) and (c.quick or not quick)]
    largest = max([int(n) for n in sizes if isinstance(n, int)], default=1)
    limit, why = max_local_ranks()
    if largest > limit:
        raise UsageError(f"the cases chosen start up to {largest} ranks, more than this machine runs at once "
                         f"(at most {limit}: {why}); set COURSE_MAX_RANKS to raise the limit")
    check_backend(largest, os.environ.get("COURSE_BACKEND") or "gloo")


def main() -> None:
    args = parse_args()
    problems, files = solution_files(args.problems, args.solution)
    # torch only now, after the usage checks (those answer at once): imported once here, every
    # case's processes are then forked with it loaded.
    import torch

    torch.set_num_threads(1)   # before any tensor op: a fork after an OpenMP team has run can hang
    from judging import engine, ranks

    check_machine(problems, args.quick)
    engine.take_charge()
    ranks.RANK_TIMEOUT_S = ranks.collective_wait_s(args.case_limit_s)
    began = time.perf_counter()
    print(f"practice judge: {len(problems)} problem{'s' if len(problems) != 1 else ''}, "
          f"{args.case_limit_s:g} s per case{' (--quick: the quick cases only)' if args.quick else ''}")
    for problem in problems:   # what every rank would import on its own (torch.optim: ~1 s), once here
        getattr(problem.cases(), "prepare", lambda: None)()
    runs = [(p, judge_problem(p, files[p.number], args.quick, args.case_limit_s)) for p in problems]
    if not report(runs, time.perf_counter() - began, args.json):
        sys.exit(1)


if __name__ == "__main__":
    run_main(main)
