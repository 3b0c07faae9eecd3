"""The suite's scripts, as the reproduce command and the benchmark see them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CODE = Path(__file__).resolve().parents[1]
LECTURES = ("lecture14", "lecture15", "cs336")
# Scripts that start real processes; the rest run models only.
_REAL_MARKERS = ("from common.launch import",)
# How a script reads a clock, itself or through common/ (launch_expecting_failure, and
# skipped_collective around it: the seconds until the launcher gave up, printed).
_CLOCKS = (r"\bperf_counter\(|\btime\.time\(|\bmonotonic\(|\btimed=True\b|\blaunch_expecting_failure\("
           r"|\bskipped_collective\(")
SHORTENS = r"\bquick=|\.quick\b"   # how a script's code sees --quick (common/cli.py applies quick=)


@dataclass(frozen=True)
class Script:
    path: Path

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def sources(self) -> list[str]:
        """Its text, then that of each module of the suite it imports (`from lecture15.x import`)."""
        text = self.path.read_text(encoding="utf-8")
        modules = re.findall(rf"^from ({'|'.join(LECTURES)})\.(\w+) import", text, flags=re.M)
        return [text] + [(CODE / package / f"{module}.py").read_text(encoding="utf-8")
                         for package, module in modules if (CODE / package / f"{module}.py").is_file()]

    @property
    def draws(self) -> bool:
        """It draws figures (so it offers --save-figs): it calls Report.save_figure, itself or in a
        module of the suite it imports (a part moved into a module keeps its figure)."""
        return any("save_figure(" in source for source in self.sources)

    @property
    def shortened(self) -> bool:
        """--quick changes what it runs: it gives make_parser quick= defaults or reads args.quick,
        itself or in a module it imports. Otherwise its --quick run is its full run."""
        return any(re.search(SHORTENS, source) for source in self.sources)

    @property
    def doc(self) -> str:
        """The first line of its docstring: the notes' section it reproduces."""
        import ast

        text = ast.get_docstring(ast.parse(self.path.read_text(encoding="utf-8"))) or ""
        return text.strip().splitlines()[0] if text.strip() else ""

    @property
    def timed(self) -> bool:
        """It prints a number read off a clock (itself or in a module it imports), or records a row
        the notes' tables mark as measured here: a reproduction gives its run the machine alone."""
        from common import checker

        return (any(re.search(_CLOCKS, source) for source in self.sources)
                or any(r.basis == checker.MEASURED for r in checker.rows_for(self.name)))

    @property
    def real(self) -> bool:
        text = self.path.read_text(encoding="utf-8")
        return any(marker in text for marker in _REAL_MARKERS)


def scripts(include_extras: bool = True) -> list[Script]:
    """Numbered scripts of each lecture in order, then (optionally) the other runnable scripts."""
    found: list[Script] = []
    for lecture in LECTURES:
        folder = CODE / lecture
        numbered = sorted(folder.glob("[0-9][0-9]_*.py"))
        extras = sorted(p for p in folder.glob("*.py") if p not in numbered and _is_runnable(p))
        found += [Script(p) for p in numbered + (extras if include_extras else [])]
    return found


def named_by(only: str, name: str) -> bool:
    """--only's test: the name contains the text, or one of its comma-separated texts."""
    return any(text in name for text in only.split(","))


def _is_runnable(path: Path) -> bool:
    return "run_main(main)" in path.read_text(encoding="utf-8")  # scripts, not modules
