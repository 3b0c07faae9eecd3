"""The report's first screens and its edges, after an attack on issue 32's pages (headless Chromium):
the findings on at most two phone screens (1.5 on a laptop) with every argument and reason one tap
away; a wide table scrolled sideways shows its cut at the first column, a drawing scrolls with a
sign, a full-size figure says it is cut and can fit; the search reads "zero3" as "ZeRO-3" and "25"
as a whole number, puts phrases first, finds the errata and says when its list is cut; the bar's
filter is a button that clears it; only a quote that is cut is a button; the tables are folded at
every width.

Uses the module-scoped `reproduction` of tests/report/test_pages_screens.py (PAGES_REPRODUCTION and
PAGES_REPORT_DIR reuse a finished run: the tests here never run the scripts again on their own)."""

from __future__ import annotations

import pytest
from conftest import offline_page
from test_pages_screens import reproduction  # noqa: F401 - the fixture, shared

from common.verdicts import AGREEING

PHONE, LAPTOP = (390, 844), (1366, 768)


@pytest.fixture(scope="module")
def pages(browser, reproduction: dict):  # noqa: F811 - the fixture imported above
    """pages((width, height)) -> (page, errors): index.html at that size, opened once for the module."""
    opened: dict[tuple[int, int], tuple] = {}

    def get(size: tuple[int, int]):
        if size not in opened:
            opened[size] = offline_page(browser, reproduction["report_dir"] / "index.html", size[0], size[1])
        return opened[size]

    yield get
    for page, _ in opened.values():
        page.context.close()


def squash(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("size, most", [(PHONE, 2.0), ((768, 1024), 1.5), (LAPTOP, 1.5)])
def test_the_findings_fit_two_screens_and_lose_nothing(pages, reproduction: dict, size, most: float) -> None:  # noqa: F811
    page, errors = pages(size)
    page.evaluate("window.scrollTo(0, 0)")
    height = page.eval_on_selector("#summary", "s => s.getBoundingClientRect().height")
    print(f"{size}: the findings are {height / size[1]:.2f} screens")
    assert height <= most * size[1], f"{height / size[1]:.2f} screens"
    # An erratum is a line (its place linked, its title, its kind); its rows and argument one tap away.
    items = page.eval_on_selector_all("#errata-table > li", """ls => ls.map(l => [
        l.querySelector('a.place') !== null, l.querySelector('details > summary').textContent,
        l.querySelector('details').textContent])""")
    errata = reproduction["errata"]
    assert len(items) == len(errata) > 0
    for (placed, summary, details), erratum in zip(items, errata):
        assert placed and squash(erratum["title"]) in squash(summary) and erratum["word"] in summary
        assert squash(erratum["argument"])[:60] in squash(details)       # (its row ids read as labels)
    # A difference is a line (what, ours, the notes'); its reason one tap away.
    differs = [c for c in reproduction["claims"] if c["status"] == "differs" and not c["erratum"]]
    lines = page.eval_on_selector_all("#differs-table > li", "ls => ls.map(l => l.textContent)")
    assert len(lines) == len(differs)
    for line, claim in zip(lines, differs):
        assert squash(claim["what"]) in squash(line)
        if claim["why"]:
            assert squash(claim["why"]).split(" '")[0][:40] in squash(line)
    # one tap opens a line; what it holds is then on the screen
    summary = page.locator("#errata-table > li details > summary").first
    summary.click()
    assert page.locator("#errata-table > li details").first.get_attribute("open") is not None
    assert page.locator("#errata-table > li details p.why").first.is_visible()
    summary.click()
    assert errors == []


def test_a_scrolled_table_shows_where_it_is_cut(pages) -> None:
    page, errors = pages(PHONE)
    page.evaluate("""document.querySelectorAll('button.fold[data-kind="data"][aria-expanded="false"]')
                     .forEach(b => b.click())""")
    wide = """[...document.querySelectorAll('.scroller')].filter(s =>
        s.querySelector('table.data') && s.classList.contains('scrolls')).slice(0, 8)"""
    page.evaluate(f"""() => {wide}.forEach(s => {{ const box = s.querySelector('.box');
        box.scrollLeft = 40; box.dispatchEvent(new Event('scroll')); }})""")
    page.wait_for_timeout(400)                                  # the shadow fades in
    cuts = page.evaluate(f"""() => {wide}.map(s => {{
        const first = s.querySelector('tbody tr > :first-child').getBoundingClientRect();
        const shadow = getComputedStyle(s, '::before');
        return [s.classList.contains('more-left'), parseFloat(shadow.left), first.width,
                shadow.opacity]; }})""")
    assert cuts
    for more_left, left, first, opacity in cuts:
        assert more_left and abs(left - first) < 1.5 and opacity == "1", (left, first)
    # A drawing wider than its box scrolls in it, with the sign that says so.
    drawings = page.evaluate("""() => [...document.querySelectorAll('pre.drawing')].map(d => {
        const s = d.closest('.scroller'), sign = s && s.querySelector('p.cap .more');
        return [d.scrollWidth > d.clientWidth + 1, !!s && s.classList.contains('scrolls'),
                !!sign && getComputedStyle(sign).display !== 'none' && sign.offsetParent !== null]; })""")
    assert drawings and any(wide for wide, _, _ in drawings)
    assert all(wide == scrolls == sign for wide, scrolls, sign in drawings), drawings
    page.evaluate("""document.querySelectorAll('button.fold[data-kind="data"][aria-expanded="true"]')
                     .forEach(b => b.click())""")
    assert errors == []


def test_a_full_size_figure_says_it_is_cut_and_fits_on_a_tap(pages) -> None:
    page, errors = pages(PHONE)
    figure = page.locator("button.zoom").nth(2)
    figure.scroll_into_view_if_needed()
    figure.click()
    natural = page.eval_on_selector("#viewer-img", "i => i.naturalWidth")
    assert natural > PHONE[0]
    state = page.eval_on_selector(".viewer-scroller", """s => [s.classList.contains('scrolls'),
        s.classList.contains('more-right'), getComputedStyle(s.querySelector('p.cap .more')).display]""")
    assert state[0] and state[1] and state[2] != "none"
    page.click("#viewer-fit")
    width = page.eval_on_selector("#viewer-img", "i => i.getBoundingClientRect().width")
    assert width <= PHONE[0] and page.get_attribute("#viewer-fit", "aria-pressed") == "true"
    assert not page.eval_on_selector(".viewer-scroller", "s => s.classList.contains('scrolls')")
    page.keyboard.press("Escape")
    assert page.locator("#viewer").is_hidden()
    assert errors == []


@pytest.mark.parametrize("query, first", [("25 MiB", "#lecture15-02_buckets-py--"),
                                          ("25 MB", "#lecture15-02_buckets-py--"),
                                          ("zero3", "#cs336-04_memory-py--Part-2"),
                                          ("zero 3", "#cs336-04_memory-py--Part-2"),
                                          ("resnet50 buckets", "#lecture15-02_buckets-py--Part-2")])
def test_search_reads_numbers_whole_and_spelling_loosely(pages, query: str, first: str) -> None:
    page, errors = pages(PHONE)
    page.fill("#search", query)
    results = page.eval_on_selector_all("#search-results a", "as => as.map(a => a.getAttribute('href'))")
    assert results and results[0].startswith(first), results[:3]
    page.fill("#search", "")
    assert errors == []


def test_search_rules_and_its_cut_list(pages, reproduction: dict) -> None:  # noqa: F811
    page, errors = pages(PHONE)
    assert page.evaluate("tokens('ZeRO-3')") == page.evaluate("tokens('zero3')") == ["zero", "3"]
    assert page.evaluate("tokens('ResNet-50')") == page.evaluate("tokens('resnet50')") == ["resnet", "50"]
    assert page.evaluate("tokens('1.25 MB, 2,163,000')") == ["1.25", "mb", "2,163,000"]
    assert not page.evaluate("same('25', '256')") and not page.evaluate("same('25', '1.25')")
    assert page.evaluate("same('25', '25')") and page.evaluate("same('bucket', 'buckets')")
    assert page.evaluate("same('allreduce', 'all', 'reduce')")
    # The findings are searched: "errata" lists the errata, and a result opens its erratum.
    page.fill("#search", "errata")
    results = page.eval_on_selector_all("#search-results a", "as => as.map(a => a.getAttribute('href'))")
    assert len(results) == len(reproduction["errata"]) and all(r.startswith("#erratum-") for r in results)
    page.locator("#search-results a").first.click()
    assert page.locator(f"{results[0]} details").get_attribute("open") is not None
    # A cut list says so, and shows the rest on a tap.
    page.fill("#search", "all reduce")
    said = page.text_content("#search-count")
    total = int(said.split(" of ")[1].split()[0])
    assert said.startswith("first 20 of") and page.locator("#search-results a").count() == 20 < total
    page.click("#search-more")
    assert page.locator("#search-results a").count() == total
    assert page.text_content("#search-count") == f"{total} found"
    page.fill("#search", "")
    assert errors == []


def test_the_bars_filter_is_a_button_that_clears_it(pages, reproduction: dict) -> None:  # noqa: F811
    page, errors = pages(PHONE)
    page.evaluate("window.scrollTo(0, 0)")
    words = [c["verdict"] for c in reproduction["claims"]]
    word = min(set(words), key=lambda w: (words.count(w), w))         # the rarest: "1 row" where there is one
    n = words.count(word)
    page.locator(f'#summary a.count[data-filter="{word}"]').first.click()
    bar = page.locator("#bar-filter")
    assert bar.is_visible() and bar.evaluate("b => b.tagName") == "BUTTON"
    what = bar.locator(".what")
    assert what.evaluate("w => w.scrollWidth <= w.clientWidth + 1"), what.text_content()   # not cut
    assert f"({n} row{'s' if n != 1 else ''})" in what.text_content()
    box = bar.bounding_box()
    assert box["height"] >= 24 and box["x"] + box["width"] <= PHONE[0]
    # the sticky bar grew a line: what lands under it is not hidden by it
    bar_bottom = page.eval_on_selector("#bar", "b => b.getBoundingClientRect().bottom")
    first = page.eval_on_selector_all("tr.claim", "rs => rs.filter(r => r.offsetParent)"
                                                  ".map(r => r.getBoundingClientRect().top)")[0]
    assert first >= bar_bottom - 1
    bar.click()
    assert bar.is_hidden()
    shown = page.eval_on_selector_all("tr.claim", "rs => rs.filter(r => r.offsetParent).length")
    assert shown == sum(1 for c in reproduction["claims"] if c["verdict"] not in AGREEING)
    # Where you are: a long topic is shortened, its part's number kept on the button.
    page.evaluate("document.getElementById('lecture15-03_overlap-py--Part-3').scrollIntoView()")
    page.wait_for_function("document.getElementById('here').textContent.startsWith('L15 §3') && "
                           "document.querySelector('#here .h-part').textContent.trim().endsWith('3')")
    part, button = page.evaluate("""() => [document.querySelector('#here .h-part').getBoundingClientRect(),
                                           document.getElementById('toc-button').getBoundingClientRect()]""")
    assert part["width"] > 0 and part["right"] <= button["right"]
    assert page.text_content("#here .h-part").strip().endswith("3")
    assert errors == []


@pytest.mark.parametrize("size", [PHONE, (768, 1024), LAPTOP])
def test_only_a_cut_quote_is_a_button(pages, size) -> None:
    page, errors = pages(size)
    quotes = page.eval_on_selector_all("q.said", """qs => qs.filter(q => q.offsetParent).map(q => [
        q.classList.contains('cut'), q.getAttribute('tabindex'), q.getAttribute('role'),
        q.getAttribute('aria-expanded'), q.getBoundingClientRect().height,
        q.scrollHeight > q.clientHeight + 1])""")
    assert quotes
    for cut, tabindex, role, expanded, height, overflows in quotes:
        if cut:
            assert tabindex == "0" and role == "button" and expanded in ("true", "false") and height >= 24
        else:
            assert tabindex is None and role is None and not overflows
    if size[0] >= 1100:
        assert not any(cut for cut, *_ in quotes)             # whole at this width: no Tab stop
    if size == PHONE:
        assert any(cut for cut, *_ in quotes)
        quote = page.locator("q.said.cut").first
        quote.focus()
        page.keyboard.press("Enter")
        assert quote.get_attribute("aria-expanded") == "true"
        assert quote.evaluate("q => q.scrollHeight <= q.clientHeight + 1")
        page.keyboard.press("Enter")
        assert quote.get_attribute("aria-expanded") == "false"
    assert errors == []


def test_the_tables_are_folded_at_every_width(pages) -> None:
    page, _ = pages(LAPTOP)
    opened = page.eval_on_selector_all('button.fold[data-kind="data"]', "bs => bs.filter(b => "
                                       "b.getAttribute('aria-expanded') !== 'false').length")
    assert opened == 0
    screens = page.evaluate("document.documentElement.scrollHeight") / LAPTOP[1]
    print(f"1366 x 768: {screens:.1f} screens")
    assert screens <= 60
