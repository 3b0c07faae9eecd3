"""The report read in five minutes (issue 32), in headless Chromium at 390, 768 and 1366 px: at most
60 phone screens with the agreeing rows folded and every row one tap away; the findings' counts
each show exactly their rows; the search finds a topic's part first; the parts are the notes'
sections with their titles; tap targets of 24 px and text of 12 px at least; figures open full
size; wide tables say they scroll and keep their caption and first column; the page is light.

Uses the module-scoped `reproduction` of tests/report/test_pages_screens.py (PAGES_REPRODUCTION and
PAGES_REPORT_DIR reuse a finished run: the tests here never run the scripts again on their own)."""

from __future__ import annotations

import base64
import re
from collections import Counter

import pytest
from conftest import offline_page
from test_pages_screens import reproduction  # noqa: F401 - the fixture, shared

from common.verdicts import AGREEING

WIDTHS = (390, 768, 1366)
SCREEN = 844
MAX_PHONE_SCREENS = 60


@pytest.fixture(scope="module")
def pages(browser, reproduction: dict):  # noqa: F811 - the fixture imported above
    """pages(width) -> (page, errors): index.html at that width, opened once for the module."""
    opened: dict[int, tuple] = {}

    def get(width: int):
        if width not in opened:
            opened[width] = offline_page(browser, reproduction["report_dir"] / "index.html", width, SCREEN)
        return opened[width]

    yield get
    for page, _ in opened.values():
        page.context.close()


def visible_rows(page) -> list[str]:
    return page.eval_on_selector_all("tr.claim", "rs => rs.filter(r => r.offsetParent !== null)"
                                                 ".map(r => r.dataset.verdict)")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_is_short_and_every_row_one_tap_away(pages, reproduction: dict, width: int) -> None:  # noqa: F811
    page, errors = pages(width)
    page.evaluate("window.scrollTo(0, 0)")
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"{width} px: {height} px, {height / SCREEN:.1f} screens of {SCREEN} px")
    if width == 390:
        assert height <= MAX_PHONE_SCREENS * SCREEN, f"{height / SCREEN:.1f} screens"
    claims = reproduction["claims"]
    # As it opens: every row that does not agree is shown, every agreeing one folded.
    shown = visible_rows(page)
    assert Counter(shown) == Counter(c["verdict"] for c in claims if c["verdict"] not in AGREEING)
    # Each part's fold says how many rows it holds, and one tap shows exactly those.
    folds = page.eval_on_selector_all('button.fold[data-kind="agree"]', "bs => bs.map(b => [b.getAttribute("
                                      "'aria-controls'), b.textContent])")
    assert sum(int(re.match(r"(\d+) statements? ", label).group(1)) for _, label in folds) == \
        sum(c["verdict"] in AGREEING for c in claims)
    for panel, label in folds[:3] + folds[-2:]:
        button = page.locator(f'button.fold[aria-controls="{panel}"]')
        button.click()
        assert button.get_attribute("aria-expanded") == "true"
        n = page.eval_on_selector(f"#{panel}", "p => [...p.querySelectorAll('tr.claim')].filter(r => "
                                                 "r.offsetParent !== null).length")
        assert n == int(label.split()[0])
        button.click()
    # Whatever is folded or cut has its button: each panel its fold, each long text its "read on".
    orphans = page.evaluate("""() => [...document.querySelectorAll('.panel')].filter(p =>
        !document.querySelector(`button.fold[aria-controls="${p.id}"]`)).length""")
    assert orphans == 0
    if width <= 900:
        cut = page.evaluate("""() => [...document.querySelectorAll('.clamp.long:not(.open)')].filter(c =>
            c.offsetParent && !(c.querySelector('button.more') || {}).offsetParent).length""")
        assert cut == 0
    # A link to a folded row (a reading's, a search result's) opens its fold and lands on it.
    agreeing = next(c for c in claims if c["verdict"] in AGREEING)
    row_id = page.eval_on_selector_all("tr.claim", "rs => rs.filter(r => r.offsetParent === null)"
                                                   ".map(r => r.id)")[0]
    page.evaluate(f"location.hash = '#{row_id}'")
    page.wait_for_function(f"document.getElementById('{row_id}').offsetParent !== null")
    assert agreeing and page.locator(f"[id='{row_id}']").is_visible()
    page.evaluate("location.hash = ''")
    assert errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_every_count_of_the_findings_shows_exactly_its_rows(pages, reproduction: dict, width: int) -> None:  # noqa: F811
    page, errors = pages(width)
    claims = reproduction["claims"]
    expected = Counter(c["verdict"] for c in claims)
    expected["erratum"] = sum(bool(c["erratum"]) for c in claims)
    expected["all"] = len(claims)
    expected["agree"] = sum(c["verdict"] in AGREEING for c in claims)
    counts = page.eval_on_selector_all("#summary a.count",
                                       "as => as.map(a => [a.dataset.filter, a.textContent])")
    assert {key for key, _ in counts} == set(expected)     # every count is a link, every verdict counted
    numbers = page.eval_on_selector("#counts", """p => [p.textContent.match(/\\d+/g).length,
        [...p.querySelectorAll('a.count')].map(a => a.textContent.match(/\\d+/g).length)
            .reduce((x, y) => x + y)]""")
    assert numbers[0] == numbers[1]               # no number in the counts' sentence that is not a link
    for key, label in counts:
        assert int(label.split()[0]) == expected[key], (key, label)
        page.locator(f'#summary a.count[data-filter="{key}"]').first.click()
        rows = visible_rows(page)
        assert len(rows) == expected[key], key
        if key == "agree":
            assert set(rows) <= set(AGREEING)
        elif key not in ("erratum", "all"):
            assert set(rows) == {key}
        first = page.eval_on_selector_all("tr.claim", "rs => rs.filter(r => r.offsetParent !== null)"
                                                      ".map(r => r.getBoundingClientRect().top)")[0]
        assert -1 <= first <= SCREEN, f"{key}: its first row is not on the screen"
    page.click("#filter-reset") if page.locator("#filter-reset").is_visible() else None
    folded = Counter(c["verdict"] for c in claims if c["verdict"] not in AGREEING)
    assert Counter(visible_rows(page)) == folded
    assert errors == []


@pytest.mark.parametrize("query, script, part", [("bubble", "cs336-06_pipeline-py", "Part-3"),
                                                 ("ResNet-50 buckets", "lecture15-02_buckets-py", "Part-2"),
                                                 ("ZeRO-3", "cs336-04_memory-py", "Part-2")])
@pytest.mark.parametrize("width", (390, 1366))
def test_search_finds_the_topic_first(pages, query: str, script: str, part: str, width: int) -> None:
    page, errors = pages(width)
    page.fill("#search", query)
    results = page.eval_on_selector_all("#search-results a", "as => as.map(a => a.getAttribute('href'))")
    assert results and results[0] == f"#{script}--{part}", results[:3]
    box = page.locator("#search-panel").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width
    page.locator("#search-results a").first.click()
    page.wait_for_function(f"Math.abs(document.getElementById('{script}--{part}').getBoundingClientRect().top)"
                           " < 120")
    assert page.locator("#search-panel").is_hidden()
    assert part.replace("Part-", "") in page.locator("#here").text_content() or width >= 1100
    page.fill("#search", "")
    assert errors == []


def test_the_parts_are_the_notes_sections_with_their_titles(pages, reproduction: dict) -> None:  # noqa: F811
    page, _ = pages(1366)
    labels = page.eval_on_selector_all("section.script", "ss => ss.map(s => s.dataset.label)")
    assert len(labels) == len(reproduction["runs"])
    assert "L15 §2 · buckets" in labels
    groups = [label.split(" ")[0] for label in labels]
    assert groups == sorted(groups, key=["L14", "L15", "Handbook", "CS336"].index)     # the notes' order
    l14 = [float(re.search(r"§([\d.]+)", label).group(1)) for label in labels if label.startswith("L14")]
    assert l14 == sorted(l14)
    # Every part in the contents says its title; no entry is a bare "Part 3".
    entries = page.eval_on_selector_all("#toc li[data-part] > a", "as => as.map(a => a.textContent)")
    assert len(entries) > 100 and all(re.match(r"\d+ · \S", e) for e in entries)
    # The contents mark where the reader is.
    page.evaluate("document.getElementById('lecture15-02_buckets-py--Part-2').scrollIntoView()")
    page.wait_for_function("document.querySelector('#toc a[aria-current]') !== null && "
                           "document.querySelector('#toc a[aria-current]').getAttribute('href') === "
                           "'#lecture15-02_buckets-py--Part-2'")
    assert page.locator("#here").text_content().startswith("L15 §2 · buckets")
    # A row says each fact once: no "161 = 161", no value twice where ours is the notes'.
    rows = page.eval_on_selector_all("tr.claim td.val", "ts => ts.map(t => t.textContent)")
    assert not [r for r in rows if re.search(r"(\S+) (=|is) \1\b", r)]
    same = [c for c in reproduction["claims"] if c["ours"] == c["notes"] and c["ours"] is not None]
    assert same and page.locator("tr.claim td.val .v").count() < 2 * len(reproduction["claims"])


TARGETS = """() => [...document.querySelectorAll('a, button, summary, input')].filter(e => {
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && !e.closest('[hidden], .sr, caption');
  }).map(e => [e.outerHTML.slice(0, 80), e.getBoundingClientRect().height])"""
SMALL_TEXT = """() => { const small = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (!walker.currentNode.textContent.trim() || !el.getClientRects().length) continue;
    if (el.closest('.sr, caption')) continue;
    const size = parseFloat(getComputedStyle(el).fontSize);
    if (size < 12) small.push([el.tagName, el.className, size]);
  }
  return small; }"""


@pytest.mark.parametrize("width", WIDTHS)
def test_tap_targets_and_text_are_big_enough(pages, width: int) -> None:
    page, _ = pages(width)
    if width < 1100:
        page.click("#toc-button")                  # the drawer's links too
    small = [(html, h) for html, h in page.evaluate(TARGETS) if h < 24 - 0.5]
    assert small == [], small[:5]
    assert page.evaluate(SMALL_TEXT) == []
    if width < 1100:
        page.click("#toc-button")


@pytest.mark.parametrize("width", WIDTHS)
def test_figures_open_full_size_and_wide_tables_say_they_scroll(pages, width: int) -> None:
    page, errors = pages(width)
    figure = page.locator("button.zoom").first
    figure.scroll_into_view_if_needed()
    figure.click()
    assert page.locator("#viewer").is_visible()
    natural, shown = page.eval_on_selector("#viewer-img",
                                           "i => [i.naturalWidth, i.getBoundingClientRect().width]")
    assert shown == pytest.approx(natural, abs=1)                  # full size, scrolling in its box
    page.keyboard.press("Escape")
    assert page.locator("#viewer").is_hidden()
    # Open every table; each that is wider than its box says so, and scrolled keeps caption and first column.
    page.evaluate("""document.querySelectorAll('button.fold[data-kind="data"][aria-expanded="false"]')
                     .forEach(b => b.click())""")
    state = page.evaluate("""() => [...document.querySelectorAll('.scroller')].map(s => {
        const box = s.querySelector('.box');
        return [box.scrollWidth > box.clientWidth + 1, s.classList.contains('scrolls'),
                s.classList.contains('more-right')]; })""")
    assert all(wide == scrolls == right for wide, scrolls, right in state)
    wide = [i for i, (w, _, _) in enumerate(state) if w]
    if width == 390:
        assert wide, "no table is wider than a phone"
    for i in wide[:5]:
        moved = page.evaluate(f"""() => {{
            const s = document.querySelectorAll('.scroller')[{i}], box = s.querySelector('.box');
            const left = box.getBoundingClientRect().left;
            box.scrollLeft = box.scrollWidth; box.dispatchEvent(new Event('scroll'));
            const cap = s.querySelector('p.cap > span').getBoundingClientRect();
            const first = box.querySelector('tbody tr > :first-child').getBoundingClientRect();
            return [cap.left - left, first.left - left, s.classList.contains('more-left'),
                    getComputedStyle(s.querySelector('p.cap .more')).display]; }}""")
        assert abs(moved[0]) < 2 and abs(moved[1]) < 2 and moved[2] and moved[3] != "none", moved
    assert errors == []


def test_the_page_is_light(reproduction: dict) -> None:  # noqa: F811
    """Figures embedded as palette PNGs (smaller than matplotlib's), no terminal output repeating the
    tables, and the page under 1.6 MB (2.24 MB before)."""
    html = (reproduction["report_dir"] / "index.html").read_text(encoding="utf-8")
    folder = reproduction["report_dir"] / "figures"
    embedded = dict(re.findall(r'data-name="([^"]+)" src="data:image/png;base64,([^"]+)"', html))
    assert embedded
    for name, data in embedded.items():
        assert len(base64.b64decode(data)) < (folder / name).stat().st_size, name
    assert "The script's terminal output" not in html or 'class="failed"' in html
    assert len(html.encode("utf-8")) < 1_600_000
