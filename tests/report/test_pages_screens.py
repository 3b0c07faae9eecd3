"""Both pages on a phone (390 px), a tablet (768 px) and a desktop (1366 px), in headless Chromium:
nothing scrolls the page sideways, every table is named and stays in its own box, the controls are
wide enough to aim at, the timeline keeps its setting in the URL, every filter shows exactly its
claims and hides what it leaves empty, every part's prose is there. One browser for the session
(conftest's `browser`) and one rendered report (`quick_reproduction`); each page opens once per width.

Screenshots of each page at each width go to $PAGE_SCREENSHOTS (default: a temporary folder), for
a person to look at: timeline-<width>.png (the whole page), index-<width>-<place>.png (a screen at
each of a few places: the index is too tall for one picture).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from common.verdicts import AGREEING, LEGEND

WIDTHS = (390, 768, 1366)
MIN_CONTROL_PX = 200            # a slider or list narrower than this is hard to aim at with a thumb


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("PAGE_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("page-screens")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def reproduction(request: pytest.FixtureRequest) -> dict:
    """conftest's `quick_reproduction`; or, to work on the pages without running every script again,
    a finished one: PAGES_REPRODUCTION=the --json of `reproduce.py --quick --json PATH --report DIR`
    with DIR named by PAGES_REPORT_DIR (the pages can be rewritten there from the same runs)."""
    done, folder = os.environ.get("PAGES_REPRODUCTION"), os.environ.get("PAGES_REPORT_DIR")
    if done and folder:
        return dict(json.loads(Path(done).read_text(encoding="utf-8")), report_dir=Path(folder))
    return request.getfixturevalue("quick_reproduction")


@pytest.fixture(scope="module")
def screens(browser, reproduction: dict, shots: Path):
    """screens(name, width) -> (page, errors): report/<name>.html at that width, opened once for the
    module (offline: a page that fetches anything fails through `errors`)."""
    opened: dict[tuple[str, int], tuple] = {}

    def get(name: str, width: int, fresh: bool = False, fragment: str = ""):
        if (name, width) in opened and not fresh:
            return opened[(name, width)]
        context = browser.new_context(offline=True, viewport={"width": width, "height": 860})
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        page.goto((reproduction["report_dir"] / f"{name}.html").resolve().as_uri() + fragment)
        page.wait_for_load_state("load")
        if not fresh:
            screenshots(page, shots / f"{name}-{width}")
            opened[(name, width)] = (page, errors)
        return page, errors

    yield get
    print(f"screenshots: {shots}")
    for page, _ in opened.values():
        page.context.close()


# The index is far taller than a screenshot can be: these places of it, a screen each.
PLACES = ("summary", "errata", "lecture14-02_primitives-py--Part-1", "lecture15-my_ddp_check-py--Part-2",
          "lecture15-exercises-py--Part-7")


def screenshots(page, stem: Path) -> None:
    if page.evaluate("document.documentElement.scrollHeight") < 12000:
        page.screenshot(path=f"{stem}.png", full_page=True)
        return
    for place in PLACES:
        page.evaluate(f"document.getElementById('{place}').scrollIntoView()")
        page.screenshot(path=f"{stem}-{place}.png")
    page.evaluate("window.scrollTo(0, 0)")


# ---- every width ----------------------------------------------------------------------------------
LAYOUT = """() => {
  const vw = document.documentElement.clientWidth;
  const out = {page: document.documentElement.scrollWidth - vw, spill: [], unnamed: 0, tables: 0};
  for (const t of document.querySelectorAll("table")) {
    out.tables++;
    const box = t.parentElement, style = getComputedStyle(box), r = box.getBoundingClientRect();
    const caption = t.querySelector("caption");
    if (!caption || !caption.textContent.trim()) out.unnamed++;
    const scrolls = style.overflowX === "auto" || style.overflowX === "scroll";
    if (!box.classList.contains("box") || !scrolls || r.right > vw + 0.5 || r.left < -0.5)
      out.spill.push(caption ? caption.textContent : t.outerHTML.slice(0, 80));
  }
  return out;
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_index_fits_every_width(screens, width: int) -> None:
    page, errors = screens("index", width)
    layout = page.evaluate(LAYOUT)
    assert layout["page"] <= 0, f"the page scrolls sideways by {layout['page']} px"
    assert layout["tables"] > 50 and layout["unnamed"] == 0 and layout["spill"] == []
    # On a phone a claims table is one card per claim: it needs no sideways scroll at all.
    if width <= 900:
        wide = page.eval_on_selector_all("table.claims", "ts => ts.filter(t => t.scrollWidth > "
                                         "t.parentElement.clientWidth + 1).length")
        assert wide == 0
    # No cell is squeezed to a word a line by an unbreakable neighbour: every claim's text column
    # keeps at least 9 em (the my_ddp_check Part 2 sentence once took 830 px of a desktop table).
    narrow = page.eval_on_selector_all("tr.claim td:first-child", """tds => tds.filter(td =>
        td.offsetParent &&
        td.getBoundingClientRect().width < 9 * parseFloat(getComputedStyle(td).fontSize)).length""")
    assert narrow == 0
    assert errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_contents_are_at_hand_at_every_width(screens, width: int) -> None:
    page, _ = screens("index", width)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")
    if width < 1100:                     # a bar at the top opens the contents over the text
        assert page.locator("#toc").is_hidden()
        bar = page.locator("#toc-button").bounding_box()
        assert bar["y"] >= 0 and bar["y"] + bar["height"] <= 60 and bar["x"] + bar["width"] <= width
        page.click("#toc-button")
    toc = page.locator("#toc")
    assert toc.is_visible()
    box = toc.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["y"] <= 60
    # a part's entry takes the reader there (and closes the drawer)
    link = page.locator("#toc li[data-part] a").nth(5)
    target = link.get_attribute("href")[1:]
    link.click()
    page.wait_for_function(f"Math.abs(document.getElementById('{target}').getBoundingClientRect().top) < 120")
    if width < 1100:
        assert page.locator("#toc").is_hidden()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_timeline_fits_every_width(screens, width: int) -> None:
    page, errors = screens("timeline", width)
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
    controls = page.eval_on_selector_all("#controls input, #controls select, #buttons button", """els =>
        els.map(e => { const r = e.getBoundingClientRect();
                       return [e.id || e.textContent, r.left, r.right, r.width, r.height]; })""")
    for name, left, right, w, h in controls:
        assert left >= 0 and right <= width, f"{name} runs off the screen"
        assert h >= 24, f"{name} is {h:.0f} px high"
        if name in ("model", "layers", "cap", "beta", "alpha", "k"):
            assert w >= MIN_CONTROL_PX, f"{name} is {w:.0f} px wide"
    # a label never prints over its value
    overlaps = page.eval_on_selector_all(".control .head", """heads => heads.filter(h => {
        const [a, b] = [h.children[0].getBoundingClientRect(), h.children[1].getBoundingClientRect()];
        return b.width > 0 && a.right > b.left && a.left < b.right && a.bottom > b.top && a.top < b.bottom;
    }).length""")
    assert overlaps == 0
    # the chart fills the width, its text legible (at least 10 px on the screen)
    chart = page.locator("#chart").bounding_box()
    body = page.evaluate("document.body.clientWidth")
    assert chart["width"] >= 0.85 * min(body, 1240) - 60
    smallest = page.eval_on_selector_all("#chart text, #curve text",
                                         "ts => Math.min(...ts.map(t => t.getBoundingClientRect().height))")
    assert smallest >= 10
    # a value card keeps its value on one line, inside the card
    cards = page.eval_on_selector_all(".card .value", """vs => vs.filter(v =>
        v.scrollWidth > v.clientWidth + 1 || v.getBoundingClientRect().height > 40).length""")
    assert cards == 0
    assert errors == []


# ---- complete content -------------------------------------------------------------------------------
def test_every_table_is_named_and_primitives_say_which(screens, reproduction: dict) -> None:
    page, _ = screens("index", 1366)
    captions = page.eval_on_selector_all("section#lecture14-02_primitives-py--Part-1 table.data caption",
                                         "cs => cs.map(c => c.textContent)")
    for name in ("broadcast", "reduce", "all reduce", "reduce scatter", "all gather"):
        spelt = rf"{name}|{name.replace(' ', '-')}|{name.replace(' ', '_')}"
        assert any(re.fullmatch(spelt, c) for c in captions), (name, captions)
    assert len(set(captions)) == len(captions)


def test_every_parts_prose_is_shown(screens, reproduction: dict) -> None:
    """The exercises' answers (their prose, through --json's "prose") are on the page and in report.md,
    and the figures' captions say what they show, not their file names."""
    page, _ = screens("index", 1366)
    section = "lecture15-exercises-py"
    markdown = " ".join((reproduction["report_dir"] / "report.md").read_text(encoding="utf-8").split())
    for part in (2, 6, 7, 9, 12):
        text = " ".join(page.inner_text(f"section#{section}--Part-{part}").split())
        notes = page.eval_on_selector_all(f"section#{section}--Part-{part} .note", "ns => ns.length")
        assert notes >= 1 and len(text) > 200, part
        first = " ".join(page.inner_text(f"section#{section}--Part-{part} .note p").split())
        assert first in markdown, part
    captions = page.eval_on_selector_all("figure", """fs => fs.map(f => [f.querySelector('img').dataset.name,
        f.querySelector('img').alt])""")
    assert captions and all(alt and alt != name and not alt.endswith(".png") for name, alt in captions)
    # (the terminal output, with its "figure written: figures/…" lines, is no longer repeated on the page)
    assert not re.search(r"/tmp[^\s]*/figures/", page.content())


def test_the_legend_explains_every_verdict_word(screens, reproduction: dict) -> None:
    page, _ = screens("index", 768)
    pairs = "ds => ds.map(d => [d.querySelector('dt').textContent, d.querySelector('dd').textContent.trim()])"
    legend = page.eval_on_selector_all("#legend > div", pairs)
    shown = {c["verdict"] for c in reproduction["claims"]}
    assert {word for word, _ in legend} == shown    # each word the page uses, and only those
    assert all(LEGEND[word] == meaning for word, meaning in legend)


# ---- moving through the report ---------------------------------------------------------------------
def test_errata_link_to_their_claims_and_differs_holds_the_rest(screens, reproduction: dict) -> None:
    page, _ = screens("index", 1366)
    # An erratum's line links its first row, its <details> every row: every row in error, and only those.
    links = page.eval_on_selector_all("#errata-table a", "as => as.map(a => a.getAttribute('href'))")
    errata = [c for c in reproduction["claims"] if c["erratum"]]
    rows = page.eval_on_selector_all("#errata-table details a", "as => as.map(a => a.getAttribute('href'))")
    assert len(rows) == len(errata) > 0 and len(set(rows)) == len(rows) and set(links) == set(rows)
    for href in links:
        row = page.locator(f"tr.claim[id='{href[1:]}']")
        assert row.count() == 1 and row.get_attribute("data-erratum") == "yes"
    differs = page.eval_on_selector("#differs-table", "t => t.children.length")
    assert differs == sum(c["status"] == "differs" and not c["erratum"] for c in reproduction["claims"])
    ids = page.eval_on_selector_all("section.part[id], tr.claim[id]", "es => es.map(e => e.id)")
    assert len(ids) == len(set(ids)) and page.locator("tr.claim:not([id])").count() == 0


def test_every_filter_shows_its_claims_and_hides_what_is_empty(screens, reproduction: dict) -> None:
    page, errors = screens("index", 768)
    claims = reproduction["claims"]
    expected = Counter(c["verdict"] for c in claims)
    expected.update(all=len(claims), erratum=sum(bool(c["erratum"]) for c in claims),
                    folded=sum(c["verdict"] not in AGREEING for c in claims))
    keys = page.eval_on_selector_all("#filters button", "bs => bs.map(b => b.dataset.filter)")
    assert set(keys) == set(expected)
    for key in keys + ["folded"]:
        page.evaluate(f"document.querySelector('#filters button[data-filter=\"{key}\"]').click()")
        state = page.evaluate("""() => {
          const seen = (e) => e.offsetParent !== null;
          return {rows: [...document.querySelectorAll("tr.claim")].filter(seen).length,
            emptyTables: [...document.querySelectorAll("table.claims")].filter(t => seen(t) &&
                t.querySelector("tr.claim") && !t.querySelector("tr.claim:not(.filtered)")).length,
            emptyParts: [...document.querySelectorAll("section.part")].filter(p => !p.closest(".filtered") &&
                !p.querySelector("tr.claim:not(.filtered)")).length,
            listed: [...document.querySelectorAll("#toc li[data-script]:not(.hidden)")]
                .map(li => li.dataset.script),
            emptyScripts: [...document.querySelectorAll("section.script")].filter(s =>
                !s.classList.contains("filtered") && !s.querySelector("tr.claim:not(.filtered)")).length};
        }""")
        assert state["rows"] == expected[key], key
        assert state["emptyTables"] == 0, key
        if key not in ("all", "folded"):
            assert state["emptyParts"] == 0 and state["emptyScripts"] == 0, key
        shown = page.eval_on_selector_all("section.script:not(.filtered)", "ss => ss.map(s => s.id)")
        assert state["listed"] == shown, key           # the list of scripts names only those left
    assert errors == []


# ---- the timeline as an explainer -------------------------------------------------------------------
def set_control(page, element_id: str, value: str) -> None:
    page.eval_on_selector(f"#{element_id}", """(e, v) => { e.value = v;
        e.dispatchEvent(new Event("input", {bubbles: true})); }""", value)


def test_the_timeline_keeps_its_setting_in_the_url(screens) -> None:
    page, errors = screens("timeline", 768)
    set_control(page, "model", "BERT-large")
    page.click("button.preset[data-cap='25+1']")
    set_control(page, "beta", "4")
    set_control(page, "k", "1")
    url, step = page.url, page.locator("#step-on").text_content()
    assert "#" in url and "cap=25%2B1" in url and "model=BERT-large" in url
    assert "PyTorch" in page.locator("#setting").text_content()
    again, _ = screens("timeline", 768, fresh=True, fragment="#" + url.split("#", 1)[1])
    for element_id in ("model", "cap", "beta", "alpha", "k", "layers"):
        assert again.input_value(f"#{element_id}") == page.input_value(f"#{element_id}"), element_id
    assert again.locator("#step-on").text_content() == step     # the link (a reload too) keeps the setting
    again.click("#reset")
    assert "ResNet-50" in again.locator("#setting").text_content() and "model=ResNet-50" in again.url
    assert again.locator("#step-on-notes").text_content().startswith("the notes:")   # beside the defaults
    assert again.locator("#beta").get_attribute("aria-valuetext") == "10 gigabytes per second"
    assert "megabytes" in again.locator("#cap").get_attribute("aria-valuetext")
    command = again.locator("#command").text_content()
    assert "--bucket-cap-mb 25MB" in command and "--world-size 16" in command
    assert errors == []
    again.context.close()


def test_a_bucket_tells_its_parameters_and_its_all_reduce(screens) -> None:
    page, _ = screens("timeline", 390)
    bucket = page.locator('#chart g.comm[data-which="on"] rect').nth(1)
    bucket.click()                                           # a tap (click) or a keyboard focus
    text = " ".join(page.locator("#bucket-panel").inner_text().split())
    assert text.startswith("Bucket 1 of 4") and "tensors" in text and "ready at" in text
    split = r": ([\d.]+) ms = latency 2\(K−1\)α ([\d.]+) ms \+ bandwidth 2\(K−1\)n/\(Kβ\) ([\d.]+) ms"
    total, latency, bandwidth = (float(v) for v in re.search(split, text).groups())
    assert total == pytest.approx(latency + bandwidth, abs=1e-9) and latency == pytest.approx(0.3)
    page.keyboard.press("ArrowRight")
    assert " ".join(page.locator("#bucket-panel").inner_text().split()).startswith("Bucket 2 of 4")
    page.keyboard.press("End")
    assert " ".join(page.locator("#bucket-panel").inner_text().split()).startswith("Bucket 3 of 4")
    page.keyboard.press("Home")                              # bucket 0 holds the last layer: fc
    assert "fc.weight, fc.bias" in page.locator("#bucket-panel").inner_text()
    # the legend names the step line; the curve chooses a cap
    assert "end of the step" in page.locator("#legend").inner_text()
    page.locator("#curve .cap-point").nth(0).click()
    assert page.input_value("#cap") == "0"


# ---- what --json carries for the pages --------------------------------------------------------------
def test_json_carries_each_parts_prose_and_the_figures_captions(tmp_path: Path) -> None:
    """Report keeps its prose and figure captions beside "parts" (which stays as it was: the tests
    that compare runs walk it, and prose may quote a timing)."""
    import argparse

    from common.figures import new_figure
    from common.output import Report

    args = argparse.Namespace(json=str(tmp_path / "out.json"), save_figs=str(tmp_path / "figs"), quick=False)
    rep = Report("lecture15/example.py", "an example", args)
    rep.part(2, "an answer in words")
    rep.note("same seed is not enough:\nthe draws differ.\n\n- a second paragraph")
    rep.line("  a printed line")
    rep.check_close("two sums", 0.0, 1e-6)
    fig, ax = new_figure()
    ax.set_title("step against the bucket cap")
    rep.save_figure(fig, "curve")
    data = rep.finish()
    assert data["prose"]["Part 2"] == [
        {"kind": "note", "text": "same seed is not enough: the draws differ.\n\n- a second paragraph"},
        {"kind": "line", "text": "  a printed line"},
        {"kind": "check", "text": "check: two sums: max |difference| 0 ≤ 1e-06: ok"}]
    assert data["captions"] == {"lecture15_example_curve.png": "step against the bucket cap"}
    assert set(data["parts"]["Part 2"]) == {"title", "figures"}          # no prose among the values
    assert json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["prose"] == data["prose"]
