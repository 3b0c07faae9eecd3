"""How a part's decided rows are printed: one compact "vs the notes" table per part, the reasons of
what does not simply agree below it (the notes' errors first), and the verdict words' legend.
common/checker.py decides; this only words and lays out what it decided."""

from __future__ import annotations

import math
from typing import Any, Sequence

from common.checker import ASSUMPTION, EXACT, MEASURED, OBSERVED, SLIP, Claim, Row, row
from common.text import PAGE_WIDTH, wrap
from common.units import fmt_num

# One line each, printed once per run for the words that appeared (the report pages show them all).
LEGEND = {
    "agrees: exact": "a closed form that rounds to the notes' figure",
    "agrees: assumption": "rounds to it under the stated assumption",
    "agrees: measured": "timed here, rounds to it",
    "observed": "seen on real ranks here",
    "agrees: reading": "rounds to it read as the notes consistently write (the reading is printed)",
    "calibration": "the model was fitted to it, no check",
    "other machine": "timed here, the notes elsewhere",
    "other setting": "a flag moved this run off the notes' setting",
    "differs": "see why",
    "notes' slip": "the notes contradict their own model, units or arithmetic; ours is the value (see why)",
    "notes inconsistent": "two places of the notes disagree; each reading is given (see why)",
    "not measured": "see why",
    "ours only": "the notes give no figure",
}


def shown_digits(value: Any, digits: int, places: int | None) -> int:
    """Significant digits that show `value` to `places` decimals (so a reader sees the rounding)."""
    if places is None:
        return digits
    try:
        magnitude = math.floor(math.log10(abs(float(value)))) + 1 if float(value) else 1
    except (TypeError, ValueError, OverflowError):
        return digits
    return max(digits, min(15, magnitude + places + 1))


def verdict(claim: Claim) -> str:
    """The verdict word printed for a decided row (LEGEND explains each)."""
    if claim.status == "agrees" and claim.reading:
        return "agrees: reading"
    if claim.status == "agrees":
        return {EXACT: "agrees: exact", ASSUMPTION: "agrees: assumption", MEASURED: "agrees: measured",
                OBSERVED: "observed"}[claim.kind]
    if claim.erratum:
        return "notes' slip" if claim.error == SLIP else "notes inconsistent"
    return {"calibration target": "calibration"}.get(claim.status, claim.status)


def _shown(value: Any, unit: str, digits: int) -> str:
    if value is None:
        return "-"
    text = fmt_num(value, digits) if not isinstance(value, str) else value
    return f"{text} {unit}".strip() if not isinstance(value, bool) else text


def legend_lines(words: set[str], head: str = "verdicts: ", indent: str = "  ") -> list[str]:
    """The verdict words in `words`, each explained, as few lines as fit the page."""
    text = "; ".join(f"{word} = {LEGEND[word]}" for word in LEGEND if word in words)
    return wrap(head + text, indent + "  ", indent).splitlines() if text else []


VALUE_COLUMN = 22  # a value wider than this (a buffer's contents, a sentence) gets lines of its own


def comparison_lines(claims: Sequence[Claim]) -> list[str]:
    """"vs the notes": statement, ours, notes, verdict, one row each; then the reasons of what did
    not simply agree (the notes' errors first; a reason shared by several rows printed once). A
    value too wide for its column is printed under its row instead, so no line passes the page."""
    rows = []
    for c in claims:
        row = _row_of(c)
        digits, places = (row.digits, row.places) if row else (4, None)
        rows.append((c.what, _shown(c.ours, c.unit, shown_digits(c.ours, digits, places)),
                     _shown(c.notes, c.unit, shown_digits(c.notes, digits, places)), verdict(c)))
    fits = [max(len(r[1]), len(r[2])) <= VALUE_COLUMN for r in rows]
    title, other = ("our checks", "expected") if all(
        (row := _row_of(c)) is not None and row.own for c in claims) else ("vs the notes", "notes")
    table = [r for r, ok in zip(rows, fits) if ok] + [("", "ours", other, "verdict")]
    # the verdict column holds every row's word, the value columns only the rows that fit them
    widths = [max(len(r[i]) for r in table) for i in (1, 2)] + [max(len(r[3]) for r in table + rows)]
    what_width = max(24, PAGE_WIDTH - 4 - sum(widths) - 6)
    lines = [f"  {title}" + " " * (what_width - len(title)) + "  " + "ours".rjust(widths[0]) + "  "
             + other.rjust(widths[1]) + "  verdict"]
    for (what, ours, notes, word), ok in zip(rows, fits):
        wrapped = wrap(what, "", width=what_width).splitlines() or [""]
        if ok:
            lines.append(f"  {wrapped[0].ljust(what_width)}  {ours.rjust(widths[0])}  "
                         f"{notes.rjust(widths[1])}  {word}")
        else:
            lines.append(f"  {wrapped[0].ljust(what_width)}  {' ' * (widths[0] + widths[1] + 2)}  {word}")
        lines += [f"    {more}" for more in wrapped[1:]]
        if not ok:
            lines += [wrap(ours, "           ", "      ours: "),
                      wrap(notes, "           ", f"{other + ': ':>12}")]
    return lines + _reasons(claims)


def summary_lines(claims: Sequence[Claim]) -> list[str]:
    """For rows a script's own table already shows beside the notes' figures (Report.notes_text):
    one line counting the verdicts instead of the rows again, then the reasons as comparison_lines."""
    counts: dict[str, int] = {}
    for c in claims:
        counts[verdict(c)] = counts.get(verdict(c), 0) + 1
    text = ", ".join(f"{n} {word}" for word, n in counts.items())
    return [wrap(f"vs the notes (their figures in the table above): {text}", "    ", "  ")] + _reasons(claims)


def _reasons(claims: Sequence[Claim]) -> list[str]:
    """The reasons below the table: the notes' errors first, then differs and the rest; each text once."""
    # calibration: the part's note
    shown = [c for c in claims if c.status not in ("agrees", "calibration target") or c.reading]
    order = sorted(shown, key=lambda c: (not c.erratum, c.status != "differs"))
    grouped: dict[str, list[str]] = {}
    for c in order:
        text = c.decision if c.status == "other setting" else c.why
        if c.reading and c.status == "agrees":
            text = f"read as: {c.reading}" + (f"; {text}" if text else "")
        if text:
            grouped.setdefault(text, []).append(c.what)
    lines = []
    for text, whats in grouped.items():
        head = whats[0] if len(whats) == 1 else f"{whats[0]} (and {len(whats) - 1} more)"
        lines.append(wrap(f"{head}: {text}", "         ", "    why: "))
    return lines


def _row_of(claim: Claim) -> Row | None:
    """The claim's row, for its digits (None for a row that is in no table: a test's own)."""
    try:
        return row(claim.ref) if claim.ref else None
    except KeyError:
        return None
