"""The local judge for the practice problems: run each problem's cases against your solution.

    python practice/judge.py                          every problem: practice/<problem>/solution.py
    python practice/judge.py 113                      one problem (number, folder name or slug)
    python practice/judge.py 115 --solution ring.py   a file holds ONE problem's functions
    python practice/judge.py --solution practice/reference   a folder laid out like practice/

Every case prints PASS or FAIL; a failure says what was expected, what came back and a hint into
the problem's README. Each case has --case-limit-s seconds (a loop that never ends is stopped and
reported); cases that need ranks run on real gloo processes through common.launcher. Exit status:
0 when every case of the chosen problems passes, 1 when some fail, 2 for a usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import time
from typing import TYPE_CHECKING

sys.path.insert(1, str(Path(__file__).resolve().parent))   # the judge's own package, judging/

from common.cli import UsageError, make_parser, run_main
from common.files import write_json
from common.output import wrap
from judging import PROBLEMS, Problem

if TYPE_CHECKING:
    from judging.engine import CaseResult

PRACTICE = Path(__file__).resolve().parent
DEFAULT_LIMIT_S = 10.0   # a case takes well under a second here; 10 s means "stuck"


def choose(names: list[str]) -> list[Problem]:
    """Problems by number ('113'), folder ('113_ddp_buckets', also as a path) or slug ('ddp_buckets')."""
    if not names:
        return list(PROBLEMS)
    chosen = []
    for name in names:
        key = Path(name.rstrip("/")).name
        match = [p for p in PROBLEMS if key in (p.number, p.slug, p.folder)]
        if not match:
            known = ", ".join(p.folder for p in PROBLEMS)
            raise UsageError(f"no problem {name!r} (known: {known})")
        if match[0] not in chosen:
            chosen.append(match[0])
    return chosen


def solution_files(problems: list[Problem], given: str | None) -> dict[str, Path]:
    """Which file each problem's cases load: practice/<folder>/solution.py unless --solution says."""
    if given is None:
        return {p.number: PRACTICE / p.folder / "solution.py" for p in problems}
    path = Path(given)
    if path.is_dir():
        files = {p.number: path / p.folder / "solution.py" for p in problems}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise UsageError(f"--solution {given}: a folder laid out like practice/ needs {missing[0]}")
        return files
    if not path.is_file():
        raise UsageError(f"--solution {given}: no such file or folder")
    if path.suffix != ".py":
        raise UsageError(f"--solution {given}: not a .py file")
    if len(problems) != 1:
        raise UsageError(f"--solution {given} is one file, for one problem: name it "
                         f"(e.g. python practice/judge.py 113 --solution {given})")
    return {problems[0].number: path}


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
    print(wrap(result.case, " " * 12, f"  {'PASS' if result.passed else 'FAIL'} {index:2d}  "))
    if result.passed:
        return
    hint = "" if result.message.startswith("not implemented") else result.hint  # the message says it all
    for label, text in (("", result.message), ("expected: ", result.expected), ("got:      ", result.got),
                        ("hint:     ", hint)):
        if text:
            print(wrap(text, " " * (12 + len(label)), " " * 12 + label))
    if result.output:
        print(wrap("it printed (last lines):", " " * 12))
        for line in result.output.splitlines():
            print(" " * 14 + line[:86])


def main() -> None:
    parser = make_parser(__doc__, case_limit_s=DEFAULT_LIMIT_S, help_for={
        "quick": "only the quick cases (every problem keeps most of its cases)",
        "json": "write every case's verdict (expected, got, hint, seconds) as JSON to PATH"},
        context={"case_limit_s": "a rank waits at most a quarter of it in one collective"})
    parser.add_argument("problems", nargs="*", metavar="PROBLEM",
                        help="problems to judge: 113, 113_ddp_buckets or ddp_buckets (default: all)")
    parser.add_argument("--solution", metavar="PATH", default=None,
                        help="a .py file with one problem's functions, or a folder laid out like practice/ "
                             "(<folder>/<problem>/solution.py) (default: practice/<problem>/solution.py)")
    args = parser.parse_args()
    problems = choose(args.problems)
    files = solution_files(problems, args.solution)
    # torch only now, after the usage checks (those answer at once): imported once here, every
    # problem's process is then forked with it loaded.
    from judging import ranks
    from judging.engine import run_problem

    ranks.RANK_TIMEOUT_S = max(1.0, args.case_limit_s / 4)   # + the launcher's grace and where-query
    began = time.perf_counter()
    print(f"practice judge: {len(problems)} problem{'s' if len(problems) != 1 else ''}, "
          f"{args.case_limit_s:g} s per case{' (--quick: the quick cases only)' if args.quick else ''}")
    for problem in problems:   # what every rank would import on its own (torch.optim: ~1 s), once here
        getattr(problem.cases(), "prepare", lambda: None)()
    summary, records = [], []
    for problem in problems:
        cases = [c for c in problem.cases().CASES if c.quick or not args.quick]
        print(wrap(f"{problem.number} {problem.title}  [{shown_path(files[problem.number])}]", "    ", "\n"))
        results, seconds = run_problem(problem.number, cases, files[problem.number], args.case_limit_s)
        for index, result in enumerate(results, 1):
            print_case(index, result)
        passed = sum(r.passed for r in results)
        print(f"  -> {problem.number}: {passed} of {len(results)} cases passed ({secs(seconds)})")
        summary.append((problem, passed, len(results), seconds))
        records += [r.as_dict() for r in results]
    solved = [p.number for p, passed, total, _ in summary if passed == total]
    cases_passed, cases_total = sum(s[1] for s in summary), sum(s[2] for s in summary)
    print("\n" + wrap(f"summary: {len(solved)} of {len(problems)} problems solved"
                      f"{' (' + ', '.join(solved) + ')' if solved else ''}; {cases_passed} of {cases_total} "
                      f"cases passed; {secs(time.perf_counter() - began)} "
                      f"({', '.join(f'{p.number} {secs(s)}' for p, _, _, s in summary)})", "    ", ""))
    if args.json:
        write_json(args.json, {"problems": [{"number": p.number, "folder": p.folder, "passed": passed,
                                             "cases": total, "seconds": s} for p, passed, total, s in summary],
                               "cases": records, "all_passed": cases_passed == cases_total})
    if cases_passed != cases_total:
        sys.exit(1)


if __name__ == "__main__":
    run_main(main)
