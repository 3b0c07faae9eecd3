"""report/pipeline.html (code/report/pipeline.py): the page's port of cs336/pipeline.py run on EVERY
setting the page offers and compared with the Python model, to the digits the page shows (and its
drawn passes and activation curves exactly); the same comparison made to fail by a changed page;
then the page in headless Chromium at 390, 768 and 1366 px: the notes' figures beside ours, each
control moving the numbers the way the model says, the URL round trip, reset, the command line.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from conftest import offline_page, run_script

from common import checker
from cs336 import pipeline as pp
from report.pipeline import (
    AXES,
    DEFAULT,
    held_over_time,
    run_setting,
    slow_stages,
    smallest_m,
    valid,
    write_pipeline,
)

WIDTHS = ((390, 844), (768, 1024), (1366, 768))


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pipeline(tmp_path_factory.mktemp("report"))


# ---- the Python model's numbers, written as the page writes them --------------------------------
def fixed(x: float, places: int) -> str:
    """JavaScript's x.toFixed(places): the exact binary value rounded, halves away from zero."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def trimmed(x: float, places: int) -> str:
    return re.sub(r"\.?0+$", "", fixed(x, places)) or "0"


def ms_text(s: float) -> str:
    return trimmed(s * 1e3, 1)


def pct_text(share: float) -> str:
    return fixed(100 * share, 1) + " %"


def digest(run: pp.PipelineRun) -> float:
    """pipeline.js's digest of the drawn passes, summed in the same order (so to the same bits)."""
    h, k = 0.0, 0
    for d, order in enumerate(run.orders):
        for (kind, m, j), start, end in zip(order, run.starts[d], run.ends[d]):
            k += 1
            h += k * (start + 3 * end) + k * ((1 if kind == pp.FORWARD else 2) + 5 * m + 11 * j)
    return h


def held_digest(held: list[list[tuple[float, float]]]) -> float:
    """pipeline.js's heldDigest of the activation curves drawn."""
    h, k = 0.0, 0
    for curve in held:
        for t, value in curve:
            k += 1
            h += k * t * (1 + value)
    return h


def expected(setting: dict) -> dict:
    """Every number the page shows for `setting`, from the Python model (report/pipeline.py's
    run_setting calls cs336/pipeline.run_schedule)."""
    run = run_setting(setting)
    s, m = setting["stages"], setting["micro_batches"]
    held = [held_over_time(run, d) for d in range(s)]
    assert [max(h for _, h in curve) for curve in held] == run.peak_activations   # the curve peaks there
    if setting["schedule"] == "interleaved":   # the closed form: makespan_closed_form's share
        closed = 1 - m * (setting["tf_ms"] + setting["tb_ms"]) / 1e3 / pp.makespan_closed_form(
            s, m, setting["tf_ms"] / 1e3, setting["tb_ms"] / 1e3, setting["virtual"])
    else:
        closed = pp.bubble_fraction_closed_form(s, m)
    return {
        "step": ms_text(run.makespan), "bubble": pct_text(run.bubble_fraction),
        "eta": pct_text(run.efficiency),
        "notes-share": pct_text(pp.notes_bubble_share(s, m, setting["tf_ms"] / 1e3, setting["tb_ms"] / 1e3)),
        "closed": pct_text(closed) if setting["slow"] is None else "—",
        "idle": ms_text(max(run.idle)), "busy": ms_text(max(run.busy)),
        "peak": trimmed(max(run.peak_activations), 2),
        "ranks": [[ms_text(b), ms_text(i), trimmed(p, 2)] for b, i, p in
                  zip(run.busy, run.idle, run.peak_activations)],
        "smallest": {str(p): smallest_m(setting, p) for p in AXES["target_pct"]},
        "digest": digest(run), "held": held_digest(held),
    }


def python_settings() -> list[dict]:
    """The settings the page should offer, from report/pipeline.py's axes and the model's rule."""
    out = []
    for schedule, stages, m, tf, tb in itertools.product(*(AXES[name] for name in (
            "schedule", "stages", "micro_batches", "tf_ms", "tb_ms"))):
        for v in AXES["virtual"] if schedule == "interleaved" else [DEFAULT["virtual"]]:
            for slow in [None, *slow_stages(stages)]:
                for x in AXES["slow_factor"] if slow is not None else [DEFAULT["slow_factor"]]:
                    setting = {"schedule": schedule, "virtual": v, "stages": stages, "micro_batches": m,
                               "tf_ms": tf, "tb_ms": tb, "slow": slow, "slow_factor": x,
                               "target_pct": DEFAULT["target_pct"]}
                    if valid(setting):
                        out.append(setting)
    return out


def key(setting: dict) -> str:
    return json.dumps(setting, sort_keys=True)


def page_numbers(page, where: str = "true") -> tuple[list[dict], list[dict]]:  # type: ignore[no-untyped-def]
    """The settings the page offers (those `where`, a JavaScript test of `st`, picks) and the numbers it
    shows for each, computed in the page. One JSON string: Playwright hands a large object over 20
    times slower than its text."""
    return json.loads(page.evaluate(f"(() => {{ const all = offeredSettings().filter((st) => {where}); "
                                    "return JSON.stringify([all, all.map((st) => pageNumbers(st))]); })()"))


def mismatches(settings: list[dict], shown: list[dict]) -> list[str]:
    out = []
    for setting, numbers in zip(settings, shown):
        want = expected(setting)
        for name, value in want.items():
            got = numbers[name]
            same = (got == pytest.approx(value, rel=1e-12, abs=1e-12) if name in ("digest", "held")
                    else got == value)
            if not same:
                out.append(f"{setting}: {name} page {got!r}, model {value!r}")
    return out


def test_every_setting_offered_equals_the_python_model(browser, page_file: Path) -> None:
    started = time.perf_counter()
    page, errors = offline_page(browser, page_file)
    settings, shown = page_numbers(page)
    assert sorted(map(key, settings)) == sorted(map(key, python_settings()))   # every one, and only those
    assert len(settings) == 5112        # (the axes in report/pipeline.py, less interleaving's refusals)
    found = mismatches(settings, shown)
    assert found == [], f"{len(found)} numbers differ, the first: {found[:3]}"
    assert errors == []
    page.context.close()
    assert time.perf_counter() - started < 30       # (about 10 s here)


# Each change makes the page's model part from the Python one (the test above must then fail).
MUTATIONS = [
    ("const warmup = Math.min(S - s - 1, M)", "const warmup = Math.min(S - s, M)"),   # 1F1B's warm-up
    ("const fill = (S - 1) * tf;", "const fill = (S - 1) * (tf + 0.0001);"),            # the notes' fill
    ("peak.push(most / v);", "peak.push(most);"),                                       # chunks as stages
    ("const durF = tf[d] / v,", "const durF = tf[d] / v * 1.0001,"),                    # a forward's time
]


@pytest.mark.parametrize("old, new", MUTATIONS)
def test_the_comparison_fails_when_the_page_parts_from_the_model(browser, page_file: Path, tmp_path: Path,
                                                                 old: str, new: str) -> None:
    html = page_file.read_text(encoding="utf-8")
    assert html.count(old) == 1
    broken = tmp_path / "pipeline.html"
    broken.write_text(html.replace(old, new), encoding="utf-8")
    page, _ = offline_page(browser, broken)
    settings, shown = page_numbers(page, "st.slow === null && st.tb_ms === 20")      # a sample, for time
    page.context.close()
    assert len(settings) > 50 and mismatches(settings, shown) != []


def test_the_comparison_fails_when_the_python_part_changes(browser, page_file: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: report/pipeline.py's own part (here the slow stage's times, as if its factor
    slowed only the forward) changed under the same comparison; the page's settings with a slow stage
    then differ."""
    import report.pipeline as page_module

    def forward_only(setting: dict) -> tuple[list[float], list[float]]:
        tfs, _ = stage_times(setting)
        return tfs, [setting["tb_ms"] / 1e3] * setting["stages"]

    stage_times = page_module.stage_times
    page, _ = offline_page(browser, page_file)
    settings, shown = page_numbers(page, "st.slow !== null && st.tb_ms === 20 && st.stages === 4")
    page.context.close()
    assert mismatches(settings, shown) == []
    monkeypatch.setattr(page_module, "stage_times", forward_only)
    assert len(settings) > 50 and mismatches(settings, shown) != []


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
    want = expected(dict(DEFAULT, slow=None))
    assert text(page, "#setting") == "1F1B · S = 4 · M = 8 · t_f = 10 ms · t_b = 20 ms · equal stages"
    assert (text(page, "#step"), text(page, "#bubble"), text(page, "#notes-share")) == (
        want["step"] + " ms", want["bubble"], want["notes-share"]) == ("330 ms", "27.3 %", "11.1 %")
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
    return float(re.match(r"[\d.]+", text(page, f"#{element_id}").removeprefix("M = ")).group())


def test_each_control_moves_what_the_model_says(browser, page_file: Path) -> None:
    page, errors = offline_page(browser, page_file)
    bubble = number(page, "bubble")
    page.focus("#micro_batches")                   # by keyboard: one step of the slider is the next M
    page.keyboard.press("ArrowRight")
    assert "M = 12" in text(page, "#setting") and number(page, "bubble") < bubble
    page.keyboard.press("ArrowLeft")
    move(page, "micro_batches", str(AXES["micro_batches"].index(16)))       # more M: a smaller bubble
    assert number(page, "bubble") < bubble and number(page, "notes-share") < 11.1
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


def test_the_command_line_prints_the_pages_numbers(browser, page_file: Path, tmp_path: Path) -> None:
    """06_pipeline.py with the flags the page shows: its Part 1 records the page's step, bubble and peaks."""
    page, _ = offline_page(browser, page_file)
    move(page, "micro_batches", str(AXES["micro_batches"].index(12)))
    move(page, "tb_ms", "2")
    command, step, bubble = text(page, "#command"), text(page, "#step"), text(page, "#bubble")
    ranks = page.eval_on_selector_all("#ranks tbody tr", "rs => rs.map(r => r.cells[3].textContent)")
    page.context.close()
    flags = command.removeprefix("python code/cs336/06_pipeline.py ").split()
    run_script("cs336/06_pipeline.py", *flags, "--json", str(tmp_path / "o.json"))
    values = json.loads((tmp_path / "o.json").read_text())["parts"]["Part 1"]["1F1B"]
    assert ms_text(values["makespan_ms"] / 1e3) + " ms" == step
    assert pct_text(values["bubble_fraction"]) == bubble
    assert [trimmed(p, 2) for p in values["peak_activations"]] == ranks


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
