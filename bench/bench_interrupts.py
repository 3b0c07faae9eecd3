"""Interrupted at every instant (issue 35): each phase of a run, each signal, many tries, and how
many ended as promised. A run is started in a session of its own and its whole process group is
signalled the moment a phase begins, as seen from outside (/proc): no sleep chosen beforehand.

    python bench/bench_interrupts.py [--repeats 20] [--only 02_primitives] [--quick]

Promised: SIGINT -> exit 130 and `interrupted`, SIGTERM -> 143 `terminated`, SIGHUP -> 129 `hung
up`, a reader that closes the pipe -> 141 and nothing on stderr; in every case nothing else on
stderr, no process of the run left, no temporary file in the output folder and no folder of the
run's in the temporary directory. Phases (where the program has them):

    importing   torch's library is mapped in the process (the imports under way)
    starting    a random instant in 0.15-0.6 s (reproduce.py, which imports no torch itself)
    forking     the first child process appears (a rank, or a reproduction's lane)
    all ranks   every rank exists (they rendezvous)
    at work     a random instant in the ranks' first second (mostly inside collectives), or in
                the first 3 s of a reproduction's lanes
    gathering   the ranks have all ended and the parent is still running (results, printing)
    writing     a temporary file appears in the output folder (an output being written)
    pipe        stdout's reader reads one line and closes it (as `| head -1`)

Linux only (/proc). A benchmark, not a test: tests/suite/test_interrupts.py makes a few of these tries
in the suite; this is the issue's count (20 tries per phase per signal, about half an hour).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from typing import Callable

from common.cli import make_parser
from common.error_types import UsageError
from common.script_end import run_main
from common.text import format_table

ROOT = Path(__file__).resolve().parents[1]
ENDINGS = {"SIGINT": (130, "interrupted\n"), "SIGTERM": (143, "terminated\n"), "SIGHUP": (129, "hung up\n")}
# program -> (command with {out} for the output folder, its ranks (0: none), its phases)
PROGRAMS = {
    "lecture15/01_ddp_basics.py": (["code/lecture15/01_ddp_basics.py", "--json", "{out}/run.json"], 4,
                                   ("importing", "forking", "all ranks", "at work", "gathering", "writing",
                                    "pipe")),
    "lecture14/02_primitives.py": (["code/lecture14/02_primitives.py", "--json", "{out}/run.json"], 4,
                                   ("importing", "forking", "all ranks", "at work", "gathering", "writing",
                                    "pipe")),
    "reproduce.py": (["code/reproduce.py", "--quick", "--only", "lecture15/02_buckets.py,lecture14/03_ring",
                      "--report", "{out}/report"], 0, ("starting", "forking", "at work", "writing", "pipe")),
}
DEADLINE_S = 90
MISSED = "the run ended before the instant was seen"


def heeding_ctrl_c() -> None:
    """In the child before it runs: SIGINT as a terminal's process gets it. A program started in
    the background by a shell inherits SIGINT ignored, and Python then never raises Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def in_session(sid: int) -> list[int]:
    alive = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[3] == str(sid) and fields[0] != "Z":
            alive.append(int(entry))
    return alive


def torch_mapped(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def temporaries(out: Path) -> list[str]:
    """Temporary files in the output folder and the report folder in it (not deeper: a poll must
    be quick, or a page's temporary file lives and goes between two of them)."""
    found = []
    for folder in (out, out / "report"):
        try:
            found += [f"{folder.name}/{e.name}" for e in os.scandir(folder) if e.name.endswith(".tmp")]
        except OSError:
            pass
    return found


def instant(phase: str, ranks: int, out: Path) -> Callable[[int], bool]:
    """A test of the process's state that holds from the moment the phase begins."""
    seen: dict[str, float] = {"start": time.monotonic()}
    at_work, starting = random.uniform(0.0, 1.0 if ranks else 3.0), random.uniform(0.15, 0.6)

    def ready(pid: int) -> bool:
        kids = children(pid)
        if kids and "kids" not in seen:
            seen["kids"] = time.monotonic()
        return {"importing": lambda: torch_mapped(pid),
                "starting": lambda: time.monotonic() - seen["start"] >= starting,
                "forking": lambda: bool(kids),
                "all ranks": lambda: len(kids) >= ranks,
                "at work": lambda: bool(kids) and time.monotonic() - seen["kids"] >= at_work,
                "gathering": lambda: "kids" in seen and not kids,
                "writing": lambda: bool(temporaries(out))}[phase]()
    return ready


def one_try(program: str, phase: str, sig: str) -> str:
    """One run signalled at the phase: "ok", or what went otherwise, in a few words."""
    command, ranks, _ = PROGRAMS[program]
    with tempfile.TemporaryDirectory(prefix="bench-interrupts-") as folder:
        out = Path(folder)
        argv = [sys.executable, *(a.replace("{out}", folder) for a in command)]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=heeding_ctrl_c)
        before = {p.name for p in Path(tempfile.gettempdir()).glob(f"*-{proc.pid}-*")}
        fired, deadline = False, time.monotonic() + DEADLINE_S
        if phase == "pipe":
            proc.stdout.readline()
            proc.stdout.close()
            fired = True
        else:
            ready = instant(phase, ranks, out)
            while proc.poll() is None and time.monotonic() < deadline:
                if ready(proc.pid):
                    os.killpg(proc.pid, getattr(signal, sig))
                    fired = True
                    break
        try:
            err = proc.stderr.read().decode(errors="replace")
            proc.wait(timeout=DEADLINE_S)
            if phase != "pipe":
                proc.stdout.read()
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return "hung"
        left = in_session(proc.pid)
        for _ in range(60):
            if not left:
                break
            time.sleep(0.05)
            left = in_session(proc.pid)
        folders = {p.name for p in Path(tempfile.gettempdir()).glob(f"*-{proc.pid}-*")} - before
        status, word = (141, "") if phase == "pipe" else ENDINGS[sig]
        if not fired and proc.returncode == 0 and not left and not temporaries(out):
            return MISSED
        wrong = ([] if fired else ["ended before the instant"]) + \
            ([f"exit {proc.returncode}"] if proc.returncode != status else []) + \
            ([f"stderr {err[-160:]!r}"] if err != word else []) + \
            ([f"{len(left)} processes left"] if left else []) + \
            ([f"temporary {temporaries(out)}"] if temporaries(out) else []) + \
            ([f"folders left {sorted(folders)}"] if folders else [])
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
        return "ok" if not wrong else "; ".join(wrong)


def tried(program: str, phase: str, sig: str, tries: int) -> tuple[Counter, int]:
    """`tries` runs signalled at the phase's instant, and how many more ran past it unseen (a
    temporary file that lived less than a poll): those are run again, up to 3 × tries in all."""
    seen: Counter = Counter()
    missed = 0
    while sum(seen.values()) < tries and missed < 2 * tries:
        outcome = one_try(program, phase, sig)
        if outcome == MISSED:
            missed += 1
        else:
            seen[outcome] += 1
    return seen, missed


def main() -> None:
    parser = make_parser(__doc__, figs=False, repeats=20, only="",
                         context={"repeats": "tries per phase and signal"})
    parser.add_argument("--phase", default="", metavar="TEXT",
                        help="only the phases whose name contains this text (default: every phase)")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise UsageError("reads /proc: Linux only")
    tries = 2 if args.quick else args.repeats
    rows, odd = [], []
    for program, (_, _, phases) in PROGRAMS.items():
        if args.only and args.only not in program:
            continue
        for phase in (p for p in phases if args.phase in p):
            for sig in (["SIGPIPE"] if phase == "pipe" else list(ENDINGS)):
                seen, missed = tried(program, phase, sig, tries)
                rows.append([program, phase, sig if phase != "pipe" else "closed pipe",
                             f"{seen['ok']} of {tries}", str(missed)])
                odd += [f"{program} {phase} {sig}: {n}x {what}" for what, n in seen.items() if what != "ok"]
                print(f"  {program} {phase} {sig}: {seen['ok']} of {tries} as promised", flush=True)
    print()
    print(format_table(["program", "phase", "signal", "as promised", "instant missed (run again)"], rows))
    for line in odd:
        print(f"  otherwise: {line}")


if __name__ == "__main__":
    run_main(main)
