"""report/timeline.html on a phone and to a screen reader (issue 32, item 5): the chart stays on the
screen while a slider moves, every bucket and every point of the curve can be picked by a thumb,
the two result cards are what a screen reader hears when a slider moves, the page links back to the
report; text is 12 px or more and tap targets 24 px or more at every width; the page carries the
grid with each number once and gives back exactly what timeline_grid.build_grid() made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lecture15.timeline_grid import build_grid
from report.timeline import decode_grid, encode_grid, notes_cards, write_timeline

PHONE = {"width": 390, "height": 844}
WIDTHS = ((390, 844), (768, 1024), (1366, 900))
SLIDERS = ("model", "layers", "cap", "beta", "alpha", "k")


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_timeline(tmp_path_factory.mktemp("thumb"))


@pytest.fixture(scope="module")
def opened(browser, page_file: Path):
    """opened(width, height) -> (page, errors): the page in a fresh context of that size, offline."""
    contexts = []

    def get(width: int, height: int):
        context = browser.new_context(offline=True, viewport={"width": width, "height": height},
                                      has_touch=width < 800)
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        page.goto(page_file.resolve().as_uri())
        page.wait_for_load_state("load")
        return page, errors

    yield get
    for context in contexts:
        context.close()


BOXES = "es => es.map(e => e.getBoundingClientRect().toJSON())"


def chart_top(page) -> float:
    return page.eval_on_selector("#chart", "e => e.getBoundingClientRect().top")


def test_the_pages_grid_is_build_grid_exactly(opened) -> None:
    """What the browser draws from (GRID, after timeline.js decodes the page's data) is every number
    and text of build_grid(), and the Python decoder agrees."""
    grid = build_grid()
    assert decode_grid(json.loads(json.dumps(encode_grid(grid)))) == grid
    page, errors = opened(1366, 900)
    assert json.loads(page.evaluate("JSON.stringify(GRID)")) == dict(grid, notes=notes_cards())
    assert errors == []


def test_the_chart_stays_on_screen_while_any_slider_moves(opened) -> None:
    page, errors = opened(**PHONE)
    page.select_option("#model", "uniform")         # the layers slider works only for the uniform stack
    for element_id in SLIDERS:
        # reached with the keyboard (the browser scrolls it into view), then moved with the arrows
        page.evaluate("window.scrollTo(0, 0)")
        page.focus(f"#{element_id}")
        before = page.locator("#step-on").text_content()
        page.keyboard.press("ArrowLeft" if element_id != "model" else "ArrowUp")
        page.keyboard.press("ArrowRight" if element_id != "model" else "ArrowDown")
        top = chart_top(page)
        assert 0 <= top < PHONE["height"] - 100, f"{element_id}: the chart's top is at {top:.0f} px"
        chart_bottom = page.eval_on_selector("#view", "e => e.getBoundingClientRect().bottom")
        box = page.locator(f"#{element_id}").bounding_box()
        assert box["y"] >= chart_bottom - 1 and box["y"] + box["height"] <= PHONE["height"], (
            f"{element_id} is hidden under the chart or off the screen")
        # dragged by a thumb, the page scrolled so that the slider sits at the bottom of the screen
        page.eval_on_selector(f"#{element_id}", "e => e.scrollIntoView({block: 'end'})")
        if element_id != "model":
            box = page.locator(f"#{element_id}").bounding_box()
            y = box["y"] + box["height"] / 2
            page.mouse.move(box["x"] + 5, y)
            page.mouse.down()
            for step in range(1, 6):
                page.mouse.move(box["x"] + box["width"] * step / 6, y)
                top = chart_top(page)
                assert 0 <= top < PHONE["height"] - 100, f"{element_id} dragged: the chart's top at {top:.0f}"
            page.mouse.up()
            assert page.locator("#step-on").text_content() != before or element_id == "layers"
    assert errors == []


def test_every_bucket_can_be_picked_by_a_thumb_or_from_the_list(opened) -> None:
    page, errors = opened(**PHONE)
    # a tap on the all-reduce row, even above a bucket's drawn box, picks the bucket nearest it: the
    # row is a target 24 px or more high
    hits = page.eval_on_selector_all("#chart rect.hit", BOXES)
    assert len(hits) == 2 and all(h["height"] >= 24 for h in hits)
    for n, which in enumerate(("on", "off")):
        for bucket in range(4):      # (a tap scrolls the details into view: the chart moves to the top)
            row = page.eval_on_selector_all("#chart rect.hit", BOXES)[n]
            target = page.eval_on_selector_all(
                f'#chart rect.bucket[data-which="{which}"][data-bucket="{bucket}"]', BOXES)[0]
            page.touchscreen.tap(target["x"] + target["width"] / 2, row["y"] + 2)
            kind = "with overlap" if which == "on" else "without overlap"
            assert page.locator("#bucket-panel").inner_text().startswith(f"Bucket {bucket} of 4 ({kind})")
    # 391 buckets (BERT-large, a bucket per tensor) are too thin to aim at: the list names each
    page.select_option("#model", "BERT-large")
    page.eval_on_selector("#cap", "e => { e.value = 0; e.dispatchEvent(new Event('input')); }")
    buckets = int(page.locator("#buckets").text_content())
    assert page.locator("#bucket-list option").count() == buckets > 300
    assert page.input_value("#bucket-row") == "off"          # the row last tapped: without overlap
    page.select_option("#bucket-row", "on")
    page.select_option("#bucket-list", "200")
    assert page.locator("#bucket-panel").inner_text().startswith(f"Bucket 200 of {buckets} (with overlap)")
    assert page.get_attribute('#chart rect.bucket[data-which="on"][data-bucket="200"]', "class") == (
        "bucket picked")
    # the buckets without overlap are in the list too: the row beside it says which
    page.select_option("#bucket-row", "off")
    assert page.locator("#bucket-panel").inner_text().startswith(f"Bucket 200 of {buckets} (without overlap)")
    assert page.get_attribute('#chart rect.bucket[data-which="off"][data-bucket="200"]', "class") == (
        "bucket picked")
    assert page.locator("#bucket-row").bounding_box()["height"] >= 24
    # a bucket of one tensor says "1 tensor"
    ones = page.eval_on_selector_all("#bucket-list option", "os => os.map(o => o.textContent)")
    assert any(o.endswith(", 1 tensor") for o in ones) and not any(o.endswith(" 1 tensors") for o in ones)
    assert page.locator("#bucket-list").bounding_box()["height"] >= 24
    # the curve's points: a 24 px target each
    sizes = page.eval_on_selector_all("#curve .cap-point", """gs => gs.map(g => {
        const r = g.getBoundingClientRect(); return [r.width, r.height]; })""")
    assert len(sizes) == 12 and all(w >= 24 and h >= 24 for w, h in sizes)
    assert errors == []


def test_a_screen_reader_hears_the_step_and_the_exposed_time_not_the_bucket_paragraph(opened) -> None:
    page, errors = opened(**PHONE)
    live = page.eval_on_selector_all("[aria-live]", "es => es.map(e => e.id)")
    assert sorted(live) == ["card-exposed", "card-step-on"]
    for card in live:
        assert page.get_attribute(f"#{card}", "aria-atomic") == "true"
    before = page.locator("#card-step-on").inner_text()
    page.focus("#k")
    page.keyboard.press("ArrowRight")
    after = page.locator("#card-step-on").inner_text()
    assert after != before and after.startswith("step with overlap (DDP)")
    assert page.get_attribute("#bucket-panel", "aria-live") is None
    assert page.get_attribute("#setting", "aria-live") is None
    assert errors == []


def test_a_link_leads_back_to_the_report(opened) -> None:
    page, _ = opened(**PHONE)
    link = page.locator('a[href="index.html"]')
    assert link.count() == 1 and "report" in link.inner_text()
    box = link.bounding_box()
    assert box["y"] < 60 and box["height"] >= 24


TEXT_SIZES = """() => {
  const out = [];
  for (const e of document.querySelectorAll("body *")) {
    if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    if (!e.getClientRects().length || e.closest(".sr, noscript, title, script, style")) continue;
    let px = parseFloat(getComputedStyle(e).fontSize);
    if (e instanceof SVGElement) { const m = e.getScreenCTM(); px *= Math.hypot(m.a, m.b); }
    if (px < 11.95) out.push(`${e.tagName} "${e.textContent.slice(0, 30)}" ${px.toFixed(1)} px`);
  }
  return out;
}"""
TARGETS = """() => [...document.querySelectorAll(
    "a, button, input, select, #curve .cap-point, #chart rect.hit")]
  .filter(e => e.getClientRects().length)
  .map(e => { const r = e.getBoundingClientRect();
              return [e.id || e.textContent.slice(0, 30), r.width, r.height]; })
  .filter(([_, w, h]) => w < 24 || h < 24)"""


@pytest.mark.parametrize("size", WIDTHS, ids=lambda s: str(s[0]))
def test_text_and_targets_are_big_enough_at_every_width(opened, size: tuple[int, int]) -> None:
    page, errors = opened(*size)
    for setting in ("", "#model=BERT-large&cap=0+(a+bucket+per+tensor)&beta=1.25&alpha=50&k=256"):
        if setting:
            page.evaluate(f"location.hash = '{setting}'")
        assert page.evaluate(TEXT_SIZES) == []
        assert page.evaluate(TARGETS) == []
        assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 0
    assert errors == []
