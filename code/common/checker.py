"""The one checker: every statement of the notes, decided against what the scripts recorded.

The notes are data, one TOML table per document, beside the scripts that check it
(`code/lecture14/notes.toml`, `code/lecture15/notes.toml`, `code/lecture15/handbook.toml`,
`code/cs336/notes.toml`). A row is one number or checkable statement of the notes, in our words:

    [[row]]
    id = "L15-3.1-step-no-overlap"      # unique; the report, the tests and the errata name it
    section = "§3.1"
    statement = "ResNet-50 on 16 ranks, …: one step without overlap takes 53.3 ms"
    script = "lecture15/03_overlap.py"  # where our value comes from …
    value = "step_no_overlap_ms"        # … the name the script records (Report.value)
    what = "step without overlap"       # the short label of the printed comparison
    notes = 53.3                        # the notes' figure (a number, true/false or a word)
    unit = "ms"
    basis = "stated assumption"         # see BASES
    places = 1                          # agreement: rounds to the notes' digits; or factor = 2;
                                        # or neither: exact (for a bound the notes give: below = 10,
                                        # above = 5, between = [50, 200])
    depends = ["--world-size", "--alpha-us", "--beta-gbs", "--bucket-cap-mb"]  # flags that void it ([]: none)
    slip = false                        # true: the notes are wrong here, ours is the correct value
    # same_as = "scratch_bytes"         # a check of our own (PyTorch's engine against ours): compare
                                        # with another recorded value instead of a notes' figure
    why = "uncalibrated: {uncal_ms:.2f} ms"   # the reason, a template over recorded values

A row that cannot be checked has `unchecked = "why"` instead of script/value/notes. A script only
records named values (`rep.value("step_no_overlap_ms", 53.28)`); when a part ends its Report asks
`decide` for each row of that part and prints one compact "vs the notes" table, the reasons of
what does not agree below it (the notes' slips first), and the legend of the verdict words once.
reproduce.py, the report pages, the README's errata and the tests all read what this decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (requirements.txt)
    import tomli as tomllib

from common.text import PAGE_WIDTH, wrap
from common.units import fmt_num

CODE = Path(__file__).resolve().parents[1]
# Checks of our own, not statements of the notes: PyTorch's engines beside ours. Their rows'
# "notes" field is what we expect, and the printed tables say so ("expected", not "notes").
OWN_TABLES = ("lecture14/engines.toml", "lecture15/engines.toml", "cs336/engines.toml")
TABLES = ("lecture14/notes.toml", "lecture15/notes.toml", "lecture15/handbook.toml", "cs336/notes.toml",
          *OWN_TABLES)

# What our value is, against the notes' (a row's `basis`), and the verdict word each gives.
EXACT = "exact formula"             # a closed form: must agree
ASSUMPTION = "stated assumption"    # agrees under an assumption the output states
MEASURED = "measured here"          # a timing on this machine; the notes' came from another
OBSERVED = "observed on real ranks"  # something seen happen on real processes here (a deadlock, equality)
CALIBRATION = "calibration target"  # the model was fitted to this figure: shown, never counted as a check
BASES = (EXACT, ASSUMPTION, MEASURED, OBSERVED, CALIBRATION)

# One line each, printed once per run for the words that appeared (the report pages show them all).
LEGEND = {
    "agrees: exact": "a closed form that rounds to the notes' figure",
    "agrees: assumption": "rounds to it under the stated assumption",
    "agrees: measured": "timed here, rounds to it",
    "observed": "seen on real ranks here",
    "calibration": "the model was fitted to it, no check",
    "other machine": "timed here, the notes elsewhere",
    "other setting": "a flag moved this run off the notes' setting",
    "differs": "see why",
    "notes' slip": "the notes are wrong, ours is right (see why)",
    "not measured": "see why",
    "ours only": "the notes give no figure",
}


@dataclass(frozen=True)
class Row:
    """One statement of the notes (see the module's docstring)."""

    id: str
    document: str
    section: str
    statement: str
    script: str = ""
    value: str = ""
    what: str = ""
    notes: Any = None
    unit: str = ""
    basis: str = EXACT
    places: int | None = None
    factor: float | None = None
    below: float | None = None          # the notes bound ours: ours < below
    above: float | None = None          # ours > above
    between: tuple[float, float] | None = None  # low <= ours <= high
    same_as: str = ""                   # a check of our own: ours against another recorded value
    depends: tuple[str, ...] = ()
    slip: bool = False
    why: str = ""
    digits: int = 4
    unchecked: str = ""
    own: bool = False                   # from OWN_TABLES: a check of ours, not the notes' statement

    @property
    def compares(self) -> bool:
        """The notes give a figure or a bound to compare ours with (or the row names our other value)."""
        return self.notes is not None or self.bound is not None or bool(self.same_as)

    @property
    def bound(self) -> tuple[str, Any] | None:
        for name in ("below", "above", "between"):
            if getattr(self, name) is not None:
                return name, getattr(self, name)
        return None

    @property
    def notes_shown(self) -> Any:
        """The notes' figure, or their bound as text ("< 10", "> 5", "50–200")."""
        if self.bound is None:
            return self.notes
        name, limit = self.bound
        if name == "between":
            return f"{limit[0]:g}–{limit[1]:g}"
        return f"{'<' if name == 'below' else '>'} {limit:g}"


@dataclass
class Claim:
    """A row decided: our number beside the notes', with how that was decided (the --json record)."""

    part: str
    what: str
    ours: Any
    notes: Any
    unit: str
    kind: str
    status: str
    why: str
    rule: str = ""  # how agreement was decided: "rounds to 1 decimal place", "within a factor of 3", "exact"
    decision: str = ""  # what the rule found: "53.08 rounds to 53.1; the notes print 53.3"
    ref: str = ""       # the row's id
    erratum: bool = False  # the notes are wrong here; `why` gives the reason, ours the correct value
    statement: str = field(default="", compare=False)
    section: str = field(default="", compare=False)


# ---- the tables ---------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def load_table(relpath: str) -> tuple[Row, ...]:
    """The rows of one document's table (code/<relpath>), checked for the fields a row needs."""
    with open(CODE / relpath, "rb") as fh:
        data = tomllib.load(fh)
    document = data.get("document", relpath)
    rows = []
    for raw in data.get("row", []):
        entry = dict(raw, document=document, depends=tuple(raw.get("depends", ())),
                     own=relpath in OWN_TABLES)
        if "between" in raw:
            entry["between"] = tuple(raw["between"])
        row = Row(**entry)
        _check_row(row, relpath)
        rows.append(row)
    return tuple(rows)


def _check_row(row: Row, relpath: str) -> None:
    where = f"{relpath}: row {row.id}"
    if row.unchecked:
        return
    if not (row.script and row.value and row.what):
        raise ValueError(f"{where}: a checked row needs script, value and what (or unchecked = 'why')")
    if row.basis not in BASES:
        raise ValueError(f"{where}: basis {row.basis!r} is none of {', '.join(BASES)}")
    if row.factor is not None and not row.factor >= 1:
        raise ValueError(f"{where}: factor must be at least 1")
    rules = [n for n in ("places", "factor", "below", "above", "between") if getattr(row, n) is not None]
    if len(rules) > 1:
        raise ValueError(f"{where}: one rule at most, not {', '.join(rules)}")
    if row.same_as and (row.notes is not None or row.bound is not None):
        raise ValueError(f"{where}: same_as compares two values of ours: no notes' figure or bound with it")
    if row.bound is not None and row.notes is not None:
        raise ValueError(f"{where}: a bound is the notes' value: give below/above/between or notes, not both")
    if row.between is not None and not (len(row.between) == 2 and row.between[0] <= row.between[1]):
        raise ValueError(f"{where}: between = [low, high] with low <= high")


def all_rows() -> list[Row]:
    rows = [row for table in TABLES if (CODE / table).is_file() for row in load_table(table)]
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise ValueError(f"row {row.id} appears twice")
        seen.add(row.id)
    return rows


@lru_cache(maxsize=None)
def _rows_by_id() -> dict[str, Row]:
    return {r.id: r for r in all_rows()}  # the tables are loaded once (load_table), so this index holds


def row(row_id: str) -> Row:
    """The row with this id (KeyError naming it when there is none)."""
    found = _rows_by_id().get(row_id)
    if found is None:
        raise KeyError(f"no row {row_id} in the notes' tables")
    return found


def rows_for(script: str) -> list[Row]:
    """The checked rows whose value `script` ("lecture15/03_overlap.py") records."""
    return [r for r in all_rows() if r.script == script and not r.unchecked]


# ---- deciding one row ---------------------------------------------------------------------------

def rounded(value: float, places: int) -> Decimal:
    """`value` rounded half away from zero to `places` decimals (no binary-float surprises)."""
    return Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)


def compare(ours: Any, notes: Any, places: int | None, factor: float | None) -> tuple[bool, str, str]:
    """(agreed, rule, decision): ours rounded to `places` is the notes' figure; or within `factor`
    of it (only the notes' "about" values); or neither given: equal (to float arithmetic)."""
    if isinstance(ours, (bool, str)) or isinstance(notes, (bool, str)):
        agreed = ours == notes
        return agreed, "equal", f"{ours!r} {'is' if agreed else 'is not'} {notes!r}"
    ours, notes = float(ours), float(notes)
    if places is not None:
        agreed = rounded(ours, places) == rounded(notes, places)
        unit = f"{places} decimal place{'s' if places != 1 else ''}"
        return agreed, f"rounds to {unit}", (f"{fmt_num(ours, 10)} rounds to {rounded(ours, places)} at "
                                             f"{unit}; the notes print {fmt_num(notes, 10)}")
    if factor is not None:
        if not factor >= 1:
            raise ValueError(f"factor must be at least 1, got {factor}")
        low, high = sorted((notes / factor, notes * factor))
        agreed = low <= ours <= high
        return agreed, f"within a factor of {factor:g}", (
            f"{fmt_num(ours)} is {'inside' if agreed else 'outside'} {fmt_num(low)} … {fmt_num(high)}")
    agreed = math.isclose(ours, notes, rel_tol=1e-9, abs_tol=1e-12)
    return agreed, "exact", f"{fmt_num(ours, 10)} {'=' if agreed else '≠'} {fmt_num(notes, 10)}"


def within_bound(ours: Any, name: str, limit: Any) -> tuple[bool, str, str]:
    """(agreed, rule, decision) for a bound the notes give ("over 300 ms": above = 300)."""
    value = float(ours)
    if name == "below":
        return (
            value < limit,
            f"below {limit:g}",
            f"{fmt_num(value, 6)} {'<' if value < limit else '≥'} {limit:g}",
        )
    if name == "above":
        return (
            value > limit,
            f"above {limit:g}",
            f"{fmt_num(value, 6)} {'>' if value > limit else '≤'} {limit:g}",
        )
    low, high = limit
    inside = low <= value <= high
    return inside, f"between {low:g} and {high:g}", (
        f"{fmt_num(value, 6)} is {'inside' if inside else 'outside'} {low:g} … {high:g}")


def decide(row: Row, part: str, values: dict[str, Any], off: Sequence[str]) -> Claim:
    """The row against our value `values[row.value]`; `off`: how this run left the notes'
    setting in the flags the row depends on (empty: at the notes' setting)."""
    ours = values.get(row.value)
    why = reason(row, values)
    if row.same_as:  # both sides ours: the other is what the row compares with (and shows as "notes")
        row = replace(row, notes=values.get(row.same_as))
    status, rule, decision = _status(row, ours, off)
    erratum = row.slip and status == "differs"
    return Claim(part, row.what, ours, row.notes_shown, row.unit, row.basis, status, why, rule, decision,
                 row.id, erratum, row.statement, row.section)


def _status(row: Row, ours: Any, off: Sequence[str]) -> tuple[str, str, str]:
    if row.compares and off:  # whatever this run measured, it is not the notes' setting
        return "other setting", "not compared", "not at the notes' setting: " + ", ".join(off)
    if ours is None:
        return "not measured", "", ""
    if not row.compares:
        return "ours only", "", ""
    if row.bound is not None:
        agreed, rule, decision = within_bound(ours, *row.bound)
    else:
        agreed, rule, decision = compare(ours, row.notes, row.places, row.factor)
    if row.basis == CALIBRATION:
        return "calibration target", "not compared", f"the model was fitted to this figure; {decision}"
    if agreed:
        return "agrees", rule, decision
    return ("other machine" if row.basis == MEASURED else "differs"), rule, decision


def reason(row: Row, values: dict[str, Any]) -> str:
    """The row's reason with the recorded values it names filled in ("{uncal_ms:.2f}")."""
    if "{" not in row.why:
        return row.why
    try:
        return row.why.format_map(values)
    except KeyError as missing:
        raise KeyError(f"row {row.id}: its reason names {missing}, which the script did not record") from None


def setting_dests(row: Row, defaults: dict[str, tuple[str, Any]]) -> list[str]:
    """The row's `depends` ("--world-size", "--quick") as the names cli.off_setting takes."""
    by_flag = {flag: dest for dest, (flag, _) in defaults.items()}
    dests = []
    for flag in row.depends:
        if flag == "--quick":
            dests.append("quick")
        elif flag in by_flag:
            dests.append(by_flag[flag])
        elif defaults:
            raise KeyError(f"row {row.id} depends on {flag}, which {row.script} does not have")
    return dests


# ---- printing: one compact table per part -------------------------------------------------------

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
    if claim.status == "agrees":
        return {EXACT: "agrees: exact", ASSUMPTION: "agrees: assumption", MEASURED: "agrees: measured",
                OBSERVED: "observed"}[claim.kind]
    if claim.erratum:
        return "notes' slip"
    return {"calibration target": "calibration"}.get(claim.status, claim.status)


def _shown(value: Any, unit: str, digits: int) -> str:
    if value is None:
        return "-"
    text = fmt_num(value, digits) if not isinstance(value, str) else value
    return f"{text} {unit}".strip() if not isinstance(value, bool) else text


def legend_lines(words: set[str]) -> list[str]:
    """The verdict words in `words`, each explained, as few lines as fit the page."""
    text = "; ".join(f"{word} = {LEGEND[word]}" for word in LEGEND if word in words)
    return wrap("verdicts: " + text, "    ", "  ").splitlines() if text else []


VALUE_COLUMN = 22  # a value wider than this (a buffer's contents, a sentence) gets lines of its own


def comparison_lines(claims: Sequence[Claim]) -> list[str]:
    """"vs the notes": statement, ours, notes, verdict, one row each; then the reasons of what did
    not simply agree (the notes' slips first; a reason shared by several rows printed once). A
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
    """The reasons below the table: slips first, then differs and the rest; each text once."""
    # calibration: the part's note
    shown = [c for c in claims if c.status not in ("agrees", "calibration target")]
    order = sorted(shown, key=lambda c: (not c.erratum, c.status != "differs"))
    grouped: dict[str, list[str]] = {}
    for c in order:
        text = c.decision if c.status == "other setting" else c.why
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
