"""report/pipeline.html (code/report/pipeline.py) in headless Chromium at 390, 768 and 1366 px: the
notes' figures beside ours, each control moving the numbers the way the model says, the URL round
trip, reset, a dense setting kept readable, size and first paint, and the reproduction writing it.
Its numbers for every setting it offers: test_pipeline_model.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import offline_page
from pipeline_texts import pct_text, step_text

from common import checker
from cs336 import pipeline as pp
from report.pipeline import AXES, DEFAULT, run_setting, write_pipeline

WIDTHS = ((390, 844), (768, 1024), (1366, 768))


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pipeline(tmp_path_factory.mktemp("report"))


# ---- the page in a browser ------------------------------------------------------------------------
def text(page, selector: str) -> str:  # type: ignore[no-untyped-def]
    return " ".join(page.locator(selector).inner_text().split())


def notes_text(row_id: str) -> str:
    row = checker.row(row_id)
    return f"the notes: {row.notes_shown:g} {row.unit}".strip()


@pytest.mark.parametrize("width, height", WIDTHS)
def test_the_page_opens_on_the_notes_example_at_every_width(browser, page_file: Path, width: int,
                                                             height: int) -> None:
    page, errors = offline_page(browser, page_file, width, height)
    opening, run = dict(DEFAULT, slow=None), run_setting(dict(DEFAULT, slow=None))
    notes_share = pp.notes_bubble_share(4, 8, 10e-3, 20e-3)
    assert text(page, "#setting") == "1F1B · S = 4 · M = 8 · t_f = 10 ms · t_b = 20 ms · equal stages"
    assert (text(page, "#step"), text(page, "#bubble"), text(page, "#notes-share")) == (
        step_text(opening, run.makespan), pct_text(run.bubble_fraction, opening), pct_text(notes_share)) == (
        "330 ms", "27.27 %", "11.11 %")
    # the notes' figures, each beside ours, read from their table with its row id
    for card, row_id in (("bubble", "CS-bubble-S4-M8-share"), ("notes-share", "CS-bubble-S4-M8-notes-share"),
                         ("eta", "CS-eta-S4-M8"), ("idle", "CS-bubble-S4-M8-bubble"),
                         ("busy", "CS-bubble-S4-M8-work"), ("min-ours", "CS-five-pct-S4-real"),
                         ("min-notes", "CS-five-pct-S4-notes")):
        beside = text(page, f"#{card}-notes")
        assert beside.startswith(notes_text(row_id)) and row_id in beside, card
    assert page.locator("#chart g.passes rect").count() == 4 * 16       # S ranks, 2M passes each
    assert page.locator("#chart path.held").count() == 4
    layout = page.evaluate("""() => ({
        sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth,
        small: [...document.querySelectorAll('#controls input, #controls select, .buttons button, nav a')]
            .filter((e) => e.getBoundingClientRect().height < 24).map((e) => e.id || e.textContent),
        tinyText: [...document.querySelectorAll('body *')].filter((e) => e.childNodes.length &&
            [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim()) && e.offsetParent &&
            parseFloat(getComputedStyle(e).fontSize) < 12).map((e) => e.tagName + ' ' + e.textContent),
        svgText: Math.min(...[...document.querySelectorAll('#chart text')].map(
            (t) => t.getBoundingClientRect().height))})""")
    assert layout["sideways"] <= 0 and layout["small"] == [] and layout["tinyText"] == []
    assert layout["svgText"] >= 10
    # the chart stays in view while a control low on the page moves (sticky, as the timeline's)
    page.locator("#tb_ms").scroll_into_view_if_needed()
    chart = page.locator("#chart").bounding_box()
    control = page.locator("#tb_ms").bounding_box()
    assert chart["y"] >= -1 and chart["y"] + chart["height"] <= control["y"] + 1
    assert errors == []
    page.context.close()


def move(page, element_id: str, value: str) -> None:  # type: ignore[no-untyped-def]
    page.eval_on_selector(f"#{element_id}", """(e, v) => { e.value = v;
        e.dispatchEvent(new Event("input", {bubbles: true})); }""", value)


def number(page, element_id: str) -> float:  # type: ignore[no-untyped-def]
    """A card's number, a time in ms ("1.17 s" as 06 prints it is 1170; "2,705 ms" is 2705)."""
    value, unit = re.match(r"([\d.,]+) ?(\S*)", text(page, f"#{element_id}").removeprefix("M = ")).groups()
    return float(value.replace(",", "")) * (1000 if unit == "s" else 1)


def test_each_control_moves_what_the_model_says(browser, page_file: Path) -> None:
    page, errors = offline_page(browser, page_file)
    bubble = number(page, "bubble")
    page.focus("#micro_batches")                   # by keyboard: one step of the slider is the next M
    page.keyboard.press("ArrowRight")
    assert "M = 12" in text(page, "#setting") and number(page, "bubble") < bubble
    page.keyboard.press("ArrowLeft")
    move(page, "micro_batches", str(AXES["micro_batches"].index(16)))       # more M: a smaller bubble
    assert number(page, "bubble") < bubble and number(page, "notes-share") < 11.11
    move(page, "schedule", "GPipe")                # GPipe: the same bubble, every micro-batch held
    assert number(page, "bubble") == pytest.approx(100 * pp.bubble_fraction_closed_form(4, 16), abs=0.05)
    assert number(page, "peak") == 16
    move(page, "schedule", "1F1B")
    assert number(page, "peak") == 4
    move(page, "schedule", "interleaved")          # v = 2: the bubble time per rank halved
    assert number(page, "idle") == 45 and "--virtual-stages 2" in text(page, "#command")
    move(page, "virtual", "1")                     # v = 4
    assert number(page, "idle") == 22.5
    move(page, "stages", "2")                      # S = 8: M = 16 is a multiple, kept
    assert "M = 16" in text(page, "#setting") and text(page, "#why-not") == ""
    move(page, "micro_batches", "0")               # interleaved at S = 8 offers M = 8, 16, 24, 32 only
    assert "M = 8 ·" in text(page, "#setting") and "EN-08-interleaved-ms-order" in text(page, "#why-not")
    move(page, "schedule", "1F1B")
    move(page, "micro_batches", str(AXES["micro_batches"].index(12)))
    move(page, "schedule", "interleaved")          # M = 12 on 8 stages: moved, and said why
    assert "M = 16" in text(page, "#setting") and "multiple of S" in text(page, "#why-not")
    step = number(page, "step")
    move(page, "slow", "4")                        # a slow stage: a longer step, no closed form
    assert number(page, "step") > step and text(page, "#closed") == "—"
    assert "No flag prints this slow stage" in text(page, "#command-part")
    move(page, "schedule", "1F1B")
    assert "--slow-factor 2" in text(page, "#command")      # stage S/2 under 1F1B: 06 Part 5's
    step = number(page, "step")
    move(page, "slow_factor", "2")                 # 3× slower: a longer step still
    assert number(page, "step") > step and "--slow-factor 3" in text(page, "#command")
    share = number(page, "notes-share")
    move(page, "tf_ms", "1")                       # t_f = 20 ms: the notes' fill weighs more
    assert number(page, "notes-share") > share
    share = number(page, "notes-share")
    move(page, "tb_ms", "2")                       # t_b = 40 ms: less
    assert number(page, "notes-share") < share
    move(page, "target", "20")
    smallest = pp.smallest_micro_batches(8, 0.2 + 1e-12, lambda m: pp.bubble_fraction_closed_form(8, m))
    assert text(page, "#min-ours") == f"M = {smallest}" == "M = 28"
    # a slow stage is still set: the card says its M is for equal stages (the bubble has a floor)
    assert text(page, "#card-min-ours .label").endswith(", were the stages equal")
    move(page, "slow", "none")
    assert text(page, "#card-min-ours .label") == "smallest M, bubble ≤ 20 %"
    assert errors == []
    page.context.close()


def test_the_url_keeps_the_setting_and_reset_restores_the_notes(browser, page_file: Path) -> None:
    page, errors = offline_page(browser, page_file)
    move(page, "schedule", "interleaved")
    move(page, "virtual", "1")
    move(page, "tf_ms", "1")
    move(page, "slow", "3")
    move(page, "slow_factor", "0")
    url, shown = page.url, text(page, "#results")
    assert all(part in url for part in ("schedule=interleaved", "v=4", "tf=20", "slow=3", "x=1.5"))
    again, errors_again = offline_page(browser, page_file)
    again.goto(url)
    again.reload()
    assert text(again, "#results") == shown
    for control in ("schedule", "virtual", "stages", "micro_batches", "tf_ms", "tb_ms", "slow", "slow_factor",
                    "target"):
        assert again.input_value(f"#{control}") == page.input_value(f"#{control}"), control
    again.click("#reset")
    assert text(again, "#setting").startswith("1F1B · S = 4 · M = 8") and "slow=none" in again.url
    assert text(again, "#eta-notes").startswith(notes_text("CS-eta-S4-M8"))
    assert again.locator("#micro_batches").get_attribute("aria-valuetext") == "8 micro-batches"
    assert errors == [] and errors_again == []
    page.context.close()
    again.context.close()


def test_a_dense_setting_keeps_a_pass_8_px_wide_on_a_phone(browser, page_file: Path) -> None:
    """S = 8, M = 32, v = 4 (256 passes a rank) at 390 px: the chart widens to 8 px for its shortest
    pass and scrolls in its own box, saying so; the page itself does not scroll sideways."""
    page, errors = offline_page(browser, page_file, 390, 844)
    page.goto(page_file.resolve().as_uri() + "#schedule=interleaved&v=4&S=8&M=32&tf=10&tb=20&slow=none")
    page.reload()
    got = page.evaluate("""() => ({passes: [...document.querySelectorAll('#chart g.passes rect')].map(
        (r) => r.getBoundingClientRect().width),
        sign: getComputedStyle(document.querySelector('.scroll-sign')).display,
        box: ((b) => b.scrollWidth - b.clientWidth)(document.getElementById('chart-box')),
        page: document.documentElement.scrollWidth - document.documentElement.clientWidth})""")
    assert len(got["passes"]) == 8 * 2 * 32 * 4 and min(got["passes"]) >= 7.99
    assert got["sign"] == "block" and got["box"] > 0 and got["page"] <= 0
    assert errors == []
    page.context.close()


# The first contentful paint in ms since the page was asked for (its entry may come after "load").
FIRST_PAINT = """new Promise((done) => {
  new PerformanceObserver((list) => {
    const fcp = list.getEntriesByName("first-contentful-paint")[0];
    if (fcp) done(fcp.startTime);
  }).observe({type: "paint", buffered: true});
  setTimeout(() => done(null), 5000);
})"""


def test_page_is_small_and_paints_quickly(browser, page_file: Path) -> None:
    assert page_file.stat().st_size <= 1.5e6
    html = page_file.read_text(encoding="utf-8")
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    page, _ = offline_page(browser, page_file)
    paint = page.evaluate(FIRST_PAINT)
    page.context.close()
    print(f"first contentful paint: {paint:.0f} ms")
    assert paint is not None and paint <= 1000, paint


def test_the_reproduction_writes_the_page_and_links_it(page_file: Path, quick_reproduction: dict) -> None:
    folder = quick_reproduction["report_dir"]
    assert (folder / "pipeline.html").read_bytes() == page_file.read_bytes()
    assert 'id="pipeline-link" href="pipeline.html"' in (folder / "index.html").read_text(encoding="utf-8")
    assert '<a href="pipeline.html">' in (folder / "timeline.html").read_text(encoding="utf-8")
