"""common.lanes: the reproduction's two lanes give each script's result in order, keep a script that
reads a clock alone on the machine, and leave nothing running when they are left early."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from common.lanes import Lanes
from common.suite import Script

# Each run appends "<event> <name>" to a log: the order of the events is what the tests read.
SIDE = '''import sys, time
name, log = sys.argv[1], sys.argv[2]
open(log, "a").write(f"start {name}\\n")
time.sleep(0.15)
open(log, "a").write(f"end {name}\\n")
print(name)
'''
# The same, read off a clock as far as Script.timed can tell (the text names perf_counter()).
TIMED = SIDE.replace("import sys, time", "import sys, time  # perf_counter()")


def _scripts(tmp_path: Path, kinds: str) -> tuple[list[Script], list[list[str]], Path]:
    """A script per letter of `kinds` (s: side lane, t: reads a clock), each with its command."""
    log = tmp_path / "events.txt"
    chosen, commands = [], []
    for i, kind in enumerate(kinds):
        path = tmp_path / f"{i:02d}_{kind}.py"
        path.write_text(TIMED if kind == "t" else SIDE, encoding="utf-8")
        chosen.append(Script(path))
        commands.append([sys.executable, str(path), path.stem, str(log)])
    return chosen, commands, log


def test_results_in_order_and_a_timed_run_never_beside_a_side_run(tmp_path: Path) -> None:
    chosen, commands, log = _scripts(tmp_path, "sstssts")
    assert [s.timed for s in chosen] == [c == "t" for c in "sstssts"]
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
