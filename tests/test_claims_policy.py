"""The claims policy, checked on every claim of a whole reproduction (see common.output.Report.claim):
"agrees" only by rounding to the notes' digits, by a stated factor for an "about" value, or
exactly; a reason recorded for every comparison; a claim's status the same with and without
--quick (or "other setting"); and the inventory of the notes' statements (inventory/*.md) in
step with the claims that check them."""

from __future__ import annotations

import math
import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code"))  # also when run as a script
from common import checker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INVENTORY = ROOT / "inventory"
DOCUMENTS = {"lecture14.md": "L14-", "lecture15.md": "L15-", "handbook.md": "HB-"}
CHECKED_LECTURES = ("lecture14/", "lecture15/")  # their compared claims must name an inventory entry
COMPARED = ("agrees", "differs", "other machine", "other setting")


def inventory() -> dict[str, dict[str, str]]:
    """id -> row, from the tables of inventory/*.md."""
    rows: dict[str, dict[str, str]] = {}
    for name, prefix in DOCUMENTS.items():
        if not (INVENTORY / name).exists():
            continue  # test_the_inventory_and_the_claims_name_each_other requires all three
        for line in (INVENTORY / name).read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|") or not cells[0].startswith(prefix):
                continue
            assert len(cells) == 5, f"{name}: a row needs id, section, statement, value, script: {line}"
            entry_id, section, statement, value, script = cells
            assert entry_id not in rows, f"{entry_id} appears twice"
            assert section and statement and value, f"{entry_id}: an empty cell"
            assert (ROOT / "code" / script).is_file(), f"{entry_id}: no script {script}"
            rows[entry_id] = {"document": name, "section": section, "statement": statement,
                              "value": value, "script": script}
    return rows


def _rounded(value: float, places: int) -> Decimal:
    return Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)


def _meets_policy(claim: dict) -> bool:
    """Re-decide an "agrees" from the recorded values and rule, independently of Report.claim."""
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


def test_every_agreement_meets_the_policy(quick_reproduction: dict) -> None:
    loose = [f"{c['script']}: {c['what']} ({c['rule']})" for c in quick_reproduction["claims"]
             if c["status"] == "agrees" and not _meets_policy(c)]
    assert not loose, "claims that agree by no strict rule:\n" + "\n".join(loose)


def test_every_comparison_records_its_rule_and_reason(quick_reproduction: dict) -> None:
    for claim in quick_reproduction["claims"]:
        if claim["status"] in COMPARED:
            assert claim["rule"] and claim["decision"], claim
            if claim["script"].startswith(CHECKED_LECTURES) or claim["status"] != "agrees":
                assert claim["why"].strip(), f"{claim['script']}: {claim['what']}: no reason given"
        if claim["erratum"]:
            assert claim["status"] == "differs" and claim["why"], claim


def test_the_inventory_and_the_claims_name_each_other(quick_reproduction: dict) -> None:
    rows = inventory()
    assert set(DOCUMENTS) <= {p.name for p in INVENTORY.glob("*.md")}
    claims = quick_reproduction["claims"]
    tables = {row.id for row in checker.all_rows()}   # the notes' tables replace inventory/ script by script
    unknown = [f"{c['script']}: {c['what']} -> {c['ref']}" for c in claims
               if c["ref"] and c["ref"] not in rows and c["ref"] not in tables]
    assert not unknown, "claims naming no inventory entry:\n" + "\n".join(unknown)
    unnamed = [f"{c['script']}: {c['what']}" for c in claims
               if c["script"].startswith(CHECKED_LECTURES) and c["notes"] is not None and not c["ref"]]
    assert not unnamed, "claims of lectures 14 and 15 that name no inventory entry:\n" + "\n".join(unnamed)
    checked = {(re.sub(r"\.\d+$", "", c["ref"]), c["script"]) for c in claims}
    missing = [f"{i} ({row['script']}): {row['statement']}" for i, row in rows.items()
               if (i, row["script"]) not in checked]
    assert not missing, "inventory entries no claim checks:\n" + "\n".join(missing)


@pytest.mark.timeout(600)
def test_a_claims_status_does_not_depend_on_quick(quick_reproduction: dict, full_reproduction: dict) -> None:
    def statuses(data: dict) -> dict[tuple[str, str, int], str]:
        seen: dict[tuple[str, str], int] = {}
        found = {}
        for c in data["claims"]:
            key = (c["script"], c["ref"] or re.sub(r"[0-9.,]+", "#", c["what"]))  # a size in the text may move
            seen[key] = seen.get(key, 0) + 1
            found[(*key, seen[key])] = c["status"]
        return found

    quick, full = statuses(quick_reproduction), statuses(full_reproduction)
    assert set(quick) == set(full)
    changed = [f"{k}: {full[k]} in a full run, {quick[k]} with --quick" for k in full
               if quick[k] != full[k] and quick[k] != "other setting"
               and not {"other machine", "not measured"} & {quick[k], full[k]}]  # a timing, a fit: noise
    assert not changed, "\n".join(changed)


if __name__ == "__main__":
    # For work on one lecture: python3 tests/test_claims_policy.py RUN.json lecture14.md
    # (RUN.json from `python3 code/reproduce.py --quick --only lecture14 --json RUN.json`) lists what
    # the tests above would find for those scripts and that document.
    import json

    data = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    docs = sys.argv[2:] or list(DOCUMENTS)
    rows = {i: r for i, r in inventory().items() if r["document"] in docs} if docs else {}
    problems = [f"agrees by no strict rule: {c['script']}: {c['what']} ({c['rule']})"
                for c in data["claims"] if c["status"] == "agrees" and not _meets_policy(c)]
    problems += [f"no reason: {c['script']}: {c['what']}" for c in data["claims"]
                 if c["status"] in COMPARED and c["script"].startswith(CHECKED_LECTURES) and not c["why"].strip()]
    problems += [f"no inventory entry named: {c['script']}: {c['what']}" for c in data["claims"]
                 if c["script"].startswith(CHECKED_LECTURES) and c["notes"] is not None and not c["ref"]]
    known = set(inventory()) | {row.id for row in checker.all_rows()}
    problems += [f"names an unknown entry {c['ref']}: {c['script']}: {c['what']}" for c in data["claims"]
                 if c["ref"] and c["ref"] not in known]
    checked = {(re.sub(r"\.\d+$", "", c["ref"]), c["script"]) for c in data["claims"]}
    problems += [f"no claim checks {i} ({r['script']})" for i, r in rows.items() if (i, r["script"]) not in checked]
    print("\n".join(problems) or "no problems found")
    sys.exit(1 if problems else 0)
