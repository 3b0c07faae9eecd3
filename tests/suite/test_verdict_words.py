"""One vocabulary (common/verdicts.VERDICTS): the terminal's tables and legend, --json's "verdict",
reproduce.py's list, the report's pages and report.md, --help and the README say the same word for
the same decision, each word meaning what VERDICTS says it means."""

from __future__ import annotations

import itertools
import re

import pytest
from conftest import ROOT, flat, run_script

from common import checker, verdicts
from common.checker import Claim

WORDS = tuple(verdicts.BY_WORD)
# Words of the vocabulary before issue 31: none may come back, anywhere a reader looks.
RETIRED = ("agrees: exact", "agrees: assumption", "agrees: measured", "agrees: reading", "notes' slip",
           "differs = see why", "agrees plus a kind", "(exact)", "✓*")
MARKS = "".join(verdicts.SUPERSCRIPTS)


def _claims_of_every_kind() -> list[Claim]:
    """A claim for every combination a decision can have (status, basis, reading, erratum, own)."""
    own = next(r.id for r in checker.all_rows() if r.own)
    theirs = next(r.id for r in checker.all_rows() if not r.own)
    statuses = ("agrees", "differs", "calibration target", "other machine", "other setting",
                "not measured", "ours only", "not recorded")
    claims = []
    for status, kind, reading, error, ref in itertools.product(
            statuses, checker.BASES, ("", "MB for MiB"), ("",) + checker.ERROR_KINDS, (own, theirs)):
        if error and (status != "differs" or ref == own) or reading and ref == own:
            continue              # an erratum is a "differs" of the notes' rows; a reading theirs too
        if kind == checker.CALIBRATION and status in ("agrees", "differs"):
            continue              # a calibration target is never judged
        claims.append(Claim("Part 1", "w", 1, 1, "", kind, status, "why", ref=ref,
                            erratum="E" if error else "", error=error, reading=reading))
    return claims


def test_every_decision_has_exactly_one_word_of_the_vocabulary() -> None:
    assert len(set(WORDS)) == len(WORDS) and all(verdicts.LEGEND[w] for w in WORDS)
    used = {verdicts.verdict(c) for c in _claims_of_every_kind()}
    assert used == set(WORDS), set(WORDS) ^ used        # every word reachable, none outside
    # a word says on its own whether we agree: the agreeing ones never name a disagreement
    for word in verdicts.AGREEING:
        assert word.startswith(("matches", "seen as", "holds"))
    assert verdicts.count_sentence(["matches", "differs", "matches"]) == "2 match and 1 differs"
    assert verdicts.count_sentence(["error in the notes"] * 3) == "3 are errors in the notes"


def test_the_json_record_carries_the_word_the_decision_gives(quick_reproduction: dict) -> None:
    for run in quick_reproduction["runs"]:
        for claim in (run.get("json") or {}).get("claims", []):
            assert claim["verdict"] == verdicts.verdict(claim), (run["script"], claim["ref"])


def _printed_words(stdout: str) -> set[str]:
    """The verdict words a run printed: the verdict column of its "vs the notes" / "our checks"
    tables, and the words its one-line summaries count ("… in the table above: 3 match and …")."""
    words, inside = set(), False
    for line in stdout.splitlines():
        if re.match(r"  (vs the notes|our checks) .* verdict$", line):
            inside = True
            continue
        if line.startswith("    ") or re.match(r" +(ours|notes|expected): ", line):
            continue                  # a wrapped statement, or a value too wide for its column
        found = [w for w in WORDS if line.rstrip(MARKS).endswith("  " + w)]
        inside = inside and bool(found)
        words |= {max(found, key=len)} if inside else set()
    phrases = {p: v.word for v in verdicts.VERDICTS for p in (v.one, v.many)}
    counted = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
    for sentence in re.findall(r"in the table above\): (.*?\.)(?: |$)", flat(stdout)):
        words |= {phrases[p] for p in re.findall(rf"\d+ ({counted})(?=[,;.:]| and)", sentence)}
    return words


def _legends(stdout: str) -> str:
    """The legend lines a run printed ("  verdicts: …" and the lines that continue it), as one text."""
    kept, inside = [], False
    for line in stdout.splitlines():
        inside = line.startswith("  verdicts:") or inside and line.startswith("    ")
        kept += [line] if inside else []
    return flat(" ".join(kept))


def test_the_terminal_prints_the_words_and_explains_each_as_defined(quick_reproduction: dict) -> None:
    printed_anywhere = set()
    for run in quick_reproduction["runs"]:
        text = run["stdout"]
        assert not [w for w in RETIRED if w in text], run["script"]
        words = _printed_words(text)
        printed_anywhere |= words
        said = {verdicts.verdict(c) for c in (run.get("json") or {}).get("claims", [])}
        assert words == said - {"not recorded"}, (run["script"], words ^ said)
        legend = _legends(text)
        for word in set(words):
            assert f"{word} = {flat(verdicts.LEGEND[word])}" in legend, (run["script"], word)
    assert {"matches", "matches, assuming", "error in the notes"} <= printed_anywhere


def test_reproduce_and_report_md_use_the_words(quick_reproduction: dict) -> None:
    claims = quick_reproduction["claims"]
    used = {c["verdict"] for c in claims}
    summary = flat(quick_reproduction["stdout"])
    assert f"; {verdicts.claims_sentence([c['verdict'] for c in claims])}." in summary
    assert verdicts.count_sentence([c["verdict"] for c in claims], verdicts.FINDINGS_ORDER) in summary
    report = flat((quick_reproduction["report_dir"] / "report.md").read_text(encoding="utf-8"))
    for word in used:
        assert f"**{word}**: {flat(verdicts.LEGEND[word])}" in report, word
    assert not [w for w in RETIRED if w in report]
    markdown = (quick_reproduction["report_dir"] / "report.md").read_text(encoding="utf-8")
    head = "| claim | ours | notes | verdict | how decided, and why |\n| --- | --- | --- | --- | --- |\n"
    blocks = markdown.split(head)
    rows = [line for block in blocks[1:] for line in block.split("\n\n")[0].splitlines()]
    cells = [re.split(r"(?<!\\)\|", row)[4].strip() for row in rows]
    assert len(cells) == len(claims) and set(cells) == used


def test_help_lists_every_word_with_its_meaning() -> None:
    text = flat(run_script("lecture15/03_overlap.py", "--help").stdout)
    for word in WORDS:
        assert f"{word} = {flat(verdicts.LEGEND[word])}" in text, word


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md", "docs/reproduction.md",
                                  "docs/errata.md", "code/report/templates/index.html.j2",
                                  "code/report/templates/report.md.j2"])
def test_the_readme_and_docs_use_only_the_words(page: str) -> None:
    text = flat((ROOT / page).read_text(encoding="utf-8"))
    assert not [w for w in RETIRED if w in text], page
    if page == "README.md":      # start here: every word, as the terminal prints it
        start = text[text.index("## Start here"):text.index("## The scripts")]
        named = set(re.findall(r"(?<!\*)\*([^*]+)\*(?!\*)", start))
        assert {w for w in WORDS if w not in ("holds", "fails")} <= named, set(WORDS) - named
        assert {"hold", "fail"} <= named or {"holds", "fails"} <= named


def test_marks_in_tables_come_from_the_one_vocabulary() -> None:
    """A script's own table marks its cells through Report.marked (verdicts.cell_mark, MARKS_LEGEND):
    no script keeps marks or a marks legend of its own, and each mark is a verdict word's."""
    for path in sorted((ROOT / "code").glob("*/*.py")):
        if path.parent.name == "common":
            continue          # verdicts defines the marks; checker and output print ≠ between two values
        source = path.read_text()
        assert not re.search(r"[\"'](✓|✗|≠)", source), f"{path.name} writes a mark itself"
    legend = verdicts.MARKS_LEGEND
    for word, mark in verdicts._CELL_MARKS.items():   # every word a mark stands for, named beside it
        assert word in legend.split(mark, 1)[1].split(";")[0], (word, mark)
    for word in ("matches", "not compared"):
        assert word in legend
    agree = Claim("P", "w", 1, 1, "", checker.EXACT, "agrees", "")
    assert verdicts.cell_mark(agree) == "✓"

