"""A checkout runs and tests its own code: never another clone's, never an installed copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "lecture15/exercises.py"  # model-only and quick: enough to see which `common` loads


def _run(code_dir: Path, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, str(code_dir / SCRIPT), "--quick"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_pytest_imports_this_checkouts_code() -> None:
    assert Path(common.__file__).resolve().is_relative_to(ROOT / "code")


def test_a_clone_runs_its_own_files_and_not_anothers(tmp_path: Path) -> None:
    # A second clone beside this one, with a marker planted in its runtime.
    clone = tmp_path / "clone" / "code"
    shutil.copytree(ROOT / "code", clone, ignore=shutil.ignore_patterns("__pycache__"))
    init = clone / "common" / "__init__.py"
    init.write_text(init.read_text() + "\nprint('RUNTIME OF THE SECOND CLONE')\n")
    # The clone's script sees the clone's runtime, from any working directory.
    own = _run(clone, cwd=tmp_path)
    assert own.returncode == 0, own.stderr
    # the marker the clone's runtime prints: which runtime ran
    assert "RUNTIME OF THE SECOND CLONE" in own.stdout
    # This checkout's script ignores the clone even when the clone's code/ is on PYTHONPATH (what
    # an editable install of the clone amounts to).
    mine = _run(ROOT / "code", cwd=tmp_path, env_extra={"PYTHONPATH": str(clone)})
    assert mine.returncode == 0, mine.stderr
    assert "RUNTIME OF THE SECOND CLONE" not in mine.stdout


def test_nothing_claims_generic_top_level_names_in_site_packages() -> None:
    import site

    roots = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()] if Path(p).is_dir()]
    for root in roots:
        for name in ("common", "lecture14", "lecture15", "cs336"):
            assert not (root / name).exists(), f"{root / name} is installed: the project must not install"
        for pth in root.glob("*.pth"):
            assert str(ROOT / "code") not in pth.read_text(errors="replace"), f"{pth} puts code/ on the path"
