"""Wall time of every script as a student runs it (default arguments), as a ratio to `python -c
"import torch"` timed beside it (each run of a script follows one of import torch, and the row is
the median of one over the median of the other: a machine busy with other work slows both). Then
every model-only script again at the largest world size it should handle (--world-size 1024), the
time of lecture 15's full bucket-cap sweep (target 0.5 s), and, when asked, the whole reproduction
with its pages (`reproduce.py --quick`, --with-reproduce) and the test suite (the README's test
command, --with-suite), each timed once between three imports of torch before and three after, and
the practice judge on every reference solution (--with-judge, target 30 s).
With --largest, instead: each model-only script at the largest values its flags accept (LARGEST_RUNS).
With --torchrun, instead: each script with real processes under `torchrun --standalone
--nproc-per-node=4`, beside torchrun's floor (the same torchrun starting 4 processes that import
torch and end): there each rank imports torch itself, and on 2 cores the floor alone is about 3.5x
import torch, so the target there is the floor plus the standalone budget's work (3x less the one
import torch a standalone run pays): TORCHRUN_WORK_X.

    python bench/bench_scripts.py [--repeats 3] [--only lecture15] [--with-reproduce] [--with-judge]
                                  [--with-suite]
    python bench/bench_scripts.py --largest [--only cs336]
    python bench/bench_scripts.py --torchrun [--only cs336]

Targets (issue 18, a 2-core machine): a script with real processes within 3x import torch; a
model-only script 1.5 s (at its largest values, common.model_bounds.MODEL_BUDGET_S); reproduce.py
--quick within 20x; the suite within 140x (150 s where import torch takes 1.08 s). A benchmark, not
a test: it prints a table and never fails a build.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import json
import shlex
import statistics
import subprocess
import tempfile
import time

from common.cli import make_parser
from common.model_bounds import MODEL_BUDGET_S
from common.script_end import run_main
from common.text import format_table
from reproduction.suite import Script, named_by, scripts

ROOT = Path(__file__).resolve().parents[1]
MODEL_ONLY_TARGET_S = 1.5
LARGEST_WORLD_SIZE = 1024  # model-only scripts with --world-size must meet their target here too
SWEEP_TARGET_S = 0.5  # lecture 15 §3.2's whole bucket-cap sweep, timed inside 03_overlap.py
REAL_TARGET_X = 3.0   # a script with real processes, in import torch's
TORCHRUN_WORK_X = REAL_TARGET_X - 1   # under torchrun: beyond its floor, in import torch's
TORCHRUN_RANKS = 4
REPRODUCE_TARGET_X = 20.0  # reproduce.py --quick, every script and the five pages
SUITE_TARGET_X = 140.0     # the README's test command
JUDGE_TARGET_S = 30.0      # practice/judge.py on every reference solution (issue 30), this machine
IMPORT_TORCH = [sys.executable, "-c", "import torch"]
# Each model-only script at the largest values its growing flags accept (their Bounds and the shared
# device limit, common.model_bounds; its other flags cost the same at any value), together where their
# costs add up in one run; "{dir}" is a fresh folder (figures cost too). tests/common/test_model_bounds.py
# runs the same and checks that one more of each is refused.
LARGEST_RUNS: list[tuple[str, tuple[str, ...]]] = [
    ("cs336/03_costs.py", ("--world-size", "2048")),
    ("cs336/04_memory.py", ("--world-size", "4096", "--tp", "4096", "--pp", "1", "--dp", "1",
                            "--global-batch", "4096")),
    ("cs336/06_pipeline.py", ("--pp", "128", "--micro-batches", "512", "--virtual-stages", "256")),
    ("cs336/06_pipeline.py", ("--pp", "128", "--micro-batches", "32", "--save-figs", "{dir}")),
    ("lecture14/01_scale.py", ("--world-size", "4096", "--tp", "512", "--pp", "8")),
    ("lecture14/03_ring_allreduce.py", ("--world-size", "2048", "--traffic-size", "1MiB")),
    ("lecture15/03_overlap.py", ("--world-size", "4096", "--bucket-cap-mb", "0", "--first-bucket-cap-mb",
                                 "0", "--save-figs", "{dir}")),
    ("lecture15/05_scaling.py", ("--world-size", "4096", "--micro-batches", "9362", "--micro-batch-size",
                                 "16", "--sync-every", "4096", "--save-figs", "{dir}")),
    ("lecture15/05_scaling.py", ("--micro-batches", "1", "--micro-batch-size", "1048576",
                                 "--sync-every", "1")),
]


def wall(command: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True)
    if proc.returncode:   # the table says FAILED; say what failed, or nobody can tell afterwards
        tail = (proc.stdout + proc.stderr).decode(errors="replace").splitlines()[-15:]
        print(f"  {' '.join(command[1:])} exited {proc.returncode}:", *tail, sep="\n    ", file=sys.stderr)
    return time.perf_counter() - start, proc.returncode


def beside_import(command: list[str], runs: int, imports: int = 1) -> tuple[float, float, bool]:
    """Median seconds of `command` and of import torch: each run of the command after `imports` of
    import torch (and, with more than one, before as many again: one sample swung 2.7-3.9 s here,
    which moved a once-timed row's ratio by a fifth); whether every run of the command succeeded."""
    torch_s, timed = [], []
    for _ in range(runs):
        torch_s += [wall(IMPORT_TORCH)[0] for _ in range(imports)]
        timed.append(wall(command))
        torch_s += [wall(IMPORT_TORCH)[0] for _ in range(imports if imports > 1 else 0)]
    return (statistics.median(t for t, _ in timed), statistics.median(torch_s),
            all(rc == 0 for _, rc in timed))


def has_world_size(script: Script) -> bool:
    """The script takes --world-size (asked through --help, whatever way its parser adds it)."""
    proc = subprocess.run([sys.executable, str(script.path), "--help"], capture_output=True, text=True)
    return "--world-size" in proc.stdout


def readme_test_command() -> list[str]:
    """The README's test command (after its install step), as CI runs it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if "-m pytest" in ln
                and ln.startswith("python3 -m pip install"))
    return [sys.executable if word == "python3" else word for word in shlex.split(line.split("&&", 1)[1])]


def row(name: str, kind: str, timed: tuple[float, float, bool], target_x: float | None = None,
        target_s: float | None = None) -> list[str]:
    seconds, torch_s, ok = timed
    ratio = seconds / torch_s
    meets = ratio <= target_x if target_x is not None else seconds <= target_s
    goal = f"{target_x:g}x" if target_x is not None else f"{target_s:g} s"
    return [name, kind, f"{seconds:.2f}", f"{torch_s:.2f}", f"{ratio:.1f}", goal,
            ("meets" if meets else "SLOWER") if ok else "FAILED"]


def main() -> None:
    parser = make_parser(__doc__, figs=False, repeats=3, only="", context={"repeats": "runs per script"})
    parser.add_argument("--with-reproduce", action="store_true",
                        help="also time reproduce.py --quick with its pages, once (about a minute)")
    parser.add_argument("--with-judge", action="store_true",
                        help="also time the practice judge on every reference solution (target 30 s)")
    parser.add_argument("--with-suite", action="store_true",
                        help="also time the README's test command, once (minutes)")
    parser.add_argument("--largest", action="store_true",
                        help="time the model-only scripts at the largest values their flags accept instead")
    parser.add_argument("--torchrun", action="store_true",
                        help="time the scripts with real processes under torchrun (4 ranks) instead")
    args = parser.parse_args()
    runs = 1 if args.quick else args.repeats
    if args.largest:
        largest(args.only, runs)
        return
    if args.torchrun:
        under_torchrun(args.only, runs)
        return
    print(f"Wall times, median of {runs} run{'s' * (runs > 1)}, each after one of `import torch` (x: the "
          "ratio)")
    rows = []
    for script in scripts():
        if not named_by(args.only, script.name):
            continue
        commands = [(script.name, ())]
        if not script.real and has_world_size(script):
            commands.append((f"{script.name} --world-size {LARGEST_WORLD_SIZE}",
                             ("--world-size", str(LARGEST_WORLD_SIZE))))
        for name, extra in commands:
            timed = beside_import([sys.executable, str(script.path), *extra], runs)
            rows.append(row(name, "real processes", timed, target_x=REAL_TARGET_X) if script.real else
                        row(name, "model only", timed, target_s=MODEL_ONLY_TARGET_S))
            print(f"  {name}: {timed[0]:.2f} s, {timed[0] / timed[1]:.1f}x import torch", flush=True)
    if args.with_reproduce:
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, str(ROOT / "code" / "reproduce.py"), "--quick", "--report", f"{tmp}"
                                                                                                   "/report"]
            rows.append(row("reproduce.py --quick (with its pages)", "all scripts",
                            beside_import(command, 1, imports=3), target_x=REPRODUCE_TARGET_X))
    if args.with_judge:
        command = [sys.executable, str(ROOT / "practice" / "judge.py"), "--solution",
                   str(ROOT / "practice" / "reference")]
        rows.append(row("practice/judge.py, every reference", "the judge", beside_import(command, runs),
                        target_s=JUDGE_TARGET_S))
    if args.with_suite:
        command = readme_test_command()
        rows.append(row(" ".join(["python3", *command[1:]]), "the tests",
                        beside_import(command, 1, imports=3), target_x=SUITE_TARGET_X))
    print()
    print(format_table(["what", "kind", "median s", "import torch s", "x import torch", "target", "verdict"],
                       rows))
    if named_by(args.only, "lecture15/03_overlap.py"):
        sweep = statistics.median(sweep_seconds() for _ in range(runs))
        print(f"\nlecture 15 bucket-cap sweep (every cap x 2 models x 2 links): {sweep:.3f} s, "
              f"target {SWEEP_TARGET_S} s: {'meets' if sweep <= SWEEP_TARGET_S else 'SLOWER'}")
    print("MyDDP's step against PyTorch DDP's (target within 1.2x): python bench/bench_my_ddp.py")


def largest(only: str, runs: int) -> None:
    """LARGEST_RUNS timed as the scripts' rows are, against the model-only budget."""
    rows = []
    for name, argv in LARGEST_RUNS:
        if not named_by(only, name):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            command = [arg.replace("{dir}", f"{tmp}/figs") for arg in argv]
            timed = beside_import([sys.executable, str(ROOT / "code" / name), *command], runs)
        shown = f"{name} {' '.join(argv)}".replace("{dir}", "DIR")
        rows.append(row(shown, "model only, largest", timed, target_s=MODEL_BUDGET_S))
        print(f"  {shown}: {timed[0]:.2f} s, {timed[0] / timed[1]:.1f}x import torch", flush=True)
    print()
    print(format_table(["what", "kind", "median s", "import torch s", "x import torch", "target", "verdict"],
                       rows))


def torchrun(program: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={TORCHRUN_RANKS}", *program]


def under_torchrun(only: str, runs: int) -> None:
    """Each script with real processes under torchrun, its median beside import torch's and beside
    torchrun's floor, each timed in the same rounds (see the module's docstring for the target)."""
    with tempfile.TemporaryDirectory() as tmp:
        floor = Path(tmp) / "floor.py"
        floor.write_text("import torch\n", encoding="utf-8")
        rows = []
        for script in scripts():
            if not script.real or not named_by(only, script.name):
                continue
            torch_s, floor_s, timed = [], [], []
            for _ in range(runs):
                torch_s.append(wall(IMPORT_TORCH)[0])
                floor_s.append(wall(torchrun([str(floor)]))[0])
                timed.append(wall(torchrun([str(script.path)])))
            t, f, s = (statistics.median(torch_s), statistics.median(floor_s),
                       statistics.median(x for x, _ in timed))
            ok, work_x = all(rc == 0 for _, rc in timed), (s - f) / t
            verdict = ("meets" if work_x <= TORCHRUN_WORK_X else "SLOWER") if ok else "FAILED"
            rows.append([script.name, f"{s:.2f}", f"{t:.2f}", f"{s / t:.1f}", f"{f:.2f}", f"{work_x:.1f}",
                         f"floor + {TORCHRUN_WORK_X:g}x", verdict])
            print(f"  {script.name}: {s:.2f} s under torchrun, floor {f:.2f} s, import torch {t:.2f} s",
                  flush=True)
    print()
    print(format_table(["script (torchrun, 4 ranks)", "median s", "import torch s", "x import torch",
                        "floor s", "(s - floor) x import torch", "target", "verdict"], rows))


def sweep_seconds() -> float:
    """The sweep's own time, as 03_overlap.py measures and records it (start-up excluded)."""
    script = next(s for s in scripts() if s.name == "lecture15/03_overlap.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "03.json"
        subprocess.run([sys.executable, str(script.path), "--json", str(out)], capture_output=True,
                       check=True)
        return json.loads(out.read_text(encoding="utf-8"))["parts"]["Part 2"]["sweep_seconds"]


if __name__ == "__main__":
    run_main(main)
