"""The reproduction's pages, opened in a real browser (headless Chromium): report/index.html shows
every script, part, figure and claim of the run that wrote it, with the counts --json gives; its
filters work; it fetches nothing; report.md holds the same claims; docs/errata.md is the run's list
of the notes' errors."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import ROOT, assert_usage_error, offline_page

from common import verdicts
from reproduction import errata
from reproduction.suite import scripts


@pytest.fixture
def open_page(browser, tmp_path_factory):
    """conftest's open_page, for a page too tall for one picture: index.html is some 100,000 px, and a
    full-page screenshot of it times out on a busy machine. The screenshot here is its first screen
    (tests/report/test_pages_screens.py keeps screens of several places at three widths)."""
    from pathlib import Path

    pages = []

    def opener(path: Path):
        page, errors = offline_page(browser, path)
        pages.append((page, path))
        return page, errors

    yield opener
    shots = tmp_path_factory.mktemp("screenshots")
    for page, path in pages:
        page.screenshot(path=str(shots / f"{Path(path).stem}.png"))
        print(f"screenshot: {shots / Path(path).stem}.png")
        page.context.close()


def test_the_index_page_renders_everything_the_run_wrote(quick_reproduction: dict, open_page) -> None:
    pages = quick_reproduction["report_dir"]
    page, errors = open_page(pages / "index.html")
    assert errors == []
    # Every script has its section, headed by the notes' section it reproduces, the script named under it.
    for run in quick_reproduction["runs"]:
        anchor = run["script"].replace("/", "-").replace(".", "-")   # report.pages.anchor
        assert page.locator(f"section#{anchor} p.doc code").inner_text() == run["script"]
        heading = page.locator(f"section#{anchor} h2").inner_text()
        assert re.match(r"(L14 §|L15 §|Handbook · |CS336 · )", heading), heading
    # Every figure the scripts wrote is on the page, embedded, and decodes to a real image.
    written = sorted(p.name for p in (pages / "figures").glob("*.png"))
    for script in scripts():  # every script that draws has its figures in the report
        if script.draws:
            prefix = f"{script.path.parent.name}_{script.path.stem.split('_')[0]}_"
            assert any(name.startswith(prefix) for name in written), f"{script.name}: no figure in the report"
    shown = page.eval_on_selector_all("figure img", "imgs => imgs.map(i => [i.dataset.name, i.complete && "
                                                    "i.naturalWidth])")
    assert sorted(name for name, _ in shown) == written
    assert all(width > 100 for _, width in shown)
    assert all(src.startswith("data:image/png;base64,")
               for src in page.eval_on_selector_all("img", "imgs => imgs.map(i => i.getAttribute('src'))"))
    # The counts at the top are the run's, verdict by verdict, and so are the claim rows.
    claims = quick_reproduction["claims"]
    expected = Counter(c["verdict"] for c in claims)
    # (each word once: the counts' lines, then "Measured here" and "Not compared" under the lists)
    found = [(el.get_attribute("data-verdict"), int(el.inner_text().split()[0]))
             for el in page.locator("#summary .count[data-verdict]").all()]
    shown_counts = dict(found)
    assert len(shown_counts) == len(found)
    assert shown_counts.pop("erratum") == sum(1 for c in claims if c["erratum"])
    assert shown_counts == dict(expected)
    rows = page.locator("tr.claim")
    assert rows.count() == len(claims)
    assert Counter(rows.nth(i).get_attribute("data-verdict") for i in range(rows.count())) == expected


def test_the_filters_show_one_kind_of_claim(quick_reproduction: dict, open_page) -> None:
    page, errors = open_page(quick_reproduction["report_dir"] / "index.html")
    claims = quick_reproduction["claims"]
    for key, count in (("differs", sum(c["verdict"] == "differs" for c in claims)),
                       ("erratum", sum(bool(c["erratum"]) for c in claims)),
                       ("not compared: other machine", sum(c["status"] == "other machine" for c in claims)),
                       ("all", len(claims))):
        button = f"#filters button[data-filter='{key}']"
        if count == 0:      # a timing may land every row on one side: no button for an empty filter
            assert page.query_selector(button) is None, key
            continue
        page.click(button)
        visible = page.eval_on_selector_all("tr.claim", "rows => rows.filter(r => r.offsetParent !== "
                                                        "null).length")
        assert visible == count, key
    assert errors == []


def test_the_reasons_are_whole_and_the_timeline_is_linked(quick_reproduction: dict, open_page) -> None:
    pages = quick_reproduction["report_dir"]
    page, _ = open_page(pages / "index.html")
    text = " ".join(page.inner_text("body").split())
    for claim in quick_reproduction["claims"]:
        if claim["why"] and claim["status"] == "differs":
            # never cut (a row id in a reason is printed as the row's label: verdicts.readable)
            assert " ".join(verdicts.readable(claim["why"]).split()) in text
    link = page.get_attribute("#timeline-link", "href")
    assert (pages / link).is_file()


def test_the_markdown_report_holds_every_claim(quick_reproduction: dict) -> None:
    text = (quick_reproduction["report_dir"] / "report.md").read_text(encoding="utf-8")
    for run in quick_reproduction["runs"]:          # each script under its topic's heading
        assert f"· `{run['script']}` (`python code/{run['script']}" in text
    words = {c["verdict"] for c in quick_reproduction["claims"]}
    rows = [line for line in text.splitlines() if line.startswith("| ") and len(line.split(" | ")) >= 5
            and line.split(" | ")[3] in words]       # a claim's row: its verdict in the fourth column
    assert len(rows) == len(quick_reproduction["claims"])
    assert text.index("## Findings") < text.index("# Lecture 14")
    for name in re.findall(r"\]\(figures/([^)]+)\)", text):
        assert (quick_reproduction["report_dir"] / "figures" / name).is_file()


def test_docs_errata_lists_every_error_in_the_notes(quick_reproduction: dict) -> None:
    """docs/errata.md is what the reproduction's claims say, entry by entry (generated, kept in step)."""
    page = (ROOT / "docs" / "errata.md").read_text(encoding="utf-8")
    claims = quick_reproduction["claims"]
    expected = errata.markdown(errata.group(claims), errata.readings(claims))
    assert page == expected, ("docs/errata.md is out of step with the claims; regenerate it with\n"
                              "python code/reproduce.py --quick --errata > docs/errata.md")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/errata.md" in readme and errata.count_sentence(errata.group(claims)) in readme


def test_a_report_folder_that_cannot_be_written_is_a_usage_error(tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert_usage_error("reproduce.py", "--report", str(blocker), "--only", "01_scale")
    assert_usage_error("reproduce.py", "--report", str(blocker / "inside"), "--only", "01_scale")
