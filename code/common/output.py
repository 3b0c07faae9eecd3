"""Printing for every script: part headers with the notes' part numbers, aligned tables, ASCII bars,
the claims record (our number beside the notes' number) and figures written only when asked.

A script makes one `Report`, calls `part()` for each section of the notes, and `finish()` at the
end; `--json PATH` then holds every table, recorded value and claim, machine-readable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator, Sequence

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
    rule: str = ""  # how agreement was decided: "rounds to 1 decimal place", "within a factor of 3", ...


def _agrees(ours: float, notes: float, rtol: float, atol: float) -> bool:
    return abs(ours - notes) <= max(rtol * abs(notes), atol)


def _rounds_to(ours: float, notes: float, places: int) -> bool:
    """Ours, rounded half away from zero to `places` decimals, is the notes' figure."""
    from decimal import ROUND_HALF_UP, Decimal

    quantum = Decimal(1).scaleb(-places)
    return Decimal(repr(ours)).quantize(quantum, ROUND_HALF_UP) == Decimal(repr(notes)).quantize(quantum, ROUND_HALF_UP)


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
              rtol: float = 0.05, atol: float = 0.0, why: str = "", digits: int = 4,
              factor: float | None = None, places: int | None = None) -> Claim:
        """Print our value with the notes' beside it, and record the pair with its status.

        How agreement is decided (recorded in --json as `rule`):
          places=P   ours rounded to P decimal places is the notes' figure (the notes print 87 ms:
                     places=0; 1.92 ms: places=2). The strict rule: use it for every figure the
                     notes print exactly.
          factor=F   within notes/F … notes·F, for the notes' "about 1e-5" kind of value;
          otherwise  within rtol/atol (older claims; being replaced by places=).
        Booleans and strings must be equal. Status: 'agrees', 'differs' (then `why` says why), for
        a MEASURED claim that does not agree 'other machine', and with ours=None 'not measured'
        (this run could not measure it: a fit that came out negative, say; `why` says so).
        """
        rule = ""
        if ours is None:
            status = "not measured"  # this run could not measure it (say why)
        elif notes is None:
            status = "ours only"
        elif isinstance(ours, (bool, str)) or isinstance(notes, (bool, str)):
            rule = "equal"
            status = "agrees" if ours == notes else ("other machine" if kind == MEASURED else "differs")
        else:
            if places is not None:
                rule = f"rounds to {places} decimal place{'s' if places != 1 else ''}"
                agreed = _rounds_to(float(ours), float(notes), places)
            elif factor is not None:
                rule = f"within a factor of {factor:g}"
                low, high = sorted((float(notes) / factor, float(notes) * factor))
                agreed = low <= float(ours) <= high
            else:
                rule = f"within rtol {rtol:g}" + (f", atol {atol:g}" if atol else "")
                agreed = _agrees(float(ours), float(notes), rtol, atol)
            status = "agrees" if agreed else ("other machine" if kind == MEASURED else "differs")
        sep = " " if unit else ""
        shown_digits = max(digits, _digits_for_places(ours, places)) if places is not None else digits
        shown = "not measured" if ours is None else f"{fmt_num(ours, shown_digits)}{sep}{unit}"
        text = f"{what}: {shown}"
        if notes is not None:
            text += f"   (notes: {fmt_num(notes, shown_digits)}{sep}{unit}; {kind}; {status})"
        print(wrap(text, "      ", "  ", reflow=False))
        if why and status != "agrees":
            print(wrap(why, "         ", "    why: "))
        claim = Claim(self._part, what, ours, notes, unit, kind, status, why, rule)
        self.claims.append(claim)
        return claim

    # ---- figures and the end ---------------------------------------------------------------
    def figure_dir(self) -> str | None:
        return getattr(self.args, "save_figs", None) if self.args is not None else None

    def save_figure(self, fig: Any, name: str) -> None:
        """Write a matplotlib figure as DIR/<name>.png when --save-figs DIR was given."""
        directory = self.figure_dir()
        if directory is None:
            return
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{name}.png")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
        print(f"  figure written: {path}")

    def finish(self) -> dict[str, Any]:
        """Write --json PATH if asked; returns what it wrote."""
        data = {"script": self.script, "argv": sys.argv[1:], "parts": self.parts,
                "claims": [asdict(c) for c in self.claims]}
        path = getattr(self.args, "json", None) if self.args is not None else None
        if path:
            write_json(path, data)
        return data


@contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary name beside `path` to write to; it becomes `path` only when the block ends
    without error, so a failed or interrupted run never leaves a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make the result private, unlike a plain open()
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: str, data: Any) -> None:
    """Strict JSON (no NaN or Infinity: those become the strings "nan", "inf", "-inf"), atomically."""
    text = json.dumps(_strict(data), indent=1, ensure_ascii=False, allow_nan=False)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


def _strict(value: Any) -> Any:
    """What strict JSON can hold: containers walked, numpy/torch values unwrapped, non-finite
    floats as strings, anything else as its str()."""
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if hasattr(value, "tolist"):
        return _strict(value.tolist())
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _strict(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def new_figure(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """plt.subplots on the Agg backend: figures are files, never windows that block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
