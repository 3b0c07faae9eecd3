"""Text on the page: prose wrapped to a terminal's width, aligned tables, ASCII bars."""

from __future__ import annotations

import math
import textwrap
from typing import Any, Iterable, Sequence

from common.units import fmt_num

PAGE_WIDTH = 100  # every line of prose fits a terminal of this many columns


def wrap(text: str, indent: str = "", first: str | None = None, width: int = PAGE_WIDTH,
         reflow: bool = True) -> str:
    """`text` wrapped at spaces to `width` columns: `first` before the first line (default
    `indent`), `indent` before the others. Never breaks a word or a number. With `reflow` runs of
    whitespace (line breaks too) become one space; without, spacing inside a line is kept."""
    text = " ".join(text.split()) if reflow else text.strip()
    return textwrap.fill(text, width, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


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


def paragraphs(text: str) -> list[str]:
    paragraphs: list[list[str]] = [[]]
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line or line.startswith("- "):
            paragraphs.append([])
        if line:
            paragraphs[-1].append(line)
    return [" ".join(p) for p in paragraphs if p]
