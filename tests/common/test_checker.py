"""The one checker (common/checker.py): the notes' tables load and are consistent, every rule decides
as the notes' digits say, a changed notes' value turns into a differs, a row only a changed flag it
depends on voids, and a value a row needs but no run records is caught."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from common import agreement, checker, row_tables, verdicts
from common.checker import Row, decide
from common.error_types import RunFailure
from common.output import Report
from common.text import PAGE_WIDTH


class _AnyValue(dict):
    """Recorded values for a reason template: whatever it names reads as 0."""

    def __missing__(self, key: str) -> int:
        return 0


def _row(**fields: object) -> Row:
    base = dict(id="T-1", document="test", section="§0", statement="a test row",
                script="lecture15/03_overlap.py", value="x", what="x", notes=53.3, unit="ms",
                basis=checker.ASSUMPTION, places=1)
    return Row(**{**base, **fields})


def test_every_table_loads_and_ids_are_unique() -> None:
    rows = checker.all_rows()
    assert rows and len({r.id for r in rows}) == len(rows)
    for row in rows:
        assert row.statement and row.section, row.id
        if not row.unchecked:
            assert row.basis in checker.BASES and row.what and row.value, row.id
            assert "TODO" not in row.depends, f"{row.id}: depends not decided"


@pytest.mark.parametrize("ours, status", [(53.28, "agrees"), (53.36, "differs"), (53.24, "differs"),
                                          (53.25, "agrees"), (53.2499, "differs")])
def test_rounding_to_the_notes_digits(ours: float, status: str) -> None:
    assert decide(_row(), "Part 1", {"x": ours}, []).status == status


def test_editing_a_rows_notes_value_makes_it_differ() -> None:
    """A value equal to the notes' figure agrees; the same value, the notes' figure edited in the table:
    the checker says differs (a checker that never agrees fails the first assertion)."""
    for row in checker.all_rows():
        if (row.unchecked or row.basis in (checker.MEASURED, checker.CALIBRATION) or row.bound or row.same_as
                or not row.compares):
            continue   # a same_as row has no notes' figure to edit: test_same_as_compares_two_values_of_ours
        edited = dataclasses.replace(row, notes=(not row.notes) if isinstance(row.notes, bool)
                                     else f"{row.notes}?" if isinstance(row.notes, str)
                                     else row.notes * 1000 + 1)
        agreeing = row.notes if isinstance(row.notes, (bool, str)) else row.notes
        values = _AnyValue({row.value: agreeing})
        assert decide(row, "Part 1", values, []).status == "agrees", row.id    # the notes' own figure
        assert decide(edited, "Part 1", values, []).status == "differs", row.id


def test_editing_a_rows_bound_makes_it_differ() -> None:
    """The same for a bound the notes give ("under 3", "300 多"): a value inside it agrees, and
    the bound moved past it differs."""
    inside = {"below": lambda b: (b - 0.5, ("below", b - 0.5)),
              "above": lambda b: (b + 0.5, ("above", b + 0.5)),
              "between": lambda b: ((b[0] + b[1]) / 2, ("between", ((b[0] + b[1]) / 2 + 1, b[1] + 2))),
              "n_odd": lambda b: (b, ("n_odd", b * 10))}
    bounded = [r for r in checker.all_rows() if not r.unchecked and r.bound and r.basis not in
               (checker.MEASURED, checker.CALIBRATION)]
    assert bounded
    for row in bounded:
        name, limit = row.bound
        ours, (name, moved) = inside[name](limit)
        values = _AnyValue({row.value: ours})
        assert decide(row, "Part 1", values, []).status == "agrees", row.id
        moved_row = dataclasses.replace(row, **{name: moved})
        assert decide(moved_row, "Part 1", values, []).status == "differs", row.id


def test_bounds_and_calibration_and_measured() -> None:
    assert decide(_row(notes=None, places=None, below=10), "P", {"x": 9.9}, []).status == "agrees"
    assert decide(_row(notes=None, places=None, below=10), "P", {"x": 10}, []).status == "differs"
    assert decide(_row(notes=None, places=None, above=5), "P", {"x": 5.1}, []).status == "agrees"
    assert decide(_row(notes=None, places=None, between=(50, 200)), "P", {"x": 201}, []).status == "differs"
    calibrated = decide(_row(basis=checker.CALIBRATION), "P", {"x": 53.3}, [])
    assert calibrated.status == "calibration target" and calibrated.rule == "not compared"
    assert decide(_row(basis=checker.MEASURED), "P", {"x": 60.0}, []).status == "other machine"
    some = checker.all_errata()[0]
    slip = decide(_row(erratum=some.id, why="the notes write {x:.1f}"), "P", {"x": 60.0}, [])
    assert slip.erratum == some.id and slip.error == some.kind and slip.status == "differs"
    assert slip.why == "the notes write 60.0"
    assert not decide(_row(erratum=some.id), "P", {"x": 53.3}, []).erratum   # one that agrees is none


@pytest.mark.parametrize("ours, status", [(299.9, "differs"), (300, "agrees"), (399.9, "agrees"),
                                          (400, "differs"), (3000, "differs")])
def test_n_odd_is_the_notes_words_n_duo(ours: float, status: str) -> None:
    """"300 多 ms" is 300-odd: at least 300, below the next round figure (3 s does not agree)."""
    row = _row(notes=None, places=None, n_odd=300)
    assert decide(row, "P", {"x": ours}, []).status == status
    assert row.notes_shown == "300-odd"
    assert [agreement.next_round_figure(n) for n in (100, 300, 20, 1.5)] == [200, 400, 30, 2.5]


def _table(tmp_path, monkeypatch, text: str) -> str:
    """A table file of a test's own under code/ (load_table reads paths relative to it)."""
    monkeypatch.setattr(row_tables, "CODE", tmp_path)
    (tmp_path / "t.toml").write_text(text, encoding="utf-8")
    row_tables.read_table.cache_clear()
    checker.load_table.cache_clear()
    checker.load_errata.cache_clear()
    return "t.toml"


ROW = """[[row]]
id = "T-2"
section = "§1"
statement = "s"
script = "lecture15/03_overlap.py"
value = "x"
what = "x"
notes = 150
unit = "MB"
bytes = "size"
"""


def test_an_erratum_whose_ours_and_notes_units_differ_is_refused(tmp_path, monkeypatch) -> None:
    """The notes' 150 (MiB, as their own A) beside our MB is not like for like."""
    table = _table(tmp_path, monkeypatch, ROW + 'erratum = "E"\nprinted_unit = "MiB"\n')
    with pytest.raises(ValueError, match="like with like"):
        checker.load_table(table)
    table = _table(tmp_path, monkeypatch, ROW + 'erratum = "E"\nprinted_unit = "MiB"\nreading = "r"\n')
    assert checker.load_table(table)[0].printed_unit == "MiB"   # a stated reading makes them one unit
    checker.load_table.cache_clear()


@pytest.mark.parametrize("fields, message", [
    ('', "says what it is"),                                    # a byte figure that does not say
    ('bytes = "sent"', "none of"),                              # a kind that is none of the four
    ('bytes = "ring model"', "says so in its `what`"),          # traffic whose label hides which
])
def test_a_byte_figure_says_whether_it_is_a_size_counted_sent_or_priced(tmp_path, monkeypatch, fields: str,
                                                                        message: str) -> None:
    table = _table(tmp_path, monkeypatch, ROW.replace('bytes = "size"\n', fields + "\n"))
    with pytest.raises(ValueError, match=message):
        checker.load_table(table)
    table = _table(tmp_path, monkeypatch, ROW.replace('what = "x"', 'what = "x (ring model)"')
                   .replace('bytes = "size"', 'bytes = "ring model"'))
    assert checker.load_table(table)[0].bytes == "ring model"
    checker.load_table.cache_clear()


def test_every_byte_claim_in_the_json_says_what_it_is() -> None:
    rows = [r for r in checker.all_rows() if r.unit in row_tables.BYTE_UNITS and not r.unchecked]
    assert rows and all(r.bytes in row_tables.BYTE_KINDS for r in rows)
    claim = checker.decide(rows[0], "P", {rows[0].value: 1}, [])
    assert claim.bytes == rows[0].bytes


@pytest.mark.parametrize("entry, message", [
    ('kind = "typo"\ntitle = "t"\nplaces = ["§1"]\nargument = "a"', "kind"),
    ('kind = "inconsistency"\ntitle = "t"\nplaces = ["§1"]\nargument = "a"', "both places"),
    ('kind = "slip"\ntitle = "t"\nplaces = []\nargument = "a"', "places"),
    ('kind = "slip"\ntitle = "t"\nplaces = ["§1"]\nargument = "{x} MB"', "template"),
])
def test_an_erratum_says_what_its_kind_needs(tmp_path, monkeypatch, entry: str, message: str) -> None:
    table = _table(tmp_path, monkeypatch, f'[[erratum]]\nid = "E"\n{entry}\n')
    with pytest.raises(ValueError, match=message):
        checker.load_errata(table)
    checker.load_errata.cache_clear()


def test_every_erratum_is_shown_by_a_row_and_every_named_one_exists() -> None:
    rows = checker.all_rows()
    named = {r.erratum for r in rows if r.erratum}
    assert named == {e.id for e in checker.all_errata()}
    for row in rows:
        if row.erratum:
            assert row.compares and not row.own and row.why, row.id


def judgement_conflicts(rows: list[Row]) -> dict[str, set[tuple[str, str]]]:
    """The statements (`states` keys) whose rows are judged differently: {key: the judgements},
    each (the erratum's kind or "", the reading or ""). Empty when the same statement is judged alike
    in every table."""
    judged: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        if r.states:
            judged.setdefault(r.states, set()).add((checker.erratum(r.erratum).kind if r.erratum else "",
                                                    r.reading))
    return {key: kinds for key, kinds in judged.items() if len(kinds) > 1}


def test_the_same_statement_gets_the_same_judgement_in_every_table() -> None:
    """Rows that state one thing (a shared `states` key, in one table or several) are judged alike:
    the same kind of error, or the same reading, or neither; and one of them judged otherwise fails."""
    rows = checker.all_rows()
    assert judgement_conflicts(rows) == {}
    shared = [r for r in rows if r.states and sum(o.states == r.states for o in rows) > 1]
    assert shared, "no statement is shared between rows: the check would check nothing"
    slip = next(e for e in checker.all_errata() if e.kind == checker.SLIP)
    for twin in shared:
        changed = dataclasses.replace(twin, erratum="" if twin.erratum else slip.id,
                                      reading="" if twin.reading else "another reading")
        mutated = [changed if r.id == twin.id else r for r in rows]
        assert twin.states in judgement_conflicts(mutated), twin.id


def test_same_as_compares_two_values_of_ours() -> None:
    row = _row(notes=None, places=None, same_as="scratch", basis=checker.OBSERVED)
    assert decide(row, "P", {"x": 1024, "scratch": 1024}, []).status == "agrees"
    claim = decide(row, "P", {"x": 1024, "scratch": 2048}, [])
    assert claim.status == "differs" and claim.notes == 2048
    with pytest.raises(ValueError, match="same_as"):
        checker._check_row(_row(same_as="scratch"), "test")   # a notes' figure too


def test_a_changed_flag_voids_only_the_rows_that_depend_on_it() -> None:
    defaults = {"world_size": ("--world-size", 16), "seed": ("--seed", 0)}
    args = argparse.Namespace(world_size=8, seed=0, quick=False, _notes_setting=defaults)
    report = Report.__new__(Report)
    report.args = args
    fixed, moved = _row(depends=()), _row(depends=("--world-size",))
    assert not report._off(fixed) and report._off(moved) == ["--world-size 8 (notes' setting: 16)"]
    assert decide(moved, "P", {"x": 53.3}, report._off(moved)).status == "other setting"
    assert decide(fixed, "P", {"x": 53.3}, report._off(fixed)).status == "agrees"
    with pytest.raises(KeyError, match="--no-such-flag"):
        report._off(_row(depends=("--no-such-flag",)))


def test_a_value_no_run_records_is_reported_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    report = Report("code/lecture15/03_overlap.py", "test", None)
    assert report.rows, "03_overlap.py's rows"
    report._values = _AnyValue()
    report.value(report.rows[0].value, 1.0)
    data = report.finish()
    missing = [c for c in data["claims"] if c["status"] == "not recorded"]
    assert len(missing) == sum(r.value != report.rows[0].value for r in report.rows)
    assert report.rows[1].id in capsys.readouterr().out


def test_a_value_recorded_twice_is_a_mistake() -> None:
    report = Report("code/lecture15/03_overlap.py", "test", None)
    report.value("x", 1)
    with pytest.raises(ValueError, match="recorded twice"):
        report.value("x", 2)


def test_a_failed_self_check_ends_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    report = Report("code/lecture15/03_overlap.py", "test", None)
    for row in report.rows:
        report._values.setdefault(row.value, None)
    assert report.check_close("data parallel = one process", 1e-15, 1e-12)
    assert not report.check_close("tensor parallel = one process", 3e-2, 1e-12)
    assert not report.check_close("a NaN gap fails", float("nan"), 1e-12)
    with pytest.raises(RunFailure, match="tensor parallel = one process: max .difference. 0.03"):
        report.finish()
    assert "FAILED" in capsys.readouterr().out


def test_reasons_name_only_recorded_values() -> None:
    with pytest.raises(KeyError, match="T-1"):
        checker.reason(_row(why="{nothing_recorded}"), {})


@pytest.mark.parametrize("value", ["x" * 5, "y" * (verdicts.VALUE_COLUMN + 1)])
def test_the_comparison_fits_the_page_whether_values_fit_their_column_or_not(value: str) -> None:
    # A table where no value fits its column still holds the verdict words: its lines were 104
    # columns when the verdict column was measured on the fitting rows alone.
    claim = checker.Claim("Part 1", "a statement", value, value, "", checker.EXACT,
                          "differs", "why", erratum="E", error=checker.SLIP)
    lines = verdicts.comparison_lines([claim])
    assert max(len(line) for line in lines) <= PAGE_WIDTH
    # the verdict word a reader sees in the comparison's lines (the words are what is tested)
    assert any("error in the notes" in line for line in lines)


def test_our_own_checks_are_headed_as_ours_and_the_notes_rows_as_the_notes() -> None:
    # An engines' row's "notes" field is what we expect, not a figure of the notes: printing it
    # under "notes" would put words in the notes' mouth.
    own = next(r for r in checker.all_rows() if r.own)
    theirs = next(r for r in checker.all_rows() if not r.own)
    assert own.id.startswith("EN-") and not theirs.id.startswith("EN-")

    def claim(row: Row) -> checker.Claim:
        return checker.Claim("Part 1", row.what, 1, 1, "", row.basis, "agrees", "", ref=row.id)

    heading = ["our", "checks", "ours", "expected", "verdict"]
    assert verdicts.comparison_lines([claim(own)])[0].split() == heading
    for claims in ([claim(theirs)], [claim(theirs), claim(own)]):   # one of the notes' rows: theirs
        assert verdicts.comparison_lines(claims)[0].split() == ["vs", "the", "notes", "ours", "notes",
                                                               "verdict"]
