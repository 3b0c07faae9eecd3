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
    # assumes = "the backward calibrated" # a stated assumption, short: printed under a row matched under it
    # erratum = "L15-err-…"             # the notes are wrong here: the [[erratum]] this row is an
                                        # instance of (a slip or an inconsistency, below)
    # reading = "MB written for MiB"    # a convention the notes follow consistently, under which the
                                        # row is read: shown beside the row, never an error
    # printed_unit = "MB"               # the unit the notes print, where the reading makes it `unit`
    # states = "pytorch-default-cap"    # rows of several tables that say the same thing: judged alike
    # bytes = "ring model"              # a byte figure says what it is (BYTE_KINDS); its `what` says so too
    # same_as = "scratch_bytes"         # a check of our own (PyTorch's engine against ours): compare
                                        # with another recorded value instead of a notes' figure
    why = "uncalibrated: {uncal_ms:.2f} ms"   # the reason, a template over recorded values

Agreement rules, in the notes' words: `places` (the digits the notes print), `factor` (their 约,
"about", within a factor the row states), `below` / `above` / `between` (a bound they give), `n_odd`
("300 多 ms", 300-odd: at least N, below the next round figure, 300 ≤ ours < 400), or none: exact.

When the notes are wrong, the row names an erratum, one per distinct error however many rows show it:

    [[erratum]]
    id = "CS-err-forward-only-bubble"
    kind = "slip"            # slip: the notes contradict their own stated model, units or arithmetic,
                             # or a fact they cite (PyTorch's source, a specification); one value
                             # inconsistency: two places of the notes disagree (no one correct value)
    title = "the bubble counts the forward fill only"
    places = ["§流水线并行: '气泡 = (S−1)·t_f' (the bubble is (S−1)·t_f)"]  # the notes' words, translated;
                             # an inconsistency names both places
    argument = "…"           # the most charitable reading, what it gives, and why the verdict stands
                             # (an inconsistency: what each place gives and which one we follow, why)
    source = "…"             # an external fact's source (PyTorch's source, a specification, a paper)

A row that cannot be checked has `unchecked = "why"` instead of script/value/notes. A script only
records named values (`rep.value("step_no_overlap_ms", 53.28)`); when a part ends its Report asks
`decide` for each row of that part and prints one compact "vs the notes" table, the reasons of
what does not agree below it (the notes' errors first), and the legend of the verdict words once
(common/verdicts.py prints them).
reproduce.py, the report pages, docs/errata.md (reproduction/errata.py) and the tests all read what this
decided.
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

# What an erratum is (an [[erratum]] entry's `kind`). A reading (a row's `reading`) is none of them:
# a unit written as the notes (or PyTorch's own names) write it, read their way, never an error.
SLIP = "slip"                    # the notes contradict their own model, units, arithmetic or a cited fact
INCONSISTENCY = "inconsistency"  # two places of the notes disagree: each reading shown, no one value
ERROR_KINDS = (SLIP, INCONSISTENCY)

# What a byte figure is (a row's `bytes`, required where its unit is one of BYTE_UNITS). Traffic is
# one of three things that differ on gloo, so a row saying which names it in its `what` as well.
BYTE_KINDS = {
    "size": "a size: of a tensor, of state held, of a cap; no traffic",
    "counted": "what the process group was handed, call by call (dtype × elements)",
    "on the wire here": "what gloo ran here (a reduce-scatter runs as an all-reduce of the whole input)",
    "ring model": "the cost model's price (the ring's bytes for the collective named)",
}
TRAFFIC_WORDS = ("counted", "on the wire here", "ring model")
BYTE_UNITS = ("B", "KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "TiB")



@dataclass(frozen=True)
class Erratum:
    """One distinct error of the notes (see the module's docstring); its instances are the rows
    that name it."""

    id: str
    document: str
    kind: str
    title: str
    places: tuple[str, ...]
    argument: str
    source: str = ""


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
    n_odd: float | None = None          # "N 多": N <= ours < the next round figure
    same_as: str = ""                   # a check of our own: ours against another recorded value
    bytes: str = ""                     # a byte figure: which of BYTE_KINDS it is
    depends: tuple[str, ...] = ()
    erratum: str = ""                   # the [[erratum]] this row is an instance of
    reading: str = ""                   # the convention of the notes the row is read under
    printed_unit: str = ""              # the unit the notes print, where the reading makes it `unit`
    states: str = ""                    # the key of a statement several tables make
    why: str = ""
    assumes: str = ""                   # a stated assumption's own words, short: printed under a row it
                                        # matches under ("assumes:"), where `why` may say much more
    digits: int = 4
    unchecked: str = ""
    own: bool = False                   # from OWN_TABLES: a check of ours, not the notes' statement

    @property
    def compares(self) -> bool:
        """The notes give a figure or a bound to compare ours with (or the row names our other value)."""
        return self.notes is not None or self.bound is not None or bool(self.same_as)

    @property
    def bound(self) -> tuple[str, Any] | None:
        for name in BOUNDS:
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
        if name == "n_odd":
            return f"{limit:g}-odd"
        return f"{'<' if name == 'below' else '>'} {limit:g}"


BOUNDS = ("below", "above", "between", "n_odd")  # the notes bound ours instead of giving a figure


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
    erratum: str = ""   # the notes are wrong here: the id of the [[erratum]] (its entry says why)
    error: str = ""     # that erratum's kind: SLIP or INCONSISTENCY ("" when none)
    reading: str = ""   # the convention of the notes this row is read under
    bytes: str = ""     # a byte figure: size, counted, on the wire here or ring model (BYTE_KINDS)
    statement: str = field(default="", compare=False)
    section: str = field(default="", compare=False)
    assumes: str = field(default="", compare=False)  # the row's assumption, short (Row.assumes)


# ---- the tables ---------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def load_table(relpath: str) -> tuple[Row, ...]:
    """The rows of one document's table (code/<relpath>), checked for the fields a row needs."""
    with open(CODE / relpath, "rb") as fh:
        data = tomllib.load(fh)
    document = data.get("document", relpath)
    rows = []
    for raw in data.get("row", []):
        if "slip" in raw:
            raise ValueError(f"{relpath}: row {raw.get('id')}: 'slip' is gone: name an [[erratum]]")
        entry = dict(raw, document=document, depends=tuple(raw.get("depends", ())),
                     own=relpath in OWN_TABLES)
        if "between" in raw:
            entry["between"] = tuple(raw["between"])
        row = Row(**entry)
        _check_row(row, relpath)
        rows.append(row)
    return tuple(rows)


@lru_cache(maxsize=None)
def load_errata(relpath: str) -> tuple[Erratum, ...]:
    """The [[erratum]] entries of one document's table, each checked for what its kind needs."""
    with open(CODE / relpath, "rb") as fh:
        data = tomllib.load(fh)
    errata = []
    for raw in data.get("erratum", []):
        entry = Erratum(**dict(raw, document=data.get("document", relpath),
                               places=tuple(raw.get("places", ()))))
        where = f"{relpath}: erratum {entry.id}"
        if entry.kind not in ERROR_KINDS:
            raise ValueError(f"{where}: kind {entry.kind!r} is none of {', '.join(ERROR_KINDS)}")
        if not (entry.title and entry.argument and entry.places):
            raise ValueError(f"{where}: needs a title, the notes' places and the argument")
        if entry.kind == INCONSISTENCY and len(entry.places) < 2:
            raise ValueError(f"{where}: an inconsistency names both places of the notes")
        if "{" in entry.argument + entry.title + "".join(entry.places):
            raise ValueError(f"{where}: an erratum's words are no template: its rows' reasons carry "
                             "the recorded values")
        errata.append(entry)
    return tuple(errata)


def judgement_conflicts(rows: Sequence[Row]) -> dict[str, set[tuple[str, str]]]:
    """The statements (`states` keys) whose rows are judged differently: {key: the judgements},
    each (the erratum's kind or "", the reading or ""). Empty when the same statement is judged alike
    in every table."""
    judged: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        if r.states:
            judged.setdefault(r.states, set()).add((erratum(r.erratum).kind if r.erratum else "", r.reading))
    return {key: kinds for key, kinds in judged.items() if len(kinds) > 1}


def _check_row(row: Row, relpath: str) -> None:
    where = f"{relpath}: row {row.id}"
    if row.printed_unit and row.printed_unit != row.unit and not row.reading:
        raise ValueError(f"{where}: the notes print {row.printed_unit}, ours is in {row.unit}: compare like "
                         "with like (convert), or state the reading that makes them one unit")
    _check_bytes(row, where)
    if row.unchecked:
        if row.erratum or row.reading:
            raise ValueError(f"{where}: an unchecked row is neither an erratum nor a reading")
        return
    if not (row.script and row.value and row.what):
        raise ValueError(f"{where}: a checked row needs script, value and what (or unchecked = 'why')")
    if row.basis not in BASES:
        raise ValueError(f"{where}: basis {row.basis!r} is none of {', '.join(BASES)}")
    if row.factor is not None and not row.factor >= 1:
        raise ValueError(f"{where}: factor must be at least 1")
    rules = [n for n in ("places", "factor", *BOUNDS) if getattr(row, n) is not None]
    if len(rules) > 1:
        raise ValueError(f"{where}: one rule at most, not {', '.join(rules)}")
    if row.same_as and (row.notes is not None or row.bound is not None):
        raise ValueError(f"{where}: same_as compares two values of ours: no notes' figure or bound with it")
    if row.bound is not None and row.notes is not None:
        raise ValueError(f"{where}: a bound is the notes' value: give below/above/between or notes, not both")
    if row.between is not None and not (len(row.between) == 2 and row.between[0] <= row.between[1]):
        raise ValueError(f"{where}: between = [low, high] with low <= high")
    if row.n_odd is not None and not row.n_odd > 0:
        raise ValueError(f"{where}: n_odd ('N 多') needs N > 0")
    if (row.erratum or row.reading) and (row.own or row.same_as or not row.compares):
        raise ValueError(f"{where}: only a row compared with the notes' figure is an erratum or a reading")
    if row.basis == ASSUMPTION and not row.assumes:
        raise ValueError(f"{where}: a row of basis {ASSUMPTION!r} says its assumption (assumes = '…')")
    if row.assumes and row.basis != ASSUMPTION:
        raise ValueError(f"{where}: only a row of basis {ASSUMPTION!r} states an assumption (assumes)")
    if row.erratum and row.basis in (MEASURED, CALIBRATION):
        raise ValueError(f"{where}: a timing here or a calibration target cannot show the notes wrong")


def _check_bytes(row: Row, where: str) -> None:
    """A byte figure says what it is; traffic says it in the words printed beside it."""
    if row.bytes and row.bytes not in BYTE_KINDS:
        raise ValueError(f"{where}: bytes {row.bytes!r} is none of {', '.join(BYTE_KINDS)}")
    if row.unit in BYTE_UNITS and not row.unchecked and not row.bytes:
        raise ValueError(f"{where}: a figure in {row.unit} says what it is: bytes = one of "
                         f"{', '.join(BYTE_KINDS)}")
    if row.bytes in TRAFFIC_WORDS and row.bytes not in row.what:
        raise ValueError(f"{where}: traffic that is {row.bytes!r} says so in its `what`")


def all_rows() -> list[Row]:
    rows = [row for table in TABLES if (CODE / table).is_file() for row in load_table(table)]
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise ValueError(f"row {row.id} appears twice")
        seen.add(row.id)
    named = {r.erratum for r in rows if r.erratum}
    entries = _errata_by_id()
    if named - set(entries):
        raise ValueError(f"rows name errata no table has: {', '.join(sorted(named - set(entries)))}")
    if set(entries) - named:
        raise ValueError(f"errata no row shows: {', '.join(sorted(set(entries) - named))}")
    return rows


@lru_cache(maxsize=None)
def _errata_by_id() -> dict[str, Erratum]:
    found: dict[str, Erratum] = {}
    for table in TABLES:
        for entry in load_errata(table) if (CODE / table).is_file() else ():
            if entry.id in found:
                raise ValueError(f"erratum {entry.id} appears twice")
            found[entry.id] = entry
    return found


def erratum(erratum_id: str) -> Erratum:
    """The [[erratum]] with this id (KeyError naming it when there is none)."""
    found = _errata_by_id().get(erratum_id)
    if found is None:
        raise KeyError(f"no erratum {erratum_id} in the notes' tables")
    return found


def all_errata() -> list[Erratum]:
    """Every distinct error of the notes, in the tables' order."""
    return list(_errata_by_id().values())


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


def next_round_figure(n: float) -> float:
    """The round figure after `n` that "N 多" stops below: 300 -> 400, 100 -> 200, 20 -> 30, 1.5 -> 2.5."""
    return n + 10.0 ** math.floor(math.log10(n))


def within_bound(ours: Any, name: str, limit: Any) -> tuple[bool, str, str]:
    """(agreed, rule, decision) for a bound the notes give ("under 3": below = 3; "300 多": n_odd)."""
    value = float(ours)
    if name == "n_odd":
        high = next_round_figure(limit)
        inside = limit <= value < high
        return inside, f"{limit:g}-odd: at least {limit:g}, below {high:g}", (
            f"{fmt_num(value, 6)} is {'inside' if inside else 'outside'} {limit:g} … {high:g}")
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
    wrong = row.erratum if status == "differs" else ""   # an erratum row that agrees shows none
    return Claim(part, row.what, ours, row.notes_shown, row.unit, row.basis, status, why, rule, decision,
                 row.id, wrong, erratum(wrong).kind if wrong else "", row.reading, row.bytes, row.statement,
                 row.section, assumes=reason(row, values, row.assumes))


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


def reason(row: Row, values: dict[str, Any], text: str | None = None) -> str:
    """The row's reason (or `text`: its assumption) with the recorded values it names filled in
    ("{uncal_ms:.2f}")."""
    text = row.why if text is None else text
    if "{" not in text:
        return text
    try:
        return text.format_map(values)
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
