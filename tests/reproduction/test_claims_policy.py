"""The claims policy, checked on every claim of a whole reproduction (decided by common.checker):
"agrees" only by rounding to the notes' digits, by a stated factor for an "about" value, within a
bound the notes give, or exactly; a reason recorded for every comparison; a claim's status the
same with and without --quick (or "other setting"); and the notes' tables (code/*/notes.toml) in
step with what the scripts record: every claim names a row, every checked row is decided."""

from __future__ import annotations

import math
import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code"))  # also when run as a script
from common import checker  # noqa: E402
from reproduction.suite import scripts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMPARED = ("agrees", "differs", "other machine", "other setting")


def _rounded(value: float, places: int) -> Decimal:
    return Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)


def _meets_policy(claim: dict) -> bool:
    """Re-decide an "agrees" from the recorded values and rule, independently of checker.decide."""
    ours, notes, rule = claim["ours"], claim["notes"], claim["rule"]
    if rule == "equal":
        return ours == notes
    if rule == "exact":
        return math.isclose(float(ours), float(notes), rel_tol=1e-9, abs_tol=1e-12)
    if match := re.fullmatch(r"rounds to (\d+) decimal places?", rule):
        return _rounded(ours, int(match[1])) == _rounded(notes, int(match[1]))
    if match := re.fullmatch(r"(below|above) ([0-9.e+-]+)", rule):
        limit = float(match[2])
        return float(ours) < limit if match[1] == "below" else float(ours) > limit
    if match := re.fullmatch(r"([0-9.e+-]+)-odd: at least \1, below ([0-9.e+-]+)", rule):
        low, high = float(match[1]), float(match[2])   # "N 多": high the next round figure
        return high == low + 10 ** math.floor(math.log10(low)) and low <= float(ours) < high
    if match := re.fullmatch(r"between ([0-9.e+-]+) and ([0-9.e+-]+)", rule):
        return float(match[1]) <= float(ours) <= float(match[2])
    if match := re.fullmatch(r"within a factor of ([0-9.e+]+)", rule):
        factor = float(match[1])
        low, high = sorted((notes / factor, notes * factor))
        return factor >= 1 and low <= ours <= high
    return False  # any other rule (a relative tolerance) cannot make a claim agree


def test_the_policy_refuses_loose_agreement() -> None:
    assert _meets_policy({"ours": 3.149, "notes": 3.15, "rule": "rounds to 2 decimal places"})
    assert not _meets_policy({"ours": 3.16, "notes": 3.15, "rule": "rounds to 2 decimal places"})
    assert not _meets_policy({"ours": 3.16, "notes": 3.15, "rule": "within rtol 0.05"})
    assert not _meets_policy({"ours": 1.96875, "notes": 2.0, "rule": "exact"})
    assert _meets_policy({"ours": 2.5e-5, "notes": 1e-5, "rule": "within a factor of 3"})
    assert _meets_policy({"ours": 0.26, "notes": "< 10", "rule": "below 10"})
    assert not _meets_policy({"ours": 10, "notes": "< 10", "rule": "below 10"})
    assert not _meets_policy({"ours": 201, "notes": "50–200", "rule": "between 50 and 200"})
    assert _meets_policy({"ours": 350, "notes": "300-odd", "rule": "300-odd: at least 300, below 400"})
    assert not _meets_policy({"ours": 3000, "notes": "300-odd", "rule": "300-odd: at least 300, below 400"})
    assert not _meets_policy({"ours": 3000, "notes": "300-odd", "rule": "300-odd: at least 300, below 4000"})


def test_every_agreement_meets_the_policy(quick_reproduction: dict) -> None:
    loose = [f"{c['script']}: {c['what']} ({c['rule']})" for c in quick_reproduction["claims"]
             if c["status"] == "agrees" and not _meets_policy(c)]
    assert not loose, "claims that agree by no strict rule:\n" + "\n".join(loose)


def test_every_comparison_records_its_rule_and_reason(quick_reproduction: dict) -> None:
    for claim in quick_reproduction["claims"]:
        if claim["status"] in COMPARED:
            assert claim["rule"] and claim["decision"], claim
            if claim["script"].startswith(("lecture14/", "lecture15/")) or claim["status"] != "agrees":
                assert claim["why"].strip(), f"{claim['script']}: {claim['what']}: no reason given"
        if claim["erratum"]:
            assert claim["status"] == "differs" and claim["why"], claim
            assert claim["error"] in checker.ERROR_KINDS, claim


def test_errata_say_their_kind_and_inconsistencies_name_both_places(quick_reproduction: dict) -> None:
    """--json lists each distinct error once, with its kind and its rows; an inconsistency quotes
    both places of the notes; ours and the notes' share one unit in every row."""
    entries = {e["id"]: e for e in quick_reproduction["errata"]}
    shown = [c for c in quick_reproduction["claims"] if c["erratum"]]
    assert shown and {c["erratum"] for c in shown} == set(entries)
    for entry in entries.values():
        assert entry["kind"] in checker.ERROR_KINDS and entry["instances"]
        assert len(entry["places"]) >= (2 if entry["kind"] == checker.INCONSISTENCY else 1), entry["id"]
    for claim in shown:
        assert entries[claim["erratum"]]["kind"] == claim["error"]
        row = checker.row(claim["ref"])
        assert not row.printed_unit or row.printed_unit == row.unit or row.reading, claim["ref"]


def table_problems(claims: list[dict], scripts: set[str]) -> list[str]:
    """What keeps the tables and a reproduction's claims from naming each other: a claim that names
    no row, a row a script never recorded a value for, a checked row of a script that ran that no
    claim decided (a row that no script decides)."""
    rows = {row.id: row for row in checker.all_rows()}
    problems = [f"names no row of the notes' tables: {c['script']}: {c['what']} ({c['ref']!r})"
                for c in claims if c["ref"] not in rows]
    problems += [f"not recorded: {c['ref']} ({c['script']}): {c['why']}" for c in claims
                 if c["status"] == "not recorded"]
    decided = {c["ref"] for c in claims}
    problems += [f"no script decides {row.id} ({row.script}): {row.statement}" for row in rows.values()
                 if not row.unchecked and row.script in scripts and row.id not in decided]
    problems += [f"{row.id}: no script {row.script}" for row in rows.values()
                 if not row.unchecked and not (ROOT / "code" / row.script).is_file()]
    return problems


def test_the_tables_and_the_claims_name_each_other(quick_reproduction: dict) -> None:
    ran = {run["script"] for run in quick_reproduction["runs"]}
    problems = table_problems(quick_reproduction["claims"], ran)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(600)
def test_a_claims_status_does_not_depend_on_quick(full_reproduction: dict, quick_reproduction: dict) -> None:
    # full first: a worker computes it while another computes the quick one others wait for
    def statuses(data: dict) -> dict[tuple[str, str, int], str]:
        seen: dict[tuple[str, str], int] = {}
        found = {}
        for c in data["claims"]:
            # Without a ref the text is the key, its numbers masked: a size in the text may move.
            key = (c["script"], c["ref"] or re.sub(r"[0-9.,]+", "#", c["what"]))
            seen[key] = seen.get(key, 0) + 1
            found[(*key, seen[key])] = c["status"]
        return found

    quick, full = statuses(quick_reproduction), statuses(full_reproduction)
    run_full = {run["script"] for run in full_reproduction["runs"]}
    assert run_full == {s.name for s in scripts() if s.shortened}
    full |= {key: status for key, status in quick.items() if key[0] not in run_full}   # the same run
    assert set(quick) == set(full)
    changed = [f"{k}: {full[k]} in a full run, {quick[k]} with --quick" for k in full
               if quick[k] != full[k] and quick[k] != "other setting"
               and not {"other machine", "not measured"} & {quick[k], full[k]}]  # a timing, a fit: noise
    assert not changed, "\n".join(changed)


if __name__ == "__main__":
    # For work on one lecture: python3 tests/reproduction/test_claims_policy.py RUN.json (RUN.json from
    # `python3 code/reproduce.py --quick --only lecture14 --json RUN.json`) lists what the tests
    # above would find for the scripts that run covers.
    import json

    data = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    problems = [f"agrees by no strict rule: {c['script']}: {c['what']} ({c['rule']})"
                for c in data["claims"] if c["status"] == "agrees" and not _meets_policy(c)]
    problems += [f"no reason: {c['script']}: {c['what']}" for c in data["claims"]
                 if c["status"] in COMPARED and c["status"] != "agrees" and not c["why"].strip()]
    problems += table_problems(data["claims"], {run["script"] for run in data["runs"]})
    print("\n".join(problems) or "no problems found")
    sys.exit(1 if problems else 0)
