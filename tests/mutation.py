"""Every check can fail: for each self-check of a script (Report.check_close / check_trained) and
each row of the tables that is observed on real ranks or compares two values of ours (same_as, or a
bound in an engines table), a mutation of the code that must make it fail, and the test applying it.

A mutation is a few lines of Python run after the script is loaded and before its main() (conftest's
PATCHED): it edits `module` (the script) or what the script imports, and the forked ranks inherit it.
It breaks one thing a check exists to catch (an engine that drifts, a collective miscounted, a
schedule reordered) and must end the run one of two ways:

- `sites`: self-checks (a phrase of the first argument of their call, as written in the script) that
  fail: the run exits 1 with one line on stderr, which `fails` (a regex) must match;
- `rows`: rows whose verdict must become "differs": the run ends 0 and its --json says so.

`covered_by` names an older test that applies the mutation instead (its module::function); such an
entry is only listed here so that test_every_check_can_fail sees the check covered.

    python tests/mutation.py     # the table check -> mutation -> test, as markdown
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# a self-check: a line of its own (check_close, check_trained, check_equal) or a mark in a table (mark)
CHECK_CALL = re.compile(r"\.(?:check_(?:close|trained|equal)|mark(?:_trained)?)\("
                        r"\s*((?:f?\"[^\"]*\")|[A-Za-z_][\w\[\]\.]*)")


@dataclass(frozen=True)
class Mutation:
    name: str                      # what goes wrong, in words: the table's "mutation" column
    script: str                    # relpath under code/
    patch: str = ""                # Python editing `module` (the script) or what it imports
    args: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()    # self-checks that must fail (a phrase of their call's first argument)
    fails: str = ""                # the regex the one stderr line of a failed run matches
    rows: tuple[str, ...] = ()     # rows whose verdict must become "differs"
    covered_by: str = ""           # "module_of_test.py::test_function" that applies it instead

    @property
    def test_id(self) -> str:
        return re.sub(r"[^\w]+", "-", self.name).strip("-")[:60]


def run(tmp_path: Path, mutation: Mutation) -> None:
    """Apply `mutation` and assert it ends the run as it says."""
    from conftest import PATCHED, python
    out = tmp_path / "mutated.json"
    args = [*mutation.args] + (["--json", str(out)] if mutation.rows else [])
    script = ROOT / "code" / mutation.script
    wrapper = tmp_path / "mutated.py"
    wrapper.write_text(PATCHED.format(code=str(ROOT / "code"), argv0=script.name, args=args,
                                      script=str(script), patch=mutation.patch), encoding="utf-8")
    proc = python(wrapper)
    if mutation.sites:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
        assert re.search(mutation.fails, lines[0]), lines[0]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    claims = {c["ref"]: c for c in json.loads(out.read_text(encoding="utf-8"))["claims"]}
    wrong = {row: claims.get(row, {}).get("status") for row in mutation.rows}
    assert all(status == "differs" for status in wrong.values()), wrong


def module_of_test(name: str):  # type: ignore[no-untyped-def]
    """The test module of that file name ("test_09_zero.py"), wherever under tests/ it lives (a test
    file's name is unique there: docs/testing.md), imported as pytest imports it."""
    (path,) = TESTS.rglob(name)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    return importlib.import_module(path.stem)


def all_mutations() -> list[Mutation]:
    """Every test_mutations_*.py module's MUTATIONS, in file order."""
    found: list[Mutation] = []
    for path in sorted(TESTS.rglob("test_mutations_*.py"), key=lambda p: p.name):
        found += module_of_test(path.name).MUTATIONS
    return found


def check_sites() -> list[tuple[str, str]]:
    """(script relpath, the first argument of the call as written) for every self-check in code/."""
    sites = []
    for path in sorted((ROOT / "code").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for found in CHECK_CALL.finditer(text):
            sites.append((path.relative_to(ROOT / "code").as_posix(), found[1]))
    return sites


def checked_rows() -> list[str]:
    """The rows a mutation must be able to flip: observed on real ranks, or our values compared with
    each other (same_as) or with a bound of our own (an engines table)."""
    sys.path.insert(0, str(ROOT / "code"))
    from common import checker
    return [r.id for r in checker.all_rows() if not r.unchecked and r.compares
            and (r.basis == checker.OBSERVED or r.same_as or (r.own and r.bound is not None))]


def table() -> str:
    lines = ["| check | mutation | test |", "|---|---|---|"]
    for m in all_mutations():
        test = m.covered_by or f"test_mutations (id {m.test_id})"
        for what in [f"{m.script}: check {s!r}" for s in m.sites] + [f"row {r}" for r in m.rows]:
            lines.append(f"| {what} | {m.name} | {test} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
