"""reproduction.lanes: the reproduction's two lanes give each script's result in order, keep a script that
reads a clock alone on the machine, and leave nothing running when they are left early."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from conftest import load_script

from reproduction.lanes import Lanes, Turns
from reproduction.suite import Script, scripts

# Each run appends "<event> <name>" to a log: the order of the events is what the tests read.
SIDE = '''import sys, time
name, log = sys.argv[1], sys.argv[2]
open(log, "a").write(f"start {name}\\n")
time.sleep(0.15)
open(log, "a").write(f"end {name}\\n")
print(name)
'''
# The same, read off a clock as far as Script.timed can tell (the text names perf_counter()), and
# one that runs in this thread's lane as a script with ranks would (its text has "from common.launch import").
RANKS = SIDE.replace("import sys, time", "import os, sys, time  # from common.launch import launch\n"
                    "open(os.path.join(os.path.dirname(sys.argv[2]), 'ranks_ran'), 'w').close()")
# A timed one waits (10 s at most) until a script with ranks has run: were it in the side lane, it
# would then run beside the next one (this thread's lane starts late: it imports torch first).
TIMED = SIDE.replace("import sys, time", "import os, sys, time  # perf_counter()\n"
                     "waited = 0\n"
                     "while not os.path.exists(os.path.join(os.path.dirname(sys.argv[2]), 'ranks_ran')) "
                     "and waited < 200:\n    time.sleep(0.05); waited += 1")


def _scripts(tmp_path: Path, kinds: str) -> tuple[list[Script], list[list[str]], Path]:
    """A script per letter of `kinds` (s: side lane, t: reads a clock, r: has ranks), each with its
    command."""
    log = tmp_path / "events.txt"
    chosen, commands = [], []
    for i, kind in enumerate(kinds):
        path = tmp_path / f"{i:02d}_{kind}.py"
        path.write_text({"s": SIDE, "t": TIMED, "r": RANKS}[kind], encoding="utf-8")
        chosen.append(Script(path))
        commands.append([sys.executable, str(path), path.stem, str(log)])
    return chosen, commands, log


def test_results_in_order_and_a_timed_run_never_beside_another(tmp_path: Path) -> None:
    # A timed script without ranks (as lecture15/03_overlap.py) stays out of the side lane too: it
    # would run there beside the scripts with ranks.
    kinds = "srtsrtsrs"
    chosen, commands, log = _scripts(tmp_path, kinds)
    assert [(s.timed, s.real) for s in chosen] == [(c == "t", c == "r") for c in kinds]
    with Lanes(chosen, commands, drawing=False) as lanes:
        results = [lanes.run(i) for i in range(len(chosen))]
    assert [proc.stdout.strip() for proc, _ in results] == [s.path.stem for s in chosen]
    assert all(proc.forked and wall > 0.1 for proc, wall in results)
    timed = {s.path.stem for s in chosen if s.timed}
    running: set[str] = set()
    for line in log.read_text(encoding="utf-8").splitlines():
        event, name = line.split()
        if event == "start":
            # a timed run starts only when nothing else runs, and nothing starts while it runs
            assert not running or not ({name} | running) & timed, (line, running)
            running.add(name)
        else:
            running.remove(name)


def test_a_timed_run_waiting_goes_before_the_side_lanes_next_run() -> None:
    turns, order = Turns(), []
    side_in, timed_waits = threading.Event(), threading.Event()

    def timed() -> None:
        side_in.wait()
        timed_waits.set()
        with turns.alone():
            order.append("timed")

    thread = threading.Thread(target=timed)
    thread.start()
    with turns.beside():
        side_in.set()
        timed_waits.wait()
        time.sleep(0.2)   # the timed run is waiting in alone()
        order.append("side 1")
    with turns.beside():   # straight after: the timed run that waited goes first
        order.append("side 2")
    thread.join()
    assert order == ["side 1", "timed", "side 2"]
    turns.stop()
    with turns.beside() as started:
        assert not started


def test_a_side_run_whose_interpreter_died_runs_again_fresh(tmp_path: Path) -> None:
    # Killed under a run (the OOM killer, say), the interpreter takes the run's exit status with
    # it: the run starts again fresh, as Prestarted.run does, and the reproduction goes on.
    first = tmp_path / "first"
    script = tmp_path / "00_once.py"
    script.write_text(
        "import os, sys, time\n"
        f"if os.path.exists({str(first)!r}):\n    print('fresh'); sys.exit(0)\n"
        f"open({str(first)!r}, 'w').write(str(os.getppid()))\n"
        "parent = os.getppid()\nwhile os.getppid() == parent:\n    time.sleep(0.05)\n"
        "print('forked')\n", encoding="utf-8")
    with Lanes([Script(script)], [[sys.executable, str(script)]], drawing=False) as lanes:
        deadline = time.monotonic() + 60
        while not (first.exists() and first.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(first.read_text()), signal.SIGKILL)   # the interpreter, the script's parent
        proc, _ = lanes.run(0)
    assert (proc.returncode, proc.stdout, proc.forked) == (0, "fresh\n", False)


def test_every_script_that_records_a_timing_is_timed(quick_reproduction: dict) -> None:
    # Independent of Script.timed's reading of the text: what each script's --json says it timed
    # (Report.value(..., timed=True)) or the rows the notes' tables mark "measured here".
    from common import checker

    timed = {s.name for s in scripts() if s.timed}
    for run in quick_reproduction["runs"]:
        parts = run["json"]["parts"].values()
        measured = any(r.basis == checker.MEASURED for r in checker.rows_for(run["script"]))
        if measured or any(part.get("timed") for part in parts):
            assert run["script"] in timed, run["script"]


def test_the_timeline_page_is_not_computed_beside_a_timed_run(monkeypatch) -> None:
    import report.timeline

    events: list[str] = []

    def render() -> str:
        events.append("page start")
        time.sleep(0.3)
        events.append("page end")
        return "<html></html>"

    monkeypatch.setattr(report.timeline, "render_timeline", render)
    turns = Turns()
    with turns.alone():
        html = load_script("reproduce.py").timeline_in_background(turns)
        time.sleep(0.3)
        events.append("timed end")
    assert html() == "<html></html>" and events == ["timed end", "page start", "page end"]


def test_leaving_early_ends_the_side_runs_live_child(tmp_path: Path) -> None:
    # Ctrl-C or SIGTERM in the reproduction leaves the `with` block while a side run is going: that
    # run is killed, not waited for (it would outlive the reproduction, or hold it for a minute).
    pid_file = tmp_path / "pid"
    sleeper = tmp_path / "00_sleeps.py"
    sleeper.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                       "time.sleep(60)\n", encoding="utf-8")
    chosen = [Script(sleeper), Script(sleeper)]
    commands = [[sys.executable, str(sleeper)]] * 2
    lanes = Lanes(chosen, commands, drawing=False)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        pid_file.unlink()
    finally:
        start = time.monotonic()
        lanes.close()
    assert time.monotonic() - start < 5
    assert not _alive(pid)
    assert not pid_file.exists()   # the second run never started


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_script_with_a_row_measured_here_is_timed_without_a_clock_in_its_text(tmp_path: Path,
                                                                                monkeypatch) -> None:
    # A timing may come from a module of common/ (whose text Script.timed does not read): a row the
    # notes' tables mark "measured here" is enough to run the script alone.
    from common import checker

    plain = tmp_path / "01_plain.py"
    plain.write_text("print('no clock here')\n", encoding="utf-8")
    assert not Script(plain).timed
    row = type("Row", (), {"basis": checker.MEASURED})()
    monkeypatch.setattr(checker, "rows_for", lambda name: [row] if name == Script(plain).name else [])
    assert Script(plain).timed


def test_the_timeline_page_is_computed_when_the_lanes_close_before_its_turn(monkeypatch) -> None:
    # The lanes close (Turns.stop) as soon as the last script has run: a page whose thread waited
    # for a timed last script must still be computed, not given up as if interrupted.
    import report.timeline

    monkeypatch.setattr(report.timeline, "render_timeline", lambda: "<html></html>")
    turns = Turns()
    with turns.alone():
        html = load_script("reproduce.py").timeline_in_background(turns)
        time.sleep(0.2)   # the page's thread waits for its turn
    turns.stop()
    assert html() == "<html></html>"
