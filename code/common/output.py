"""Printing for every script: part headers with the notes' part numbers, aligned tables, ASCII bars,
the claims record (our number beside the notes' number) and figures written only when asked.

A script makes one `Report`, calls `part()` for each section of the notes, and `finish()` at the
end; `--json PATH` then holds every table, recorded value and claim, machine-readable.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from dataclasses import asdict
from typing import Any, Sequence

from common import checker, verdicts
from common.checker import Claim
from common.error_types import RunFailure
from common.notes_setting import off_setting
from common.output_files import make_output_dir, write_bytes, write_json
from common.text import PAGE_WIDTH, format_table, paragraphs, wrap
from common.trained_weights import MOVED_SHARE, trained_test
from common.units import fmt_num


class Report:
    """What one run of a script prints, and records for --json."""

    def __init__(self, script: str, title: str, args: argparse.Namespace | None = None) -> None:
        self.script = os.path.basename(script)
        self.lecture = os.path.basename(os.path.dirname(os.path.abspath(script)))
        self.args = args
        self.parts: dict[str, dict[str, Any]] = {}
        self.claims: list[Claim] = []
        self._part = "intro"
        self.parts[self._part] = {"title": title}
        # The prose and figure captions, for the pages; kept beside "parts" (whose values the tests
        # compare run against run) since prose may quote a timing.
        self.prose: dict[str, list[dict[str, str]]] = {}
        self.captions: dict[str, str] = {}
        self.rows = checker.rows_for(f"{self.lecture}/{self.script}")
        self._values: dict[str, Any] = {}     # every named value recorded so far (the rows' reasons use them)
        self._fresh: list[str] = []           # names recorded since the last comparison table
        self._words: set[str] = set()        # the verdict words printed, each explained under its first table
        self._cell_notes: dict[str, str] = {}  # assumption -> its mark (¹, ²…) in a part's own table
        self.failures: list[str] = []         # self-checks that failed: the run ends in exit status 1
        self.check_lines = 0                  # lines of self-checks printed (--json "check_lines"; a test
                                              # keeps them to a quarter of the output)
        print(wrap(f"{self.script}: {title}", "    ", ""))
        if args is not None and getattr(args, "quick", False):
            print("(--quick: the same code, with shorter runs where a part has any to shorten)")

    # ---- structure -------------------------------------------------------------------------
    def part(self, number: int | str, title: str) -> None:
        """A header carrying the notes' part number, e.g. 'Part 3: pipelined broadcast'. The part
        before it ends with its comparison with the notes."""
        self.compare_with_notes()
        self._part = f"Part {number}"
        self.parts[self._part] = {"title": title}
        print("\n" + wrap(f"== {self._part}: {title}", "   ", ""))

    def line(self, text: str = "") -> None:
        """A line of prose, wrapped to the page with its own indent; lines that are no prose
        (charts, bars: too long a word to break) are printed as they are."""
        self._keep("line", text)
        for one in text.split("\n"):
            if len(one) <= PAGE_WIDTH:
                print(one)
                continue
            indent = one[:len(one) - len(one.lstrip())]
            print(wrap(one.strip(), indent + "  ", indent))

    def note(self, text: str) -> None:
        """An assumption or an explanation, marked so it stands out from the results. Reflowed to
        the page: a single line break is a space; a blank line, or a line starting "- ", starts a
        new paragraph."""
        self._keep("note", "\n\n".join(paragraphs(text)))
        for i, chunk in enumerate(paragraphs(text)):
            print(wrap(chunk, "        ", "  note: " if i == 0 else "        "))

    def _keep(self, kind: str, text: str) -> None:
        """Prose for --json's "prose" (by part): "line" as printed, "note" as its paragraphs."""
        self.prose.setdefault(self._part, []).append({"kind": kind, "text": text})

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], name: str | None = None) -> None:
        rows = [list(r) for r in rows]
        print(format_table(headers, rows))
        tables = self.parts[self._part].setdefault("tables", {})
        tables[name or f"table{len(tables) + 1}"] = {"headers": list(headers), "rows": rows}

    # ---- our values, the notes' rows, self-checks ------------------------------------------------
    def value(self, name: str, value: Any, timed: bool = False, compared: bool = True) -> Any:
        """Record a named value for --json; returns it. The one way a script records a number.

        By default it is what the notes' rows (checker) compare with and their reasons name, kept
        under the part's "values", once a run. `timed`: read off a clock (or computed from one), also
        listed under the part's "timed" (another run, torchrun's included, gives other numbers by
        nature). compared=False: kept for --json only, beside the part's title, and no row reads it
        (a table's raw data, a sweep's inputs); recording it again replaces it.
        """
        part = self.parts[self._part]
        if not compared:
            part[name] = value
            return value
        if name in self._values:
            raise ValueError(f"{self.script}: the value {name!r} is recorded twice")
        self._values[name] = value
        self._fresh.append(name)
        part.setdefault("values", {})[name] = value
        if timed:
            part.setdefault("timed", []).append(name)
        return value

    def notes_text(self, row_id: str) -> str:
        """A row's notes' value with its unit, read from the notes' table, for a script's own table
        that shows it beside ours (the script never types a notes' value)."""
        row = checker.row(row_id)
        return f"{fmt_num(row.notes_shown)} {row.unit}".strip()

    def compare_with_notes(self, in_table: bool = False) -> None:
        """Decide the rows whose values were recorded since the last call, and print them as one
        compact table (called by part() and finish(); a part may call it to place the table).
        in_table=True: the part's own table already shows the notes' figures beside ours
        (notes_text), so one line counts the verdicts and only the reasons follow."""
        fresh, self._fresh = set(self._fresh), []
        rows = [r for r in self.rows if r.value in fresh]
        if not rows:
            return
        claims = [checker.decide(r, self._part, self._values, self._off(r)) for r in rows]
        self.claims += claims
        notes, self._cell_notes = self._cell_notes, {}
        printed = "\n".join(verdicts.summary_lines(claims, notes) if in_table
                            else verdicts.comparison_lines(claims))
        print(printed)
        if all(r.own for r in rows):      # checks of ours (engines.toml), not the notes' statements
            self.check_lines += printed.count("\n") + 1
        new = {verdicts.verdict(c) for c in claims} - self._words
        for text in verdicts.legend_lines(new):      # each word explained under its first table
            print(text)
        self._words |= new

    def marked(self, shown: Any, row_id: str, values: dict[str, Any]) -> str:
        """`shown` (a cell of a script's own table) with the mark of the verdict the notes' row
        `row_id` gets on `values`, decided as compare_with_notes will: "30 ✓¹" (verdicts.cell_mark;
        the superscript names the assumption, printed once under the part's count)."""
        row = checker.row(row_id)
        claim = checker.decide(row, self._part, values, self._off(row))
        mark, assumption = verdicts.cell_mark(claim), verdicts.assumption_of(claim)
        if assumption:
            mark += self._cell_notes.setdefault(assumption, verdicts.superscript(len(self._cell_notes)))
        return f"{fmt_num(shown) if not isinstance(shown, str) else shown} {mark}"

    def marks_legend(self) -> None:
        """The line under a table with marks (Report.marked): each mark as a verdict word."""
        self.line(verdicts.MARKS_LEGEND)

    def _off(self, row: checker.Row) -> list[str]:
        if self.args is None:
            return []
        return off_setting(self.args, checker.setting_dests(row, getattr(self.args, "_notes_setting", {})))

    def check_close(self, what: str, gap: float, tolerance: float) -> bool:
        """A self-check: `gap` (e.g. the largest |difference| from one process) within `tolerance`.
        Printed either way; a gap beyond it ends the run in exit status 1 with one line naming
        `what` and the gap (after the output, before --json is written)."""
        ok = gap <= tolerance  # a NaN gap fails
        compared = (("no difference" if ok else f"max |difference| {gap:.3g}, none allowed")
                    if tolerance == 0 else f"max |difference| {gap:.3g} {'≤' if ok else '>'} {tolerance:g}")
        text = f"check: {what}: {compared}: {'ok' if ok else 'FAILED'}"
        self._print_check(text)
        if not ok:
            self.failures.append(f"{what}: max |difference| {gap:.3g}, above the tolerance {tolerance:g}")
        return ok

    def check_trained(self, what: str, gap: float, moved: float, step_one: float | None = None,
                      tolerance: float = 0.0, share: float = MOVED_SHARE, relative: bool = False,
                      against: str = "one process") -> bool:
        """A self-check of training against one process, in one line: `gap` (the largest |ours − one
        process| of the trained weights) within MOVED_SHARE of `moved` (the largest |after − before|
        in one process); and `step_one` (step 1's outputs and gradients, before any update), if given,
        within `tolerance` (relative=True: `step_one` is already each quantity's |difference| over its
        size in one process, the largest of them). `share`: MOVED_SHARE, or FLOAT32_MOVED_SHARE for
        float32 weights. A failure ends the run as check_close's does."""
        ok, _, said, wrong = trained_test(gap, moved, step_one, tolerance, share, relative)
        self._print_check(f"check: {what} against {against}: {said}: {'ok' if ok else 'FAILED'}")
        if not ok:
            self.failures.append(f"{what} against {against}: {wrong}")
        return ok

    def mark_trained(self, what: str, gap: float, moved: float, step_one: float | None = None,
                     tolerance: float = 0.0, share: float = MOVED_SHARE, relative: bool = False,
                     against: str = "") -> tuple[str, str]:
        """check_trained's test as a mark in a table (mark): returns the mark and the gap as a share
        of the movement, as printed ("5.6e-14"); a failure names `what` (and `against`)."""
        ok, off, _, wrong = trained_test(gap, moved, step_one, tolerance, share, relative)
        return self._mark(what, ok, (f"against {against}: " if against else "") + wrong), f"{off:.1e}"

    def check_equal(self, what: str, ours: Any, expected: Any) -> bool:
        """A self-check of whole things (counts, bytes, orders): `ours` == `expected`, printed in one
        line either way; unequal ends the run as check_close's gap does."""
        ok = ours == expected
        self._print_check(f"check: {what}: {fmt_num(ours)} {'=' if ok else '≠'} {fmt_num(expected)}: "
                          f"{'ok' if ok else 'FAILED'}")
        if not ok:
            self.failures.append(f"{what}: {fmt_num(ours)}, expected {fmt_num(expected)}")
        return ok

    def mark(self, what: str, ok: bool, detail: str = "") -> str:
        """A self-check shown as a mark in a table's cell instead of a line of its own: returns "ok"
        or "FAILED"; a failure ends the run as check_close's does, naming `what` (and `detail`)."""
        return self._mark(what, ok, detail)

    def _mark(self, what: str, ok: bool, detail: str) -> str:
        # mark's body, called by mark_trained too (a call site of `.mark(` is a check a mutation names)
        if not ok:
            self.failures.append(what + (f": {detail}" if detail else ""))
        return "ok" if ok else "FAILED"

    def _print_check(self, text: str) -> None:
        self._keep("check", text)
        printed = wrap(text, "    ", "  ")
        self.check_lines += printed.count("\n") + 1
        print(printed)

    def at_notes_setting(self, setting: Sequence[str] | None = None) -> bool:
        """Whether this run is at the notes' setting in the flags `setting` (dests; None: all of
        them), the test the rows' `depends` get: for text that names the notes' setting."""
        return not off_setting(self.args, setting) if self.args is not None else True

    # ---- figures and the end ---------------------------------------------------------------
    def figure_dir(self) -> str | None:
        return getattr(self.args, "save_figs", None) if self.args is not None else None

    def figure_name(self, name: str) -> str:
        """One scheme across lectures: <lecture>_<script number or name>_<name>, e.g.
        lecture15_03_timeline (the prefix is added unless `name` already carries it)."""
        stem = self.script.removesuffix(".py")
        prefix = f"{self.lecture}_{stem.split('_')[0] if stem[:2].isdigit() else stem}_"
        return name if name.startswith(prefix) else prefix + name

    def save_figure(self, fig: Any, name: str) -> None:
        """Write a matplotlib figure as DIR/<figure_name(name)>.png when --save-figs DIR was given."""
        directory = self.figure_dir()
        if directory is None:
            return
        make_output_dir(directory)
        path = os.path.join(directory, f"{self.figure_name(name)}.png")
        self.parts[self._part].setdefault("figures", []).append(os.path.basename(path))
        self.captions[os.path.basename(path)] = figure_caption(fig)
        png = io.BytesIO()
        fig.savefig(png, dpi=110, bbox_inches="tight", format="png")
        write_bytes(path, png.getvalue())
        print(f"  figure written: {path}")

    def finish(self) -> dict[str, Any]:
        """Compare the last part with the notes; fail (exit status 1) if a self-check failed;
        write --json PATH if asked; returns what it wrote. A row whose value this run never
        recorded is printed as such ("not recorded": a test fails on it)."""
        self.compare_with_notes()
        missing = [r for r in self.rows if r.value not in self._values]
        for row in missing:
            self.claims.append(Claim(self._part, row.what, None, row.notes, row.unit, row.basis, "not "
                                                                                                 "recorded",
                                     f"{self.script} recorded no value {row.value!r}", ref=row.id))
        if missing:
            print(wrap("not recorded (rows of the notes this run has no value for): "
                       + ", ".join(r.id for r in missing), "    ", "  "))
        if self.failures:
            more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
            raise RunFailure(self.failures[0] + more)
        data = {"script": self.script, "argv": sys.argv[1:], "parts": self.parts,
                "claims": [dict(asdict(c), verdict=verdicts.verdict(c)) for c in self.claims],
                "prose": self.prose, "captions": self.captions, "check_lines": self.check_lines}
        path = getattr(self.args, "json", None) if self.args is not None else None
        if path:
            write_json(path, data)
        return data


def figure_caption(fig: Any) -> str:
    """What a figure shows, in its own words: its overall title, else its panels' titles."""
    suptitle = getattr(fig, "_suptitle", None)
    titles = [suptitle.get_text()] if suptitle is not None and suptitle.get_text() else []
    titles = titles or [ax.get_title() for ax in fig.get_axes() if ax.get_title()]
    return " · ".join(" ".join(t.split()) for t in titles)
