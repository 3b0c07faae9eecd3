"""The maintainer's fast loop (tests/fast_loop.py) cannot hold a test that starts a process: a test
marked fast that runs a script, forks or asks for the session's reproduction fails, and without the
guard it would pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PROBE = '''
import os, subprocess, sys
import pytest

def test_runs_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_forks():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

def test_asks_for_the_reproduction(quick_reproduction):
    pass

def test_computes():
    assert sum(range(10)) == 45
'''


def _run(tmp_path: Path, guarded: bool) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n" + ("pytest_plugins = ['fast_loop']\n" if guarded else "")
        + "@pytest.fixture\ndef quick_reproduction():\n    return {}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT / "code")]),
               COURSE_FAST_PROBE="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-o", "addopts=", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.stdout


def test_a_fast_test_that_starts_a_process_fails(tmp_path: Path) -> None:
    out = _run(tmp_path, guarded=True)
    assert "2 failed, 1 passed, 1 error" in out, out[-2000:]   # the fixture's refusal is an error
    summary = out.split("short test summary")[-1]
    assert summary.count("fast_loop.ProcessStarte") == 3 and "test_computes" not in summary, summary


def test_without_the_guard_they_pass(tmp_path: Path) -> None:
    out = _run(tmp_path, guarded=False)
    assert "4 passed" in out, out[-2000:]
