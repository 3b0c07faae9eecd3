"""The one checker (common/checker.py): the notes' tables load and are consistent, every rule decides
as the notes' digits say, a changed notes' value turns into a differs, a row only a changed flag it
depends on voids, and a value a row needs but no run records is caught."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from common import checker
from common.checker import Row, decide
from common.errors import RunFailure
from common.output import Report


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
    """The same recorded value, the notes' figure edited in the table: the checker says differs."""
    for row in checker.all_rows():
        if row.unchecked or row.basis in (checker.MEASURED, checker.CALIBRATION) or row.bound or row.same_as:
            continue   # a same_as row has no notes' figure to edit: test_same_as_compares_two_values_of_ours
        edited = dataclasses.replace(row, notes=(not row.notes) if isinstance(row.notes, bool)
                                     else f"{row.notes}?" if isinstance(row.notes, str)
                                     else row.notes * 1000 + 1)
        agreeing = row.notes if isinstance(row.notes, (bool, str)) else row.notes
        values = _AnyValue({row.value: agreeing})
        assert decide(row, "Part 1", values, []).status in ("agrees", "differs"), row.id
        assert decide(edited, "Part 1", values, []).status == "differs", row.id


def test_bounds_and_calibration_and_measured() -> None:
    assert decide(_row(notes=None, places=None, below=10), "P", {"x": 9.9}, []).status == "agrees"
    assert decide(_row(notes=None, places=None, below=10), "P", {"x": 10}, []).status == "differs"
    assert decide(_row(notes=None, places=None, above=5), "P", {"x": 5.1}, []).status == "agrees"
    assert decide(_row(notes=None, places=None, between=(50, 200)), "P", {"x": 201}, []).status == "differs"
    calibrated = decide(_row(basis=checker.CALIBRATION), "P", {"x": 53.3}, [])
    assert calibrated.status == "calibration target" and calibrated.rule == "not compared"
    assert decide(_row(basis=checker.MEASURED), "P", {"x": 60.0}, []).status == "other machine"
    slip = decide(_row(slip=True, why="the notes write {x:.1f}"), "P", {"x": 60.0}, [])
    assert slip.erratum and slip.status == "differs" and slip.why == "the notes write 60.0"
    assert not decide(_row(slip=True), "P", {"x": 53.3}, []).erratum   # a slip that agrees is none


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


@pytest.mark.parametrize("value", ["x" * 5, "y" * (checker.VALUE_COLUMN + 1)])
def test_the_comparison_fits_the_page_whether_values_fit_their_column_or_not(value: str) -> None:
    # A table where no value fits its column still holds the verdict words: its lines were 104
    # columns when the verdict column was measured on the fitting rows alone.
    claim = checker.Claim("Part 1", "a statement", value, value, "", checker.EXACT,
                          "differs (the notes' slip)", "why")
    lines = checker.comparison_lines([claim])
    assert max(len(line) for line in lines) <= checker.PAGE_WIDTH
    assert any("differs (the notes' slip)" in line for line in lines)


def test_our_own_checks_are_headed_as_ours_and_the_notes_rows_as_the_notes() -> None:
    # An engines' row's "notes" field is what we expect, not a figure of the notes: printing it
    # under "notes" would put words in the notes' mouth.
    own = next(r for r in checker.all_rows() if r.own)
    theirs = next(r for r in checker.all_rows() if not r.own)
    assert own.id.startswith("EN-") and not theirs.id.startswith("EN-")

    def claim(row: Row) -> checker.Claim:
        return checker.Claim("Part 1", row.what, 1, 1, "", row.basis, "agrees", "", ref=row.id)

    heading = ["our", "checks", "ours", "expected", "verdict"]
    assert checker.comparison_lines([claim(own)])[0].split() == heading
    for claims in ([claim(theirs)], [claim(theirs), claim(own)]):   # one of the notes' rows: theirs
        assert checker.comparison_lines(claims)[0].split() == ["vs", "the", "notes", "ours", "notes",
                                                               "verdict"]
