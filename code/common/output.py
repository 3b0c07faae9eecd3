"""Printing for every script: part headers with the notes' part numbers, aligned tables, ASCII bars,
the claims record (our number beside the notes' number) and figures written only when asked.

A script makes one `Report`, calls `part()` for each section of the notes, and `finish()` at the
end; `--json PATH` then holds every table, recorded value and claim, machine-readable.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import textwrap
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Iterable, Sequence

from common.cli import off_setting
from common.files import make_output_dir, write_bytes, write_json

# How a number the notes quote relates to ours.
EXACT = "exact formula"             # a closed form: must agree
ASSUMPTION = "stated assumption"    # agrees only under an assumption the output states
MEASURED = "measured here"          # a timing or count on this machine; the notes' came from another

PAGE_WIDTH = 100  # every line of prose fits a terminal of this many columns


def wrap(text: str, indent: str = "", first: str | None = None, width: int = PAGE_WIDTH,
         reflow: bool = True) -> str:
    """`text` wrapped at spaces to `width` columns: `first` before the first line (default
    `indent`), `indent` before the others. Never breaks a word or a number. With `reflow` runs of
    whitespace (line breaks too) become one space; without, spacing inside a line is kept."""
    text = " ".join(text.split()) if reflow else text.strip()
    return textwrap.fill(text, width, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def fmt_num(value: Any, digits: int = 4) -> str:
    """Compact number: 4 significant digits, thousands separators for big integers."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int) and abs(value) >= 10**15:
        return f"{value:.{max(digits - 1, 1)}e}"  # never a 300-digit cell
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15
                                  and abs(value) >= 1000):
        return f"{int(value):,}"
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return f"{value:g}"
        if 1e-3 <= abs(value) < 1e6:
            return f"{value:.{digits}g}"
        return f"{value:.{max(digits - 1, 1)}e}"
    return str(value)


def fmt_time(seconds: float) -> str:
    """Seconds with a readable unit: 3.15 ms, 17.5 µs, 1.2 s."""
    s = abs(seconds)
    if s >= 1:
        return f"{seconds:.3g} s"
    if s >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if s >= 1e-6 or s == 0:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def fmt_bytes(nbytes: float, binary: bool = False) -> str:
    """Bytes with a unit: powers of 1000 (KB, MB) or, with binary=True, of 1024 (KiB, MiB)."""
    base, units = (1024, ["B", "KiB", "MiB", "GiB", "TiB"]) if binary else (1000, ["B", "KB", "MB", "GB", "TB"])
    value, unit = float(nbytes), units[0]
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            break
        value /= base
    return f"{value:.4g} {unit}"


def bar(value: float, full_scale: float, width: int = 40, char: str = "█") -> str:
    """An ASCII bar: `width` characters stand for `full_scale`."""
    if full_scale <= 0 or not math.isfinite(value):
        return ""
    return char * max(0, min(width, round(width * value / full_scale)))


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], width: int | None = None) -> str:
    """Rows under headers, columns aligned; numbers right-aligned and formatted by fmt_num.

    When the table would be wider than `width` (the page, 100 columns), long headers wrap onto
    several lines at their spaces, so a column is only as wide as its widest cell or header word.
    """
    width = PAGE_WIDTH if width is None else width
    rows = [list(row) for row in rows]
    cells = [[c if isinstance(c, str) else fmt_num(c) for c in row] for row in rows]
    numeric = [bool(rows) and all(not isinstance(row[i], str) for row in rows) for i in range(len(headers))]
    data_w = [max([0] + [len(r[i]) for r in cells]) for i in range(len(headers))]
    widths = [max(len(h), w) for h, w in zip(headers, data_w)]
    head_lines = [[h] for h in headers]
    if 2 + sum(widths) + 2 * (len(widths) - 1) > width:
        widths = [max(w, max((len(word) for word in h.split()), default=0)) for h, w in zip(headers, data_w)]
        head_lines = [textwrap.wrap(h, w) or [""] for h, w in zip(headers, widths)]
    depth = max(len(h) for h in head_lines)

    def line(values: Sequence[str], align: bool = True) -> str:
        out = [v.rjust(w) if num and align else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  " + "  ".join(out).rstrip()

    heads = [line([h[i - depth + len(h)] if i >= depth - len(h) else "" for h in head_lines])
             for i in range(depth)]
    sep = "  " + "  ".join("-" * w for w in widths)
    return "\n".join(heads + [sep] + [line(r) for r in cells])


def _paragraphs(text: str) -> list[str]:
    paragraphs: list[list[str]] = [[]]
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line or line.startswith("- "):
            paragraphs.append([])
        if line:
            paragraphs[-1].append(line)
    return [" ".join(p) for p in paragraphs if p]


@dataclass
class Claim:
    """A number the notes quote, beside ours."""

    part: str
    what: str
    ours: Any
    notes: Any
    unit: str
    kind: str
    status: str
    why: str
    rule: str = ""      # how agreement was decided: "rounds to 1 decimal place", "within a factor of 3", "exact"
    decision: str = ""  # what the rule found: "53.08 rounds to 53.1; the notes print 53.3"
    ref: str = ""       # the inventory entry it checks (inventory/*.md)
    erratum: bool = False  # the notes are wrong here; `why` gives the correct value and the reason


def _rounded(value: float, places: int) -> Decimal:
    """`value` rounded half away from zero to `places` decimals (no binary-float surprises)."""
    return Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)


def _rounds_to(ours: float, notes: float, places: int) -> bool:
    """Ours, rounded half away from zero to `places` decimals, is the notes' figure."""
    return _rounded(ours, places) == _rounded(notes, places)


def _decide(ours: Any, notes: Any, places: int | None, factor: float | None) -> tuple[bool, str, str]:
    """(agreed, rule, decision) for one claim: see Report.claim."""
    if isinstance(ours, (bool, str)) or isinstance(notes, (bool, str)):
        agreed = ours == notes
        return agreed, "equal", f"{ours!r} {'is' if agreed else 'is not'} {notes!r}"
    ours, notes = float(ours), float(notes)
    if places is not None:
        agreed = _rounds_to(ours, notes, places)
        unit = f"{places} decimal place{'s' if places != 1 else ''}"
        return agreed, f"rounds to {unit}", (f"{fmt_num(ours, 10)} rounds to {_rounded(ours, places)} at {unit}; "
                                             f"the notes print {fmt_num(notes, 10)}")
    if factor is not None:
        if not factor >= 1:
            raise ValueError(f"factor must be at least 1, got {factor}")
        low, high = sorted((notes / factor, notes * factor))
        agreed = low <= ours <= high
        return agreed, f"within a factor of {factor:g}", (
            f"{fmt_num(ours)} is {'inside' if agreed else 'outside'} {fmt_num(low)} … {fmt_num(high)}")
    agreed = math.isclose(ours, notes, rel_tol=1e-9, abs_tol=1e-12)
    return agreed, "exact", f"{fmt_num(ours, 10)} {'=' if agreed else '≠'} {fmt_num(notes, 10)}"


def _digits_for_places(value: Any, places: int) -> int:
    """Significant digits that show `value` to `places` decimals (so a reader can see the rounding)."""
    try:
        magnitude = math.floor(math.log10(abs(float(value)))) + 1 if float(value) else 1
    except (TypeError, ValueError, OverflowError):
        return 4
    return max(1, min(15, magnitude + places + 1))


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
        print(wrap(f"{self.script}: {title}", "    ", ""))
        if args is not None and getattr(args, "quick", False):
            print("(--quick: the same code, with shorter runs where a part has any to shorten)")

    # ---- structure -------------------------------------------------------------------------
    def part(self, number: int | str, title: str) -> None:
        """A header carrying the notes' part number, e.g. 'Part 3: pipelined broadcast'."""
        self._part = f"Part {number}"
        self.parts[self._part] = {"title": title}
        print("\n" + wrap(f"== {self._part}: {title}", "   ", ""))

    def line(self, text: str = "") -> None:
        """A line of prose, wrapped to the page with its own indent; lines that are no prose
        (charts, bars: too long a word to break) are printed as they are."""
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
        for i, chunk in enumerate(_paragraphs(text)):
            print(wrap(chunk, "        ", "  note: " if i == 0 else "        "))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], name: str | None = None) -> None:
        rows = [list(r) for r in rows]
        print(format_table(headers, rows))
        tables = self.parts[self._part].setdefault("tables", {})
        tables[name or f"table{len(tables) + 1}"] = {"headers": list(headers), "rows": rows}

    def record(self, key: str, value: Any) -> None:
        """Keep a value for --json without printing it."""
        self.parts[self._part][key] = value

    # ---- claims ----------------------------------------------------------------------------
    def claim(self, what: str, ours: Any, notes: Any = None, unit: str = "", kind: str = EXACT,
              *, why: str = "", digits: int = 4, factor: float | None = None, places: int | None = None,
              setting: Sequence[str] | None = None, ref: str = "", erratum: bool = False) -> Claim:
        """Print our value with the notes' beside it, and record the pair with its status.

        How agreement is decided (recorded in --json as `rule`, with `decision` saying what it found):
          places=P   ours rounded to P decimal places is the notes' figure (the notes print 87 ms:
                     places=0; 1.92 ms: places=2). Use it for every figure the notes print.
          factor=F   within notes/F … notes·F, only for the notes' "about 1e-5" values (F stated);
          neither    exact: equal numbers (to 1e-9 relative, for float arithmetic), equal strings
                     and booleans.
        Status: 'agrees'; 'differs' (`why` says why: give a reason for every claim, it is recorded
        always; erratum=True says a "differs" is a slip in the notes, listed as such: recorded only
        when the claim does differ, so a loop over the notes' rows may pass it for every row); 'other machine' for a
        MEASURED claim that does not agree; 'other setting' when a flag in `setting` moved this
        run off the notes' setting (None: every flag that is not presentation, see
        cli.off_setting; () for a claim no flag changes); with ours=None 'not measured'.
        `ref` names the inventory entry (inventory/*.md) the claim checks.
        """
        off = off_setting(self.args, setting) if self.args is not None else []
        rule, decision = "", ""
        if notes is not None and off:  # first: whatever this run measured, it is not the notes' setting
            status, rule = "other setting", "not compared"
            decision = "not at the notes' setting: " + ", ".join(off)
        elif ours is None:
            status = "not measured"  # this run could not measure it (say why)
        elif notes is None:
            status = "ours only"
        else:
            agreed, rule, decision = _decide(ours, notes, places, factor)
            status = "agrees" if agreed else ("other machine" if kind == MEASURED else "differs")
        sep = " " if unit else ""
        shown_digits = max(digits, _digits_for_places(ours, places)) if places is not None else digits
        shown = "not measured" if ours is None else f"{fmt_num(ours, shown_digits)}{sep}{unit}"
        text = f"{what}: {shown}"
        if notes is not None:
            label = "differs: the notes' error" if erratum and status == "differs" else status
            text += f"   (notes: {fmt_num(notes, shown_digits)}{sep}{unit}; {kind}; {label})"
        print(wrap(text, "      ", "  ", reflow=False))
        if status == "other setting":
            print(wrap(decision, "         ", "    why: "))
        elif why and status != "agrees":
            print(wrap(why, "         ", "    why: "))
        claim = Claim(self._part, what, ours, notes, unit, kind, status, why, rule, decision, ref,
                      erratum and status == "differs")
        self.claims.append(claim)
        return claim

    def at_notes_setting(self, setting: Sequence[str] | None = None) -> bool:
        """Whether this run is at the notes' setting in the flags `setting` (None: all of them), the
        same test claim() applies: for text that names the notes' values, or a part that compares."""
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
        png = io.BytesIO()
        fig.savefig(png, dpi=110, bbox_inches="tight", format="png")
        write_bytes(path, png.getvalue())
        print(f"  figure written: {path}")

    def finish(self) -> dict[str, Any]:
        """Write --json PATH if asked; returns what it wrote."""
        data = {"script": self.script, "argv": sys.argv[1:], "parts": self.parts,
                "claims": [asdict(c) for c in self.claims]}
        path = getattr(self.args, "json", None) if self.args is not None else None
        if path:
            write_json(path, data)
        return data


def new_figure(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """plt.subplots on the Agg backend: figures are files, never windows that block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
