"""docs/testing.md's "Where a test lives" finds every module's tests: a module of code/ is found
when the naming rule's file exists and names it, or when the section's table lists it (with the
files that test it). A new module without either fails here, so the next maintainer's guess by
name, or the table, is always right. Process-free."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LECTURES = ("lecture14", "lecture15", "cs336")
LAUNCH_FILES = ("test_launcher.py", "test_parent_side.py", "test_torchrun.py")   # the launcher package's


@cache
def table() -> frozenset[str]:
    """The modules the section's table lists (its first column, as code/-relative paths)."""
    section = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8").split("## Where a test lives", 1)[1]
    rows = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("| `")]
    return frozenset(name for row in rows for name in re.findall(r"`([\w/]+\.py)`", row.split("|")[1]))


def rule_files(rel: Path) -> list[Path]:
    """The test files the naming rule points to for `rel` (relative to code/)."""
    tests, first = ROOT / "tests", rel.parts[0]
    if first in LECTURES:
        return [tests / first / f"test_{rel.stem}.py", tests / first / f"test_{first}_{rel.stem}.py"]
    if rel.parts[:2] == ("common", "launch"):
        return [tests / "common" / name for name in LAUNCH_FILES]
    if first == "common":
        return [tests / "common" / f"test_{rel.parent.name if rel.stem == '__init__' else rel.stem}.py"]
    folder = {"reproduction": "reproduction", "reproduce.py": "reproduction", "report": "report"}.get(first)
    return sorted((tests / folder).glob("test_*.py")) if folder else []


def found(rel: Path, listed: frozenset[str]) -> bool:
    stem = rel.parent.name if rel.name == "__init__.py" else rel.stem
    dotted = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
    by_rule = any(f.is_file() and (dotted in (text := f.read_text(encoding="utf-8"))
                                   or re.search(rf"\b{re.escape(stem)}\b", text))
                  for f in rule_files(rel))
    return by_rule or rel.as_posix() in listed


def modules() -> list[Path]:
    """Every module of code/ with code in it (an __init__ that is only a docstring has none)."""
    return [p.relative_to(ROOT / "code") for p in sorted((ROOT / "code").rglob("*.py"))
            if p.name != "__init__.py" or len(p.read_text(encoding="utf-8").splitlines()) >= 10]


def test_every_module_is_found_by_the_rule_or_the_table() -> None:
    assert len(modules()) > 100
    assert [m.as_posix() for m in modules() if not found(m, table())] == []


def test_a_module_neither_rule_nor_table_finds_is_missed() -> None:
    assert not found(Path("common/not_a_module_xyz.py"), table())
    assert found(Path("common/not_a_module_xyz.py"), table() | {"common/not_a_module_xyz.py"})
    # the rule alone: tests/common/test_checker.py names checker
    assert found(Path("common/checker.py"), frozenset())
