"""Reproduce every number in the notes: run each script, then list every claim with its status.

    python code/reproduce.py            # all scripts, default arguments (a minute or two)
    python code/reproduce.py --quick    # the same, shorter runs (what CI smoke-tests)
    python code/reproduce.py --report out/report   # the pages somewhere else (default: report/)

It also writes the reproduction as pages: report/index.html (every script, part, table, figure and
claim with its full reason, the notes' errors listed; self-contained, open it from disk),
report/report.md, report/timeline.html, the DDP overlap timeline to play with,
report/memory.html, the memory ledger with ZeRO, TP and PP to play with, and
report/pipeline.html, the pipeline schedules (GPipe, 1F1B, interleaved) to play with.

Each script writes its parts and claims with --json; this collects them: a count by status, then
every claim that does not simply agree — differs (with the whole reason the script gives), other
machine (a timing measured here against one measured elsewhere), ours only. A line per script
says which one runs, n of N, and the time so far. Exit status 1 if any script failed.
--json PATH keeps every claim and each script's own output (stdout, stderr and its --json).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import contextlib
import json
import os
import threading
import time
from typing import Any, Callable

from common import verdicts
from common.cli import make_parser
from common.error_types import UsageError
from common.leftovers import owned_folder
from common.output_files import make_output_dir, write_json
from common.output_paths import check_output_dir
from common.script_end import run_main
from common.text import wrap
from reproduction import errata
from reproduction.lanes import Lanes, Turns
from reproduction.suite import Script, named_by, scripts


def command(script: Script, json_path: Path, quick: bool, figure_dir: Path | None) -> list[str]:
    """The script as a student would run it, with --json (and --save-figs where it draws, when the
    pages want its figures)."""
    args = [sys.executable, str(script.path), "--json", str(json_path)] + (["--quick"] if quick else [])
    if figure_dir is not None and script.draws:
        args += ["--save-figs", str(figure_dir)]
    return args


def run_one(lanes: Lanes, i: int, script: Script, label: str, figure_dir: Path | None) -> dict[str, Any]:
    """The i-th script's run, from whichever lane runs it (reproduction.lanes), its line shown in order
    with a ticker while it is awaited."""
    done = threading.Event()
    ticker = threading.Thread(target=_tick, args=(label, time.perf_counter(), done),
                              daemon=True) if sys.stdout.isatty() else None
    print(label, end="" if ticker else "\n", flush=True)
    if ticker:
        ticker.start()
    try:
        proc, wall = lanes.run(i)
    finally:
        done.set()
        if ticker:
            ticker.join()
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}): {tail}"
    print(f"\r{label} {wall:5.1f} s  {status}" if ticker else f"    {wall:5.1f} s  {status}", flush=True)
    # The figures' temporary folder is gone after the run: name them where the pages keep them.
    stdout = proc.stdout if figure_dir is None else proc.stdout.replace(f"{figure_dir}{os.sep}", "figures/")
    return {"script": script.name, "rc": proc.returncode, "wall_s": wall,
            "forked": getattr(proc, "forked", False), "stdout": stdout,
            "stderr": proc.stderr}


def _tick(label: str, start: float, done: threading.Event) -> None:
    while not done.wait(0.5):
        print(f"\r{label} {time.perf_counter() - start:5.1f} s", end="", flush=True)


def main() -> None:
    args = parse_args()
    chosen = [s for s in scripts() if named_by(args.only, s.name)]
    if not chosen:
        raise UsageError(f"--only {args.only!r} matches no script (names look like lecture15/02_buckets.py)")
    # --errata's standard output is docs/errata.md alone: the run's lines go to stderr
    with contextlib.redirect_stdout(sys.stderr) if args.errata else contextlib.nullcontext():
        runs, claims, data, pages, total = run_scripts(chosen, args)
    failures = [r["script"] for r in runs if r["rc"] != 0]
    every = [dict(c, script=s) for s, c in claims]
    if args.errata:
        print(errata.markdown(errata.group(every), errata.readings(every)), end="")
        sys.exit(1 if failures else 0)
    print_claims(runs, claims, total, args.all_claims)
    if args.json:
        # Each run keeps its script's own --json too: the tests read a script's --quick run from here
        # instead of running it again.
        write_json(args.json, {"total_s": total, "runs": [dict(r, json=data.get(r["script"])) for r in runs],
                               "claims": every,
                               "errata": [dict(g, instances=[c["ref"] for c in g["instances"]])
                                          for g in errata.group(every)]})
    if pages:
        print("\nThe pages: " + ", ".join(str(p) for p in pages) + f" (all done in {total:.1f} s)")
    elif not args.no_report:
        print(f"\nNo pages written: every script failed, so {args.report}/ keeps what it held",
              file=sys.stderr)
    if failures:
        print(f"\nFAILED: {', '.join(failures)}", file=sys.stderr)
        sys.exit(1)


def parse_args() -> argparse.Namespace:
    """The flags; --report is checked before any script runs."""
    parser = make_parser(__doc__, only="")
    parser.add_argument("--all-claims", action="store_true", help="list agreeing claims too")
    parser.add_argument("--report", metavar="DIR", default="report",
                        help="write the pages (index.html, report.md, timeline.html, memory.html, "
                             "pipeline.html) into DIR (default: report)")
    parser.add_argument("--no-report", action="store_true", help="write no pages")
    parser.add_argument("--errata", action="store_true",
                        help="print only docs/errata.md (markdown) on standard output, from this run's "
                             "claims; the run's lines go to stderr and no pages are written")
    args = parser.parse_args()
    args.no_report = args.no_report or args.errata
    if not args.no_report:
        check_output_dir(args.report, "--report")
    return args


def run_scripts(chosen: list[Script], args: argparse.Namespace
                ) -> tuple[list[dict[str, Any]], list[tuple[str, dict]], dict[str, Any], list[Path], float]:
    """Run each script in turn (a line each), then write the pages: the runs, every (script, claim),
    each script's own --json by name, the pages written and the seconds it all took."""
    start = time.perf_counter()
    drawing = not args.no_report and any(s.draws for s in chosen)
    with owned_folder("course-run-") as tmp:
        figure_dir = None if args.no_report else Path(tmp) / "figures"
        if figure_dir is not None:
            figure_dir.mkdir()   # before two lanes' scripts race to make it
        outs = [Path(tmp) / f"{i}.json" for i in range(len(chosen))]
        commands = [command(s, out, args.quick, figure_dir) for s, out in zip(chosen, outs)]
        with Lanes(chosen, commands, drawing) as lanes:
            # after what this thread reads from disk: the page's thread holds the GIL most of its
            # 3-4 s, and each read here waited for it (1.5 s before the first script)
            timeline = None if args.no_report else timeline_in_background(lanes.turns)
            runs, claims, data = collect(lanes, chosen, outs, figure_dir, start)
        pages = []
        if not args.no_report and data:  # a run where every script failed does not replace a report
            pages = write_pages(Path(args.report), chosen, runs, data, figure_dir, start, args.quick,
                                timeline)
    return runs, claims, data, pages, time.perf_counter() - start


def collect(lanes: Lanes, chosen: list[Script], outs: list[Path], figure_dir: Path | None, start: float
            ) -> tuple[list[dict[str, Any]], list[tuple[str, dict]], dict[str, Any]]:
    """Each script's run in the order chosen, a line each, with its claims and its own --json."""
    runs, claims, data = [], [], {}
    for i, script in enumerate(chosen):
        label = f"[{i + 1:2d}/{len(chosen)}] {script.name:30s} (at {time.perf_counter() - start:4.0f} s)"
        runs.append(run_one(lanes, i, script, label, figure_dir))
        if runs[-1]["rc"] == 0:
            data[script.name] = json.loads(outs[i].read_text(encoding="utf-8"))
            claims += [(script.name, c) for c in data[script.name]["claims"]]
    return runs, claims, data


def timeline_in_background(turns: Turns | None = None) -> Callable[[], str]:
    """The timeline page's HTML, computed in a thread started now: its grid is 3-4 s of pure Python
    that needs no run, done while the interpreter imports torch and this process only waits on the
    scripts. It is work beside the scripts (`turns`): a script that reads a clock runs without it.
    Returns what waits for it (and raises what the thread raised)."""
    from report.timeline import render_timeline  # imported here, not raced with the thread

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            # Below the scripts (nice 10 on Linux, where a thread has its own): their ranks come
            # first; a free core still runs it at full speed.
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            # Once the lanes have closed (turns stopped) no timed run can start: the page is
            # computed without a turn (an interrupted run does not wait for this daemon thread).
            with turns.beside() if turns else contextlib.nullcontext():
                box["html"] = render_timeline()
        except BaseException as err:  # raised again in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=work, daemon=True, name="timeline-page")
    thread.start()

    def html() -> str:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["html"]

    return html


def print_claims(runs: list[dict[str, Any]], claims: list[tuple[str, dict]], total: float,
                 all_claims: bool) -> None:
    """The count by status, every claim that does not simply agree (all with --all-claims), and the
    notes' errors."""
    words = [errata.label(c) for _, c in claims]
    print(wrap(f"{len(runs)} scripts in {total:.1f} s; {verdicts.claims_sentence(words)}.", "  ", "\n"))
    shown = [(s, c) for s, c in claims if all_claims or c["status"] != "agrees"]
    if shown:
        print("\nEvery claim:" if all_claims
              else "\nClaims that do not simply match (ours beside the notes', and why):")
    for script, c in shown:
        print(f"\n  {script} · {c['part']} · {c['what']}")
        line = f"ours {_num(c['ours'], c['unit'])}, notes {_num(c['notes'], c['unit'])}: {errata.label(c)}"
        print(wrap(line, "      ", "    "))
        compared = c.get("rule") not in (None, "", "not compared")   # the rule, apart from the verdict
        if c.get("decision") or compared:
            text = f"{c['rule']}: {c['decision']}" if compared and c.get("decision") else (
                c.get("decision") or c["rule"])
            print(wrap(text, "         ", "    compared: " if compared else "    found: "))
        if c["why"]:
            print(wrap(verdicts.readable(c["why"]), "         ", "    why: "))
    found = errata.group([dict(c, script=s) for s, c in claims])
    if found:
        print("\n".join(errata.terminal_lines(found)))


def write_pages(directory: Path, chosen: list[Script], runs: list[dict[str, Any]], data: dict[str, Any],
                figure_dir: Path, start: float, quick: bool, timeline_html: Callable[[], str]) -> list[Path]:
    """The timeline page (its HTML from timeline_in_background), the memory page (with 04_memory.py's
    and 03_costs.py's claims from this run, or from runs of their own when they were not chosen), the
    pipeline page, index.html and report.md."""
    print(f"[pages] {directory}/ (at {time.perf_counter() - start:4.0f} s)", flush=True)
    figure_dir.mkdir(exist_ok=True)
    make_output_dir(str(directory))
    html = timeline_html()   # first: no import of this thread's races the page's thread
    from report.memory import COSTS, SCRIPT, write_memory
    from report.pages import write_report
    from report.pipeline import write_pipeline
    from report.timeline import write_timeline

    timeline = write_timeline(directory, html)
    ran = {name: data[name]["claims"] for name in (SCRIPT, COSTS) if name in data}
    memory = write_memory(directory, ran.get(SCRIPT), ran.get(COSTS))
    pipeline = write_pipeline(directory)
    pages = write_report(directory, runs, data, figure_dir, {s.name: s.doc for s in chosen},
                         time.perf_counter() - start, quick, timeline.name)
    return [pages[0], timeline, memory, pipeline, pages[1]]


def _num(value: object, unit: str) -> str:
    if value is None:
        return "-"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


if __name__ == "__main__":
    run_main(main)
