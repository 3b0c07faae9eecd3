"""Helpers for the tests: run a numbered script as a student would, in a fresh process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def code_env(**extra: str) -> dict[str, str]:
    """The environment for a `python -c` child that imports this checkout's code/ (scripts run by
    path find it themselves)."""
    path = os.pathsep.join(filter(None, [str(ROOT / "code"), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def run_script(relpath: str, *args: str, timeout: float = 120, expect_rc: int | None = 0) -> subprocess.CompletedProcess:
    """Run code/<relpath> with args; check the exit status (None: don't) and return the result."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(ROOT / "code" / relpath), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError(f"{relpath} {' '.join(args)} exited {proc.returncode}, expected {expect_rc}\n"
                             f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}")
    return proc


def flat(text: str) -> str:
    """Output with its line wrapping undone (every run of whitespace one space), for tests that
    look for a phrase wherever the page width broke it."""
    return " ".join(text.split())


def assert_usage_error(relpath: str, *args: str) -> None:
    """Bad input: exit status 2, exactly one line on stderr, no traceback."""
    proc = run_script(relpath, *args, expect_rc=2, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def load_script(relpath: str) -> ModuleType:
    """Import code/<relpath> as a module without running main() (numbered names are no identifiers)."""
    path = ROOT / "code" / relpath
    name = f"script_{path.parent.name}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def script():
    return run_script


def _reproduction(tmp_path_factory: pytest.TempPathFactory, *flags: str) -> dict:
    out = tmp_path_factory.mktemp("reproduce") / "all.json"
    run_script("reproduce.py", *flags, "--json", str(out), timeout=540)
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def quick_reproduction(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`reproduce.py --quick --json`, run once for every test that reads it."""
    return _reproduction(tmp_path_factory, "--quick")


@pytest.fixture(scope="session")
def full_reproduction(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`reproduce.py --json` without --quick, run once."""
    return _reproduction(tmp_path_factory)
