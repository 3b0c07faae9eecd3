"""How a part's decided rows are printed: one compact "vs the notes" table per part, the reasons of
what does not simply agree below it (the notes' errors first), and the verdict words' legend.
common/checker.py decides; this only words and lays out what it decided."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from common.checker import ASSUMPTION, EXACT, MEASURED, OBSERVED, SLIP, Claim, Row, all_errata, row
from common.text import PAGE_WIDTH, wrap
from common.units import fmt_num


# The one vocabulary of outcomes: the terminal's tables, --json's "verdict", the report's pages,
# report.md and the README all use these words (tests/suite/test_verdict_words.py holds them to it). Each
# word says on its own whether the notes and we agree: "matches…", "seen as…" and "holds" agree,
# "differs", "error in the notes", "notes inconsistent" and "fails" do not, "not compared…" and "fitted to the
# notes" decide nothing. `one` and `many` make a count a sentence ("12 are errors in the notes").
@dataclass(frozen=True)
class Verdict:
    word: str
    meaning: str
    one: str
    many: str


VERDICTS = (
    Verdict("matches", "a closed form of ours rounds to the notes' figure", "matches", "match"),
    Verdict("matches, assuming", "ours rounds to it under the assumption printed with it (assumes:)",
            "matches, assuming", "match, assuming"),
    Verdict("matches as they write", "ours rounds to it read as the notes write, e.g. MB for MiB (read as:)",
            "matches as they write", "match as they write"),
    Verdict("matches, timed here", "timed on this machine, ours rounds to their figure",
            "matches, timed here", "match, timed here"),
    Verdict("seen as the notes say", "it happened on real processes here as the notes say",
            "was seen as the notes say", "were seen as the notes say"),
    Verdict("holds", "a check of ours (PyTorch's engine beside ours): ours is what is expected",
            "holds", "hold"),
    Verdict("differs", "ours is not their figure, and the notes are not shown wrong (why:)", "differs",
            "differ"),
    Verdict("error in the notes", "the notes contradict their own model, units, arithmetic or source; "
            "ours is the value (why:)", "is an error in the notes", "are errors in the notes"),
    Verdict("notes inconsistent", "two places of the notes disagree (why:)",
            "is where the notes are inconsistent", "are where the notes are inconsistent"),
    Verdict("fails", "a check of ours: ours is not what is expected, so the run fails", "fails", "fail"),
    Verdict("fitted to the notes", "our model was fitted to this figure: no check", "is fitted to the notes",
            "are fitted to the notes"),
    Verdict("not compared: other machine", "timed here, theirs on their machine", "is not compared (another "
            "machine)", "are not compared (another machine)"),
    Verdict("not compared: other setting", "a flag moved this run off the notes' setting",
            "is not compared (another setting)", "are not compared (another setting)"),
    Verdict("not compared: not measured", "this run could not measure it (why:)",
            "is not compared (not measured)", "are not compared (not measured)"),
    Verdict("not compared: no figure", "the notes give no figure",
            "is not compared (the notes give no figure)", "are not compared (the notes give no figure)"),
    Verdict("not recorded", "the script recorded no value: a bug", "was not recorded", "were not recorded"),
)
BY_WORD = {v.word: v for v in VERDICTS}
LEGEND = {v.word: v.meaning for v in VERDICTS}
AGREEING = ("matches", "matches, assuming", "matches as they write", "matches, timed here",
            "seen as the notes say", "holds")
# The order a reader of a whole run wants: what needs attention first (every word above, once).
FINDINGS_ORDER = ("error in the notes", "notes inconsistent", "differs", "fails", "not recorded",
                  "not compared: other machine", "not compared: other setting", "not compared: not measured",
                  "fitted to the notes", "matches, assuming", "matches as they write", "matches, timed here",
                  "seen as the notes say", "matches", "holds", "not compared: no figure")
OWN_WORDS = ("holds", "fails")   # the words of our own checks (engines.toml): not statements of the notes
_AGREES_BY_KIND = {EXACT: "matches", ASSUMPTION: "matches, assuming", MEASURED: "matches, timed here",
                   OBSERVED: "seen as the notes say"}
_BY_STATUS = {"calibration target": "fitted to the notes", "other machine": "not compared: other machine",
              "other setting": "not compared: other setting", "not measured": "not compared: not measured",
              "ours only": "not compared: no figure", "not recorded": "not recorded", "differs": "differs"}


# A row id in a reason ("row CS-five-pct-S4-notes"): the data names rows by id (grep finds them);
# a reader gets the label the row prints under, readable() below.
_ROW_ID = re.compile(r"\b(?:HB|L14|L15|CS)-[A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9]")


def readable(text: str) -> str:
    """`text` with each row id it names replaced by the row's printed label, in quotes."""
    titles = {e.id: e.title for e in all_errata()}

    def label(found: re.Match[str]) -> str:
        row_ = _row_of_ref(found.group(0))
        return f"'{row_.what}'" if row_ is not None else f"'{titles.get(found.group(0), found.group(0))}'"
    return _ROW_ID.sub(label, text) if text else text


def shown_digits(value: Any, digits: int, places: int | None) -> int:
    """Significant digits that show `value` to `places` decimals (so a reader sees the rounding)."""
    if places is None:
        return digits
    try:
        magnitude = math.floor(math.log10(abs(float(value)))) + 1 if float(value) else 1
    except (TypeError, ValueError, OverflowError):
        return digits
    return max(digits, min(15, magnitude + places + 1))


def verdict(claim: Claim | Mapping[str, Any]) -> str:
    """The verdict word of a decided row (a Claim, or its --json record): VERDICTS explains each."""
    get = claim.get if isinstance(claim, Mapping) else lambda name: getattr(claim, name)
    status, own = get("status"), _is_own(get("ref"))
    if status == "agrees":
        if own:
            return "holds"
        return "matches as they write" if get("reading") else _AGREES_BY_KIND[get("kind")]
    if get("erratum"):
        return "error in the notes" if get("error") == SLIP else "notes inconsistent"
    if status == "differs" and own:
        return "fails"
    return _BY_STATUS[status]


def count_sentence(words: Sequence[str], order: Sequence[str] = tuple(BY_WORD)) -> str:
    """"6 match; 13 match, assuming; and 12 are errors in the notes", in `order`: "; " between the
    counts when one has a comma of its own, else ", "; "and" before the last."""
    counts = {w: words.count(w) for w in order if w in words}
    said = [f"{n} {BY_WORD[w].one if n == 1 else BY_WORD[w].many}" for w, n in counts.items()]
    comma = "; " if any("," in phrase for phrase in said) else ", "
    last = "; and " if comma == "; " else " and "
    return said[0] if len(said) == 1 else comma.join(said[:-1]) + last + said[-1] if said else ""


def count_label(word: str, n: int) -> str:
    """The count's words without their verb, for a link that follows its number: "21 errors in the
    notes", "64 match, assuming", "53 seen as the notes say" ("notes inconsistent" as it is)."""
    text = BY_WORD[word].one if n == 1 else BY_WORD[word].many
    text = re.sub(r"^(is|are|was|were) (an? )?", "", text)
    return word if text.startswith("where ") else text


def claims_sentence(words: Sequence[str]) -> str:
    """A whole run's count, the same on the terminal and the pages: "472 claims (399 statements of
    the notes and 73 checks of our own): 21 are errors in the notes; …", what needs attention first."""
    own = sum(1 for w in words if w in OWN_WORDS)
    return (f"{len(words)} claims ({len(words) - own} statements of the notes and {own} checks of our "
            f"own): {count_sentence(words, FINDINGS_ORDER)}")


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
    rows, marks = [], _assumption_marks(claims)
    for c in claims:
        row = _row_of(c)
        digits, places = (row.digits, row.places) if row else (4, None)
        mark = marks.get(assumption_of(c) or "", "")
        rows.append((c.what, _shown(c.ours, c.unit, shown_digits(c.ours, digits, places)),
                     _shown(c.notes, c.unit, shown_digits(c.notes, digits, places)), verdict(c) + mark))
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
    lines += [wrap(text, " " * 14, f"    {mark} assumes: ") for text, mark in marks.items()]
    return lines + _reasons(claims, assumptions=False)


SUPERSCRIPTS = "¹²³⁴⁵⁶⁷⁸⁹"
# A verdict as a mark in a cell of a script's own table (Report.marked), MARKS_LEGEND under it.
_CELL_MARKS = {"error in the notes": "✗", "notes inconsistent": "✗", "fails": "✗", "differs": "≠"}
MARKS_LEGEND = ("  marks: ✓ matches (✓¹: assuming footnote ¹); ✗ error in the notes, notes inconsistent or\n"
                "  fails; ≠ differs; – not compared")


def superscript(i: int) -> str:
    return SUPERSCRIPTS[i] if i < len(SUPERSCRIPTS) else f"({i + 1})"


def cell_mark(claim: Claim) -> str:
    word = verdict(claim)
    return "✓" if word in AGREEING else _CELL_MARKS.get(word, "–")


def _assumption_marks(claims: Sequence[Claim]) -> dict[str, str]:
    """A mark for each distinct assumption rows of a table match under: ¹, ², …, in order."""
    texts = list(dict.fromkeys(t for c in claims if (t := assumption_of(c))))
    return {t: superscript(i) for i, t in enumerate(texts)}


def assumption_of(c: Claim) -> str:
    """The assumption a row matches under ("" for any other row)."""
    return (c.assumes or c.why) if verdict(c) == "matches, assuming" else ""


def summary_lines(claims: Sequence[Claim], footnotes: Mapping[str, str] | None = None) -> list[str]:
    """For rows a script's own table already shows beside the notes' figures (Report.notes_text):
    one line counting the verdicts instead of the rows again, then the reasons as comparison_lines;
    the assumptions `footnotes` marked in the table's cells (Report.marked) under their marks."""
    footnotes = footnotes or {}
    text = count_sentence([verdict(c) for c in claims])
    head = ("our checks (what is expected in the table above)" if all(_is_own(c.ref) for c in claims)
            else "vs the notes (their figures in the table above)")
    if all(_is_own(c.ref) for c in claims):       # name them: the table shows values, not checks
        text += ": " + _whats(claims)
    marked = [wrap(text_, " " * 14, f"    {mark} assumes: ") for text_, mark in footnotes.items()]
    return [wrap(f"{head}: {text}.", "    ", "  ")] + _reasons(claims, skip=set(footnotes)) + marked


def _whats(claims: Sequence[Claim]) -> str:
    """The rows' labels, those of the form "who: what" gathered by what: "bytes held, all ranks
    (ZeRO-1, FSDP2); operations no counting method saw"."""
    by_what: dict[str, list[str]] = {}
    for c in claims:
        who, _, what = c.what.rpartition(": ") if ": " in c.what else ("", "", c.what)
        by_what.setdefault(what, []).extend([who] if who else [])
    return "; ".join(f"{what} ({', '.join(whos)})" if whos else what for what, whos in by_what.items())


def _reasons(claims: Sequence[Claim], assumptions: bool = True, skip: set[str] = frozenset()) -> list[str]:
    """The lines below the table: the notes' errors first, then differs and the rest (why:), then
    the readings (read as:) and assumptions (assumes:) rows matched under, but those in `skip`
    (footnotes of their own); each text once."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for c in sorted(claims, key=lambda c: (not c.erratum, c.status != "differs", c.status == "agrees")):
        for label, text in _reason(c, assumptions and assumption_of(c) not in skip):
            grouped.setdefault((label, readable(text)), []).append(c.what)
    lines = []
    for (label, text), whats in grouped.items():
        head = whats[0] if len(whats) == 1 else f"{whats[0]} (and {len(whats) - 1} more)"
        lines.append(wrap(f"{head}: {text}", " " * (len(label) + 6), f"    {label}: "))
    return lines


def _reason(c: Claim, assumptions: bool) -> list[tuple[str, str]]:
    """What a row adds below the table: why it does not simply match, or what it matched under."""
    if c.status == "calibration target":
        return []                          # the part's note says what the model was fitted to
    if c.status != "agrees":
        text = c.decision if c.status == "other setting" else c.why
        return [("why", text)] if text else []
    if c.reading:                          # a reading shared by rows is printed once, each why after
        return [("read as", c.reading)] + ([("why", c.why)] if c.why else [])
    return [("assumes", assumption_of(c))] if assumptions and assumption_of(c) else []


def _is_own(ref: str | None) -> bool:
    row_ = _row_of_ref(ref)
    return row_ is not None and row_.own


def _row_of_ref(ref: str | None) -> Row | None:
    try:
        return row(ref) if ref else None
    except KeyError:
        return None


def _row_of(claim: Claim) -> Row | None:
    """The claim's row, for its digits (None for a row that is in no table: a test's own)."""
    return _row_of_ref(claim.ref)
