"""report/pipeline.html's numbers (code/report/pipeline.py): the page's port of cs336/pipeline.py run
on EVERY setting the page offers and compared with the Python model as text, with the digits
06_pipeline.py prints the same quantity with (pipeline_texts.py; its drawn passes and activation
curves exactly); the same comparison made to fail by a changed page, a changed digit among them; the
page's number formats against Python's at ties; the command line it shows printing its numbers.
The page itself in a browser: test_pipeline_page.py.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from pathlib import Path

import pytest
from conftest import offline_page, open_mutated, run_script
from pipeline_texts import held_text, ms_text, pct_text, step_text

from common.units import fmt_num, fmt_time, ms
from cs336 import pipeline as pp
from report.pipeline import (
    AXES,
    DEFAULT,
    held_over_time,
    interleaved_share,
    run_setting,
    slow_stages,
    smallest_m,
    valid,
    write_pipeline,
)


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pipeline(tmp_path_factory.mktemp("report"))


# ---- the Python model's numbers, as the page writes them (pipeline_texts.py) ---------------------
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
        closed = interleaved_share(s, m, setting["virtual"])
    else:
        closed = pp.bubble_fraction_closed_form(s, m)
    return {
        "step": step_text(setting, run.makespan), "bubble": pct_text(run.bubble_fraction, setting),
        "eta": pct_text(run.efficiency),
        "notes-share": pct_text(pp.notes_bubble_share(s, m, setting["tf_ms"] / 1e3, setting["tb_ms"] / 1e3)),
        "closed": pct_text(closed, setting) if setting["slow"] is None else "—",
        "idle": ms_text(max(run.idle)), "busy": ms_text(max(run.busy)),
        "peak": held_text(max(run.peak_activations)),
        "ranks": [[ms_text(b), ms_text(i), held_text(p)] for b, i, p in
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
    ("fixed(100 * share, 2)", "fixed(100 * share, 1)"),                                 # Part 1's digits
]


@pytest.mark.parametrize("old, new", MUTATIONS)
def test_the_comparison_fails_when_the_page_parts_from_the_model(browser, page_file: Path, tmp_path: Path,
                                                                 old: str, new: str) -> None:
    page, _ = open_mutated(browser, page_file, tmp_path, old, new)
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


# ---- the number formats at their edges: ties, a carry to the next power of ten, thousands ----------
# Each JavaScript format against Python's at values where a JavaScript shortcut would part from it:
# toPrecision and toFixed round an exact tie up, Python to even (406.25 -> 406.2 at 4 digits, 0.125
# -> 0.12 at 2 places, 142.5 ms -> 142 ms at 3), ms() takes float noise off (1949.9999999999998 ->
# 1,950), .4g writes 1e+04 from 9999.5.
EDGES = [406.25, 0.125, 0.1425, 2072.5, 142.5, 9999.5, 12345.5, 1950.0, 1.9499999999999998,
         27.272727272727273, 99.995, 0.001, 0.0005, 0.0, 1.0125, 0.0105, 2.5e-05,
         17.948717948717949, 1000000.5, 52.5]
FORMATS = "[fmtNum(x), fmtTime(x), fixed(x, 2), String(msOf(x))]"


def python_formats(x: float) -> list[str]:
    rounded = ms(x)
    return [fmt_num(x), fmt_time(x), f"{x:.2f}", str(int(rounded)) if rounded.is_integer() else repr(rounded)]


@pytest.mark.parametrize("old, new", [(None, None),
                                      ("return String(Math.sign(x) * Number(",      # JavaScript's tie, up
                                       "return String(Number(x.toPrecision(digits))); (Number("),
                                      ("function fixed(x, places) {",
                                       "function fixed(x, places) { return x.toFixed(places);")])
def test_the_number_formats_equal_pythons_at_their_edges(browser, page_file: Path, tmp_path: Path,
                                                         old: str | None, new: str | None) -> None:
    html = page_file.read_text(encoding="utf-8")
    if old is not None:               # a mutation: the page's formats must then part from Python's
        assert html.count(old) == 1
        (tmp_path / "pipeline.html").write_text(html.replace(old, new), encoding="utf-8")
    page, errors = offline_page(browser, tmp_path / "pipeline.html" if old else page_file)
    shown = page.evaluate(f"(xs) => xs.map((x) => {FORMATS})", EDGES)
    page.context.close()
    want = [python_formats(x) for x in EDGES]
    assert (shown == want) == (old is None), [(x, a, b) for x, a, b in zip(EDGES, shown, want) if a != b]
    assert errors == []


def shown_at(page, hash_: str, *ids: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The texts of these elements once the page has opened the setting `hash_` (as a link would)."""
    page.evaluate("h => { history.replaceState(null, '', h); "
                  "dispatchEvent(new HashChangeEvent('hashchange')); }", hash_)
    return [" ".join(page.locator(f"#{i}").inner_text().split()) for i in ids]


# (a setting, the line or table row of 06's output that prints it, what the page shows in its place)
TERMINAL = [("#schedule=1F1B&S=8&M=32", r"1F1B: makespan (\S+ \S+), bubble (\S+ %)", ("step", "bubble")),
            ("#schedule=1F1B&S=8&M=32&tb=40&slow=4&x=1.5", r"stage 4 × 1.5 +(\S+) +\S+ +\S+ +\S+ +(\S+)",
             ("step", "bubble")),
            ("#schedule=interleaved&v=4&S=8&M=32&tb=40",
             r"interleaved ms[\s\S]*?\n +8 +32 +\S+ +(\S+) +\S+ +\S+ +(\S+)", ("idle", "bubble"))]


@pytest.mark.parametrize("hash_, printed, ids", TERMINAL)
def test_the_command_line_prints_the_pages_numbers_with_its_digits(browser, page_file: Path, hash_: str,
                                                                   printed: str, ids: tuple) -> None:
    """06_pipeline.py run with the flags the page shows prints the page's numbers with the same digits:
    its text is the thing tested here (Part 1's line, Part 5's row, Part 4's interleaved row)."""
    page, errors = offline_page(browser, page_file)
    command, *shown = shown_at(page, hash_, "command", *ids)
    ranks = page.eval_on_selector_all("#ranks tbody tr",
                                      "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    page.context.close()
    flags = command.removeprefix("python code/cs336/06_pipeline.py ").split()
    out = run_script("cs336/06_pipeline.py", *flags).stdout
    found = re.search(printed, out)
    assert found, printed
    units = {"step": " ms", "idle": " ms", "bubble": " %"}
    assert [g if g.endswith(("s", "%")) else g + units[i] for g, i in zip(found.groups(), ids)] == shown
    if "S=8&M=32" in hash_ and "slow" not in hash_ and "interleaved" not in hash_:   # Part 1's stage table
        table = re.findall(r"\n +(\d) +(\S+) +\S+ +(\S+) +\S+ +(\S+) +\d+(?=\n)", out)
        assert [[f"rank {d}", busy, idle, held] for d, busy, idle, held in table] == ranks[:8]
    assert errors == []
