"""Wall time of every script as a student runs it (default arguments), against the suite's targets,
every model-only script again at the largest world size it should handle (--world-size 1024), and
the time of lecture 15's full bucket-cap sweep (target 0.5 s), and the whole reproduction with its
pages (`reproduce.py --quick`, target 60 s; --with-reproduce, timed once).

    python bench/bench_scripts.py [--repeats 3] [--only lecture15] [--with-reproduce]

Targets on a 2-core laptop-class machine: a model-only script ≤ 1.5 s; a script with real
processes ≤ 6 s (lecture 14) or ≤ 8 s (lecture 15's real-DDP scripts, CS336's; the bandwidth
benchmark with --quick). A benchmark, not a test: it prints a table and never fails a build.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import json
import statistics
import subprocess
import tempfile
import time

from common.cli import make_parser, run_main
from common.output import format_table
from common.suite import Script, scripts

MODEL_ONLY_TARGET_S = 1.5
LARGEST_WORLD_SIZE = 1024  # model-only scripts with --world-size must meet their target here too
SWEEP_TARGET_S = 0.5  # lecture 15 §3.2's whole bucket-cap sweep, timed inside 03_overlap.py
REPRODUCE_TARGET_S = 60.0  # reproduce.py --quick, every script and the three pages
REAL_TARGET_S = {"lecture14": 6.0, "lecture15": 8.0, "cs336": 8.0}
# The bandwidth benchmark's default sweep is longer by design (up to 16 MiB, more iterations); its
# target is for the --quick sweep, which is what it is timed with here.
TIMED_WITH = {"cs336/02_benchmark.py": ("--quick",)}


def target(script: Script) -> float:
    return REAL_TARGET_S[script.path.parent.name] if script.real else MODEL_ONLY_TARGET_S


def wall(script: Script, *args: str) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script.path), *args], capture_output=True)
    return time.perf_counter() - start, proc.returncode


def has_world_size(script: Script) -> bool:
    """The script takes --world-size (asked through --help, whatever way its parser adds it)."""
    proc = subprocess.run([sys.executable, str(script.path), "--help"], capture_output=True, text=True)
    return "--world-size" in proc.stdout


def main() -> None:
    parser = make_parser(__doc__, figs=False, repeats=3, only="", context={"repeats": "runs per script"})
    parser.add_argument("--with-reproduce", action="store_true",
                        help="also time reproduce.py --quick with its pages, once (about a minute)")
    args = parser.parse_args()
    quick_note = " (--quick: one run each)" if args.quick else ""
    print(f"Script wall times, median of {1 if args.quick else args.repeats} runs{quick_note}")
    rows = []
    for script in scripts():
        if args.only not in script.name:
            continue
        extra = TIMED_WITH.get(script.name, ())
        runs = [(" ".join((script.name, *extra)), extra)]
        if not script.real and has_world_size(script):
            runs.append((f"{script.name} --world-size {LARGEST_WORLD_SIZE}", ("--world-size", str(LARGEST_WORLD_SIZE))))
        for name, extra in runs:
            timed = [wall(script, *extra) for _ in range(1 if args.quick else args.repeats)]
            median = statistics.median(t for t, _ in timed)
            ok = all(rc == 0 for _, rc in timed)
            goal = target(script)
            verdict = ("meets" if median <= goal else "SLOWER") if ok else "FAILED"
            rows.append([name, "real processes" if script.real else "model only", f"{median:.2f}", f"{goal:.1f}",
                         verdict])
            print(f"  {name}: {median:.2f} s", flush=True)
    print()
    print(format_table(["script", "kind", "median s", "target s", "verdict"], rows))
    if args.only in "lecture15/03_overlap.py":
        sweep = statistics.median(sweep_seconds() for _ in range(1 if args.quick else args.repeats))
        print(f"\nlecture 15 bucket-cap sweep (every cap x 2 models x 2 links): {sweep:.3f} s, "
              f"target {SWEEP_TARGET_S} s: {'meets' if sweep <= SWEEP_TARGET_S else 'SLOWER'}")
    if args.with_reproduce:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "code" / "reproduce.py"),
                                   "--quick", "--report", str(Path(tmp) / "report")], capture_output=True)
            took = time.perf_counter() - start
        verdict = "FAILED" if proc.returncode else ("meets" if took <= REPRODUCE_TARGET_S else "SLOWER")
        print(f"\nreproduce.py --quick with its pages: {took:.1f} s, target {REPRODUCE_TARGET_S:.0f} s: {verdict}")
    print("MyDDP's step against PyTorch DDP's (target within 1.2x): python bench/bench_my_ddp.py")


def sweep_seconds() -> float:
    """The sweep's own time, as 03_overlap.py measures and records it (start-up excluded)."""
    script = next(s for s in scripts() if s.name == "lecture15/03_overlap.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "03.json"
        subprocess.run([sys.executable, str(script.path), "--json", str(out)], capture_output=True, check=True)
        return json.loads(out.read_text(encoding="utf-8"))["parts"]["Part 2"]["sweep_seconds"]


if __name__ == "__main__":
    run_main(main)
