"""The one checker: every statement of the notes, decided against what the scripts recorded.

The notes are data, one TOML table per document beside the scripts that check it (row_tables.TABLES);
a row is one number or checkable statement of the notes, in our words. The rows' fields, the id
convention, how a row finds its script and its part, templates and parameter lists: docs/rows.md.
Here: the rows and errata loaded and checked against that schema, and each row decided (`decide`) on
the values a script recorded; common/agreement.py holds the agreement rules' arithmetic.
reproduce.py, the report pages, docs/errata.md (reproduction/errata.py) and the tests all read what this
decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Sequence

from common.agreement import compare, within_bound
from common.row_tables import CODE, OWN_TABLES, TABLES, check_bytes, read_table, table_rows

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
    """The rows of one document's table (code/<relpath>), parameter lists expanded, each checked for
    the fields a row needs."""
    document = read_table(relpath).get("document", relpath)
    rows = []
    for raw in table_rows(relpath):
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
    data = read_table(relpath)
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


def _check_row(row: Row, relpath: str) -> None:
    where = f"{relpath}: row {row.id}"
    if row.printed_unit and row.printed_unit != row.unit and not row.reading:
        raise ValueError(f"{where}: the notes print {row.printed_unit}, ours is in {row.unit}: compare like "
                         "with like (convert), or state the reading that makes them one unit")
    check_bytes(row.unit, row.bytes, row.what, row.unchecked, where)
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
