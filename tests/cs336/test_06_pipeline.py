"""CS336 pipeline parallelism, script 06 (06_pipeline.py) run as a student would."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_script

from common import checker, verdicts

SCRIPT = "cs336/06_pipeline.py"


# ---- the script --------------------------------------------------------------------------------------

SLIPS = ({f"CS-bubble-S{s}-M{m}-{what}"
          for s, m in [(4, 4), (4, 8), (4, 16), (4, 32), (8, 8), (8, 32)] for what in ("bubble", "share")}
         | {"CS-five-pct-S8-notes", "CS-five-pct-S4-real", "CS-five-pct-S8-real"})
# The 5 % over Narayanan et al.'s ideal time: not the notes' definition and no figure of theirs, so
# ours only (their 19 and 44 are compared by the rows on their own share), never a slip of theirs.
OURS_ONLY = {"CS-five-pct-S4-narayanan", "CS-five-pct-S8-narayanan"}


def test_script_quick_run_and_claims(tmp_path: Path, quick_run) -> None:
    out = tmp_path / "o.json"
    text = quick_run(SCRIPT, json_to=out).stdout
    for part in range(1, 6):
        assert f"== Part {part}:" in text
    assert all(len(line) <= 100 for line in text.splitlines()), max(text.splitlines(), key=len)
    assert "stage 0 |00112233............aaaa44bbbb55" in text   # the chart itself is what is tested
    claims = {c["ref"]: c for c in json.loads(out.read_text())["claims"]}
    differs = {w for w, c in claims.items() if c["status"] == "differs"}
    assert differs == SLIPS
    assert {w for w, c in claims.items() if c["status"] == "ours only"} == OURS_ONLY
    # one slip, the forward-only bubble, for all but the S = 8 bound rounded down
    assert {c["erratum"] for c in claims.values() if c["erratum"]} == {
        "CS-err-forward-only-bubble", "CS-err-five-pct-S8-rounded-down"}
    assert {w for w, c in claims.items() if c["erratum"]} == SLIPS
    assert all(c["status"] == "agrees" for w, c in claims.items() if w not in differs | OURS_ONLY)
    assert all(c["why"] for c in claims.values() if c["status"] == "differs")
    # η table 4 + its trend, bubble table 30 + the shortcut, 5 % rows 6, Part 4's 5, Part 5's pace
    assert len(claims) == 4 + 1 + 30 + 1 + 6 + 5 + 1
    assert claims["CS-five-pct-S8-notes"]["ours"] == 45
    assert claims["CS-five-pct-S4-real"]["ours"] == 57
    assert claims["CS-five-pct-S4-narayanan"]["ours"] == 60   # (S-1)/M ≤ 5 %
    assert claims["CS-five-pct-S8-narayanan"]["ours"] == 140
    assert claims["CS-bubble-S8-M8-bubble"]["ours"] == pytest.approx(210)
    assert claims["CS-bubble-S8-M8-notes-share"]["ours"] == pytest.approx(100 * 70 / 310)
    assert claims["CS-eta-S4-M8"]["ours"] == pytest.approx(800 / 11)
    assert claims["CS-interleaved-half"]["ours"] == pytest.approx(0.5)
    assert claims["CS-pp-slowest"]["ours"] is True
    # The bubble table is printed once, the notes' figures as its columns beside ours, each cell's
    # verdict a mark, each reason once and naming a row the table shows.
    assert " ".join(text.split()).count("counts the forward fill only") == 1
    part3 = text[text.index("== Part 3"):text.index("== Part 4")]
    # the table's rows (5 a configuration, and the shortcut): the simulated bubble and share of each
    # configuration are errors in the notes; their formula's (¹ ²) and the shortcut (³) match, assuming
    said = [c["verdict"] for w, c in claims.items() if w.startswith("CS-bubble-")]
    assert Counter(said) == {"error in the notes": 12, "matches": 6, "matches, assuming": 13}
    # The count under the table is a sentence the student reads: it counts the table's rows (the
    # sentence is what is tested: Part 3's other rows, the 5 % table's, have a sentence of their own).
    assert f"(their figures in the table above): {verdicts.count_sentence(said)}." in " ".join(part3.split())
    table = json.loads(out.read_text())["parts"]["Part 3"]["tables"]["bubble"]
    bubble = {row[0]: row for row in table["rows"]}
    assert bubble["S=4, M=8"][1:4] == ["30 ms", "30 ✓¹", "90 ✗"]
    # every verdict of the table's rows is a mark the student can see (the shortcut line's ✓³ too),
    # and every superscript on a cell has its footnote in the part
    shortcut = part3.split("every row: ")[1].split()[1]
    cells = [cell for row in table["rows"] for cell in row[1:]] + [shortcut]
    assert sum(c.endswith("✗") for c in cells) == said.count("error in the notes")
    assert sum("✓" in c for c in cells) == said.count("matches") + said.count("matches, assuming")
    for mark in {c[-1] for c in cells if c[-1] in "¹²³"}:
        assert f"{mark} assumes: " in part3, mark
    # a reason names a row the table shows, in the words printed
    assert "why: S=4, M=4 bubble, simulated" in part3 and "S=4, M=4" in bubble


def test_script_other_flags(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    text = run_script(SCRIPT, "--pp", "6", "--micro-batches", "13", "--tf-ms", "5", "--tb-ms", "5",
                      "--p2p-ms", "1", "--virtual-stages", "3", "--slow-factor", "3",
                      "--json", str(out)).stdout
    data = json.loads(out.read_text())
    claims = {c["ref"]: c for c in data["claims"]}
    # Not the notes' t_f, t_b, v: the rows that depend on them are not compared ("other setting");
    # the rows no flag changes (the real schedule's 5 % bounds, Parts 4 and 5) keep their verdicts.
    moved = {"--tf-ms", "--tb-ms", "--virtual-stages", "--pp", "--micro-batches"}
    voided = {r.id for r in checker.rows_for(SCRIPT) if moved & set(r.depends)}
    assert voided >= {"CS-bubble-S4-M4-bubble", "CS-interleaved-half"}
    for what, c in claims.items():
        expected = ("other setting" if what in voided else "differs" if what in SLIPS
                    else "ours only" if what in OURS_ONLY else "agrees")
        assert c["status"] == expected, what
    # p = 8's M differs whatever t_f is.
    assert claims["CS-five-pct-S8-real"]["status"] == "differs"
    assert "it leaves p2p out" in text   # the closed form's caption says what it leaves out (words tested)
    part5 = data["parts"]["Part 5"]["tables"]["unbalanced"]["rows"]
    assert part5[1][0] == "stage 3 × 3"   # --slow-factor 3 on the middle stage (p = 6)
    assert part5[1][2] == pytest.approx(30.0) and part5[1][6] >= 1   # pace 3 × (5 + 5) ms
    part1 = data["parts"]["Part 1"]["1F1B"]
    assert part1["peak_activations"] == [6, 5, 4, 3, 2, 1]
    assert part1["makespan_ms"] > (13 + 5) * 10                        # p2p adds to the closed form


def test_script_large_and_tiny() -> None:
    text = run_script(SCRIPT, "--pp", "64", "--micro-batches", "1024").stdout
    assert "scaled: one column" in text and "16 of 64 stages shown" in text   # the chart's legend, tested
    assert all(len(line) <= 100 for line in text.splitlines())
    run_script(SCRIPT, "--pp", "1", "--micro-batches", "1")


@pytest.mark.parametrize("args", [
    ["--pp", "0"], ["--micro-batches", "-1"], ["--pp", "129"], ["--pp", "64", "--micro-batches", "1025"],
    ["--virtual-stages", "1"], ["--slow-factor", "0.5"], ["--tf-ms", "0"], ["--tb-ms", "nan"],
    ["--p2p-ms", "-1"], ["--pp", "four"], ["--stages", "4"],  # one flag per knob: --pp, as 05_parallel.py
    ["--virtual-stages", "257"], ["--virtual-stages", "999999999"],  # S·M·v passes, built in memory
])
def test_usage_errors(args: list[str]) -> None:
    assert_usage_error(SCRIPT, *args)
