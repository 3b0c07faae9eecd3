"""practice/judging/casefolder.py: a case's folder never outlives the judge, even when a signal lands
while it is being made (the window test_interrupts' judge test found under load: the folder made,
its first snapshot not yet taken, the judge not yet holding it to remove)."""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "practice"))
from judging import casefolder, engine  # noqa: E402


def test_a_signal_while_the_folder_is_made_removes_it(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made: list[Path] = []

    def interrupted(places: list[Path]) -> dict:
        made.extend(tmp_path.glob("judge-case-*"))   # the folder exists when the signal lands
        raise KeyboardInterrupt
    monkeypatch.setattr(casefolder, "_snapshot", interrupted)
    with pytest.raises(KeyboardInterrupt):
        casefolder.CaseFolder.make(tmp_path / "solution.py")
    assert made and not list(tmp_path.glob("judge-case-*"))


def test_a_folder_made_whole_is_kept_for_the_case(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = casefolder.CaseFolder.make(tmp_path / "solution.py")
    assert folder.path.is_dir() and folder.path.parent == tmp_path.resolve()
    assert folder.settle() == [] and not folder.path.exists()


def test_a_signal_as_the_judge_takes_the_folder_removes_it(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """The judge holds signals while it makes the folder and learns its name: a Ctrl-C that lands
    right after the folder is made (raised here by the patched make) finds it known and removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = casefolder.CaseFolder.make

    def make_then_ctrl_c(solution: Path) -> casefolder.CaseFolder:
        folder = made(solution)
        signal.raise_signal(signal.SIGINT)
        return folder
    monkeypatch.setattr(casefolder.CaseFolder, "make", staticmethod(make_then_ctrl_c))
    with tempfile.TemporaryFile() as capture, pytest.raises(KeyboardInterrupt):
        engine._judge_one("113", None, None, tmp_path / "solution.py", 1.0, capture)  # type: ignore[arg-type]
    assert not list(tmp_path.glob("judge-case-*"))
