"""docs/testing.md's "Where a test lives" finds every module's tests: a module of code/ is found
when the naming rule's file exists and names it, or when the section's table lists it (with the
files that test it). A new module without either fails here, so the next maintainer's guess by
name, or the table, is always right. Process-free."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from code_modules import CODE, code_modules

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


def imports(text: str, dotted: str) -> bool:
    """Whether a test's text imports the module (or names its dotted path, as a patch target does)."""
    package, _, stem = dotted.rpartition(".")
    return bool(re.search(rf"\b{re.escape(dotted)}\b", text)
                or re.search(rf"^\s*from {re.escape(package)} import [^\n]*\b{re.escape(stem)}\b", text,
                             re.M))


def found(rel: Path, listed: frozenset[str]) -> bool:
    """A module's own test file (test_<stem>.py) must name it; where the rule points to a whole
    folder of tests (the launcher's files, tests/report/, tests/reproduction/) one of them must
    import it: its bare name in a sentence ("on this machine") finds nothing."""
    stem = rel.parent.name if rel.name == "__init__.py" else rel.stem
    dotted = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
    for test in rule_files(rel):
        if not test.is_file():
            continue
        text = test.read_text(encoding="utf-8")
        own = test.stem in (f"test_{stem}", f"test_{rel.parts[0]}_{stem}")
        if imports(text, dotted) or (own and re.search(rf"\b{re.escape(stem)}\b", text)):
            return True
    return rel.as_posix() in listed


def modules() -> list[Path]:
    """Every module of code/ with code in it (an __init__ that is only a docstring has none)."""
    return [p.relative_to(CODE) for p in code_modules().values()
            if p.name != "__init__.py" or len(p.read_text(encoding="utf-8").splitlines()) >= 10]


def test_every_module_is_found_by_the_rule_or_the_table() -> None:
    assert len(modules()) > 100
    assert [m.as_posix() for m in modules() if not found(m, table())] == []


def test_a_module_neither_rule_nor_table_finds_is_missed() -> None:
    assert not found(Path("common/not_a_module_xyz.py"), table())
    # a word a folder's tests use in a sentence is no test of a module by that name
    for made_up in ("report/model.py", "reproduction/cache.py", "common/launch/process.py"):
        assert not found(Path(made_up), table()), made_up
    assert found(Path("common/not_a_module_xyz.py"), table() | {"common/not_a_module_xyz.py"})
    # the rule alone: tests/common/test_checker.py names checker
    assert found(Path("common/checker.py"), frozenset())
