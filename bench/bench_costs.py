"""The costs behind the real scripts' limits: run each real script over a grid of flags, measure
its CPU time (all its processes) and wall time, fit the terms of its COST (common/run_cost.py) to the
CPU times and print the fitted coefficients beside the script's, run by run.

    python bench/bench_costs.py [--only 05_parallel] [--json costs.json]

The limits a script enforces come from these fits: COST's coefficients are what this printed on
the suite's 2-core reference machine (rounded). CPU time, not wall time, is fitted: other work on
a shared machine stretches wall time but hardly the CPU time a run needs. Minutes per script; a
benchmark, not a test: it prints a table and never fails a build.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This checkout's code/, ahead of anything installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import os
import resource
import subprocess
import time

import numpy as np

from common import cli
from common.output_files import write_json
from common.script_end import run_main
from common.text import format_table
from reproduction.suite import CODE, named_by

# Each real script's grid: world sizes at the defaults and at --quick, then each size flag raised.
GRIDS: dict[str, list[list[str]]] = {
    "lecture14/02_primitives.py": [["--world-size", "2"], [], ["--world-size", "8"], ["--world-size", "16"],
                                   ["--numbers", "1000000"], ["--numbers", "4000000"], ["--quick"]],
    "lecture14/04_alpha_beta.py": [[], ["--quick"], ["--repeats", "21"]],
    "lecture14/05_data_parallel.py": [["--world-size", "2"], [], ["--world-size", "8"],
                                      ["--world-size", "16"], ["--quick"], ["--quick", "--world-size", "8"]],
    "lecture15/01_ddp_basics.py": [["--world-size", "2"], [], ["--world-size", "8"], ["--quick"],
                                   ["--quick", "--world-size", "8"], ["--steps", "40"],
                                   ["--timing-steps", "60"], ["--timing-width", "1024"],
                                   ["--timing-batch", "512"], ["--batch", "1024"]],
    "lecture15/02_buckets.py": [[], ["--world-size", "4"], ["--world-size", "8"], ["--quick"],
                                ["--elements", "16777216"]],
    "lecture15/04_details.py": [[], ["--world-size", "4"], ["--world-size", "8"], ["--quick"],
                                ["--quick", "--world-size", "8"], ["--layers", "256"],
                                ["--timing-steps", "120"], ["--steps", "12"], ["--micro-batches", "16"]],
    "lecture15/model_vs_real.py": [[], ["--world-size", "4"], ["--world-size", "8"], ["--quick"],
                                   ["--layers", "32"], ["--width", "2048"], ["--repeats", "28"],
                                   ["--rank-batch", "512"]],
    "lecture15/my_ddp_check.py": [[], ["--world-size", "4"], ["--world-size", "8"], ["--quick"],
                                  ["--quick", "--world-size", "8"], ["--batch", "512"], ["--steps", "12"],
                                  ["--repeats", "200"]],
    "lecture15/my_ddp_vs_ddp.py": [[], ["--world-size", "4"], ["--world-size", "8"], ["--quick"]],
    "lecture15/handbook_details.py": [[], ["--world-size", "4"], ["--world-size", "8"], ["--quick"]],
    "lecture15/06_comm_hooks.py": [["--world-size", "2"], [], ["--world-size", "8"], ["--steps", "3"],
                                   ["--steps", "120"]],
    "lecture15/07_traces.py": [["--world-size", "2"], [], ["--world-size", "8"], ["--layers", "24"],
                               ["--width", "1024"], ["--repeats", "12"]],
    "lecture14/06_debug_collectives.py": [["--world-size", "2"], [], ["--world-size", "8"]],
    "cs336/01_collectives.py": [["--world-size", "2"], [], ["--world-size", "8"], ["--world-size", "16"],
                                ["--numbers", "1000000"], ["--size", "64MB"], ["--quick"]],
    "cs336/02_benchmark.py": [["--quick", "--world-size", "2"], ["--quick"], ["--quick", "--world-size", "8"],
                              [], ["--quick", "--repeats", "20"], ["--quick", "--max-bytes", "64MiB"]],
    "cs336/05_parallel.py": [["--world-size", "2"], [], ["--world-size", "8"],
                             ["--world-size", "8", "--layers", "32"],
                             ["--world-size", "8", "--layers", "64", "--batch", "64"],
                             ["--world-size", "16", "--layers", "16"],
                             ["--world-size", "16", "--layers", "64", "--batch", "64"], ["--layers", "64"],
                             ["--batch", "512"], ["--width", "512"], ["--steps", "12"],
                             ["--micro-batches", "32"], ["--world-size", "24", "--layers", "24"], ["--quick"],
                             ["--quick", "--world-size", "8"]],
    "cs336/07_tensor_parallel.py": [[], ["--quick"], ["--world-size", "8"],
                                    ["--world-size", "8", "--tp", "4"], ["--layers", "24"], ["--steps", "9"],
                                    ["--width", "512"], ["--batch", "512"]],
    "cs336/08_pipeline_schedules.py": [["--pp", "2"], [], ["--pp", "8", "--layers", "16"],
                                       ["--micro-batches", "32"], ["--layers", "32"], ["--width", "512"],
                                       ["--steps", "6"], ["--batch", "256"]],
    "cs336/09_zero.py": [["--world-size", "2"], [], ["--world-size", "8"], ["--layers", "24"],
                         ["--width", "520"], ["--steps", "9"], ["--batch", "512"]],
}


def measure(script: str, argv: list[str]) -> tuple[float, float, int]:
    """(CPU seconds of the script and every rank it started, wall seconds, exit status)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(CODE / script), *argv], capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, proc.returncode


def parsed(script: str, argv: list[str]) -> tuple[argparse.Namespace, object]:
    """The script's flags as its parser gives them (--quick's defaults applied), and its COST; no
    checks run (a grid point is measured, not judged)."""
    parsers: list[cli.OneLineParser] = []
    real_parse = cli.OneLineParser.parse_args

    def capture(self: cli.OneLineParser, *a: object, **k: object) -> None:
        parsers.append(self)
        raise KeyboardInterrupt  # out of main() before any work

    cli.OneLineParser.parse_args = capture  # type: ignore[method-assign]
    try:
        module = _load(script)
        try:
            module.main()
        except KeyboardInterrupt:
            pass
    finally:
        cli.OneLineParser.parse_args = real_parse  # type: ignore[method-assign]
    parser = parsers[0]
    namespace = argparse.Namespace(**{a.dest: cli._NOT_GIVEN for a in parser._quick_actions()})
    args = argparse.ArgumentParser.parse_args(parser, argv, namespace)
    parser._fill_defaults(args)
    return args, parser.cost


def _load(script: str) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{Path(script).stem}", CODE / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fit(sizes: np.ndarray, cpu: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the relative error: least squares, dropping the most
    negative term until none is left (a term that would need a negative time is not there)."""
    keep = list(range(sizes.shape[1]))
    weighted = sizes / cpu[:, None]
    while True:
        coef = np.zeros(sizes.shape[1])
        coef[keep] = np.linalg.lstsq(weighted[:, keep], np.ones(len(cpu)), rcond=None)[0]
        if coef.min() >= 0 or len(keep) == 1:
            return np.maximum(coef, 0)
        keep.remove(int(np.argmin(coef)))


def bench(script: str, rows: list[list[object]], record: dict) -> None:
    runs = []
    for argv in GRIDS[script]:
        cpu, wall, rc = measure(script, argv)
        args, cost = parsed(script, argv)
        runs.append({"argv": argv, "cpu_s": cpu, "wall_s": wall, "rc": rc, "load": os.getloadavg()[0]})
        shown = " ".join(argv) or "(defaults)"
        print(f"  {script} {shown}: CPU {cpu:.1f} s, wall {wall:.1f} s, exit {rc}", flush=True)
    ok = [r for r in runs if r["rc"] == 0]
    sizes = np.array([[t.size(parsed(script, r["argv"])[0]) for t in cost.terms] for r in ok])
    fitted = fit(sizes, np.array([r["cpu_s"] for r in ok]))
    for term, new in zip(cost.terms, fitted):
        rows.append([script, term.name, f"{term.seconds:.2g}", f"{new:.2g}"])
    for r, size in zip(ok, sizes):
        r["predicted_cpu_s"] = float(size @ np.array([t.seconds for t in cost.terms]))
    record[script] = {"runs": runs, "fitted": {t.name: float(c) for t, c in zip(cost.terms, fitted)}}


def main() -> None:
    parser = cli.make_parser(__doc__, figs=False, only="",
                             help_for={"quick": "only the first two runs of each grid"})
    args = parser.parse_args()
    if args.quick:
        for grid in GRIDS.values():
            del grid[2:]
    rows: list[list[object]] = []
    record: dict = {}
    for script in GRIDS:
        if named_by(args.only, script):
            bench(script, rows, record)
    print(format_table(["script", "term", "COST's s", "fitted here"], rows))
    for script, data in record.items():
        worst = [r["predicted_cpu_s"] / r["cpu_s"] for r in data["runs"] if "predicted_cpu_s" in r]
        print(f"{script}: COST's prediction / measured CPU time from {min(worst):.2f} to {max(worst):.2f}")
    if args.json:
        write_json(args.json, record)


if __name__ == "__main__":
    run_main(main)
