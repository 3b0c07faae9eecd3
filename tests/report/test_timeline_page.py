"""report/timeline.html (code/report/timeline.py) and the grid behind it (lecture15/timeline_grid.py).

The grid is checked against the full per-parameter `ddp_sim.simulate_ddp` call and against
03_overlap.py's own --json; the page is opened in a real browser (conftest's `open_page`) and every
slider is moved to a point whose numbers must be the grid's.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest
from conftest import load_script, run_script

from common.costmodel.link import Link
from common.units import MB
from lecture15.ddp_sim import simulate_ddp
from lecture15.models import resnet50
from lecture15.notes_calibration import notes_resnet_compute
from lecture15.timeline_grid import (
    ALPHAS_US,
    BETAS_GBS,
    CAPS,
    DEFAULT,
    UNIFORM_LAYERS,
    WORLD_SIZES,
    grid_models,
    point_index,
    show_setting,
    time_text,
)
from report.timeline import decode_grid, write_timeline

UNITS_PER_S = 1e7                       # the grid stores integers of 0.1 µs
SLIDERS = ("cap", "beta", "alpha", "k", "layers")


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """The page, written once for the module, and the CPU seconds writing it took."""
    started = time.process_time()
    path = write_timeline(tmp_path_factory.mktemp("report"))
    return path, time.process_time() - started


@pytest.fixture(scope="module")
def grid(page_file: tuple[Path, float]) -> dict:
    """The data embedded in the page (what the browser reads)."""
    html = page_file[0].read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="grid-data">(.*?)</script>', html, re.S)
    assert found, "no embedded grid data"
    return decode_grid(json.loads(found.group(1)))     # the page carries each number once


def units(seconds: float) -> int:
    return round(seconds * UNITS_PER_S)


def point_of(grid: dict, model: int, cap: int, beta: int, alpha: int, k: int) -> dict:
    return grid["models"][model]["caps"][cap]["points"][point_index(beta, alpha, k)]


def spans(gaps: list[int], durations: list[int]) -> list[tuple[int, int]]:
    out, end = [], 0
    for gap, duration in zip(gaps, durations):
        start = end + gap
        end = start + duration
        out.append((start, end))
    return out


# ---- the grid ----------------------------------------------------------------------------------
def test_default_is_03_overlaps_part1_setting(grid: dict) -> None:
    script = load_script("lecture15/03_overlap.py")
    # 03's defaults are the notes' §3 setting: read them from its --help
    shown = " ".join(run_script("lecture15/03_overlap.py", "--help").stdout.split())
    for flag, value in (("--world-size", DEFAULT["world_size"]), ("--alpha-us", DEFAULT["alpha_us"]),
                        ("--beta-gbs", DEFAULT["beta_gbs"])):
        assert re.search(rf"{flag} \S+ .*?\(default: {value:g}\)", shown), flag
    # --help says where the default comes from
    assert "default: the notes' 25 MB)" in shown and DEFAULT["cap_bytes"] == 25 * MB
    d = grid["default"]
    assert grid["models"][d["model"]]["name"] == "ResNet-50"
    assert (WORLD_SIZES[d["k"]], ALPHAS_US[d["alpha"]], BETAS_GBS[d["beta"]], CAPS[d["cap"]][1]) == (
        16, 10.0, 10.0, 25 * MB)
    # BERT-large's compute is 03_overlap's bert_compute(): the same calibration
    bert = next(m for m in grid_models() if m.key == "BERT-large")
    assert bert.compute == script.bert_compute()[1]


def test_default_point_equals_simulate_ddp_and_03_overlaps_json(grid: dict, tmp_path: Path,
                                                                 quick_run) -> None:
    d = grid["default"]
    point = point_of(grid, d["model"], d["cap"], d["beta"], d["alpha"], d["k"])
    link = Link(10e-6, 10e9)
    on = simulate_ddp(resnet50(batch=32), 16, link, 25 * MB, compute=notes_resnet_compute())
    off = simulate_ddp(resnet50(batch=32), 16, link, 25 * MB, overlap=False, compute=notes_resnet_compute())
    assert (point["on"], point["off"], point["exposed"], point["comm"]) == (
        units(on.step_s), units(off.step_s), units(on.exposed_comm_s), units(on.comm_total_s))
    assert grid["models"][d["model"]]["caps"][d["cap"]]["buckets"] == len(on.buckets) == 4
    # what the script itself records for Part 1 (in ms)
    out = tmp_path / "o.json"
    quick_run("lecture15/03_overlap.py", json_to=out)
    claims = {c["what"]: c["ours"] for c in json.loads(out.read_text())["claims"]}
    assert point["on"] / 1e4 == pytest.approx(claims["step with overlap"], abs=1e-4)
    assert point["off"] / 1e4 == pytest.approx(claims["step without overlap"], abs=1e-4)


def test_grid_equals_the_full_simulation(grid: dict) -> None:
    """Every model and cap, at the corners and a few seeded (β, α, K), against simulate_ddp on every
    parameter: the steps, exposed and total communication, and each bucket's drawn span."""
    rng = random.Random(0)
    corners = [(0, 0, 0), (len(BETAS_GBS) - 1, len(ALPHAS_US) - 1, len(WORLD_SIZES) - 1)]
    for m, model in enumerate(grid_models()):
        assert grid["models"][m]["key"] == model.key
        assert grid["models"][m]["backward"] == units(model.compute.backward_s(model.spec))
        for c, (_, cap, first) in enumerate(CAPS):
            cap_bytes = model.spec.nbytes if cap is None else cap
            picks = corners + [(rng.randrange(len(BETAS_GBS)), rng.randrange(len(ALPHAS_US)),
                                rng.randrange(len(WORLD_SIZES)))]
            for b, a, k in picks:
                link = Link(ALPHAS_US[a] * 1e-6, BETAS_GBS[b] * 1e9)
                on = simulate_ddp(model.spec, WORLD_SIZES[k], link, cap_bytes, first, compute=model.compute)
                off = simulate_ddp(model.spec, WORLD_SIZES[k], link, cap_bytes, first, overlap=False,
                                   compute=model.compute)
                point = point_of(grid, m, c, b, a, k)
                where = (
                    f"{model.key}, cap {CAPS[c][0]}, β {BETAS_GBS[b]}, α {ALPHAS_US[a]}, K {WORLD_SIZES[k]}"
                )
                assert (point["on"], point["off"], point["exposed"], point["comm"]) == (
                    units(on.step_s),
                    units(off.step_s),
                    units(on.exposed_comm_s),
                    units(on.comm_total_s),
                ), where
                stored = grid["models"][m]["caps"][c]
                assert stored["bytes"] == on.bucket_bytes, where
                assert [(low, n) for low, n in zip(stored["low"], stored["tensors"])] == [
                    (min(b), len(b)) for b in on.buckets], where
                # the texts printed, each rounded once from the simulation's own seconds
                assert point["t"] == [time_text(t) for t in (on.step_s, off.step_s, on.exposed_comm_s,
                                                             on.comm_total_s, on.first_comm_start_s)] + [
                    f"{100 * (off.step_s / on.step_s - 1):.0f}"], where
                latency = grid["latency"][a][k]
                assert latency == units(2 * (WORLD_SIZES[k] - 1) * ALPHAS_US[a] * 1e-6), where
                assert all(d >= latency for d in point["d"]), where
                for timeline, gaps in ((on, point["g"]), (off, point["go"])):
                    drawn = spans(gaps, point["d"])
                    events = timeline.comm_events()
                    assert [s for s, _ in drawn] == [units(e.start_s) for e in events], where
                    assert all(abs(e - units(ev.end_s)) <= 1 for (_, e), ev in zip(drawn, events)), where


def test_times_are_printed_once_rounded_in_units_that_scale(capsys) -> None:
    assert [time_text(t) for t in (12.10703, 0.03775, 0.0004567, 1.0)] == ["12.11 s", "37.75 ms", "0.457 ms",
                                                                          "1.00 s"]
    # the page's command line for a setting prints what the page shows for it (the full simulation)
    grid_default = DEFAULT
    show_setting("ResNet-50", [c[1:] for c in CAPS].index((grid_default["cap_bytes"], None)), 10, 10, 16)
    out = capsys.readouterr().out
    assert "4 buckets; step 37.75 ms with overlap, 53.28 ms without; exposed 4.83 ms" in out   # as printed


def test_page_is_small_and_quick_to_write(page_file: tuple[Path, float]) -> None:
    path, cpu_s = page_file
    assert path.name == "timeline.html"
    assert path.stat().st_size <= 1.0e6          # 3.17 MB while it repeated the grid's numbers
    assert cpu_s <= 5.0, f"writing the page took {cpu_s:.1f} s of CPU"
    html = path.read_text(encoding="utf-8")
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "python code/lecture15/03_overlap.py" in html


def test_the_reproductions_page_is_the_one_written_alone(page_file: tuple[Path, float],
                                                         quick_reproduction: dict) -> None:
    # reproduce.py computes the page in a thread while its scripts run (timeline_in_background)
    written = (quick_reproduction["report_dir"] / "timeline.html").read_bytes()
    assert written == page_file[0].read_bytes()


def test_a_failure_in_the_pages_thread_reaches_the_caller(monkeypatch) -> None:
    import report.timeline

    def broken() -> str:
        raise OSError("no templates")

    monkeypatch.setattr(report.timeline, "render_timeline", broken)
    html = load_script("reproduce.py").timeline_in_background()
    with pytest.raises(OSError, match="no templates"):
        html()


# ---- the page in a browser ---------------------------------------------------------------------
def shown(page, element_id: str) -> tuple[str, int]:
    """A displayed time: the text written (with its unit) and the stored value it came from (0.1 µs)."""
    el = page.locator(f"#{element_id}")
    return el.text_content(), int(el.get_attribute("data-units"))


def assert_shows(page, point: dict, buckets: int) -> None:
    for i, (element_id, key) in enumerate((("step-on", "on"), ("step-off", "off"), ("exposed", "exposed"),
                                           ("comm", "comm"))):
        text, stored = shown(page, element_id)
        assert stored == point[key], element_id
        assert text == point["t"][i], element_id               # the grid's text, rounded once in Python
        value, unit = text.split()           # units that scale: ms below a second, s from one up
        per_unit = 1e4 if unit == "ms" else 1e7
        assert unit in ("ms", "s") and (unit == "s") == (point[key] >= 1e7), element_id
        assert float(value) * per_unit == pytest.approx(point[key], abs=0.51 * per_unit / 100), element_id
    assert page.locator("#faster").text_content() == point["t"][5] + " %"
    assert int(page.locator("#buckets").text_content()) == buckets
    assert int(page.locator("#svg-step-on").get_attribute("data-units")) == point["on"]
    assert int(page.locator("#svg-step-off").get_attribute("data-units")) == point["off"]
    assert page.locator('#chart g.comm[data-which="on"] rect').count() == buckets
    assert page.locator('#chart g.comm[data-which="off"] rect').count() == buckets


def test_page_opens_on_the_scripts_default(open_page, page_file: tuple[Path, float], grid: dict) -> None:
    page, errors = open_page(page_file[0])
    d = grid["default"]
    point = point_of(grid, d["model"], d["cap"], d["beta"], d["alpha"], d["k"])
    assert_shows(page, point, 4)
    setting = page.locator("#setting").text_content()
    for part in ("ResNet-50", "25 MB", "K = 16", "α = 10 µs", "β = 10 GB/s"):
        assert part in setting
    box = page.locator("#chart").bounding_box()
    assert box["width"] > 600 and box["height"] > 200
    assert page.locator("#chart rect").count() > 10 and page.locator("#chart .exposed").count() == 2
    assert errors == []


def move(page, element_id: str, value: str) -> None:
    page.eval_on_selector(
        f"#{element_id}",
        """(e, v) => { e.value = v;
        e.dispatchEvent(new Event("input", {bubbles: true}));
        e.dispatchEvent(new Event("change", {bubbles: true})); }""",
        value,
    )


def test_every_slider_moves_to_its_precomputed_point(open_page, page_file: tuple[Path, float],
                                                     grid: dict) -> None:
    page, errors = open_page(page_file[0])
    at = dict(grid["default"])
    keys = [m["key"] for m in grid["models"]]
    kind = "ResNet-50"
    moves = [("cap", 1), ("beta", 5), ("alpha", 0), ("k", 4), ("model", "BERT-large"), ("cap", 0),
             ("model", "uniform"), ("layers", 4), ("layers", 0), ("cap", 10), ("beta", 0), ("k", 0),
             ("alpha", 2), ("model", "ResNet-50")]
    before = shown(page, "step-on")[1]
    changed = 0
    for element_id, value in moves:
        move(page, element_id, str(value))
        if element_id == "model":
            kind = value
        else:
            at[element_id] = value
        model = keys.index(kind if kind != "uniform" else f"uniform-{UNIFORM_LAYERS[at['layers']]}")
        point = point_of(grid, model, at["cap"], at["beta"], at["alpha"], at["k"])
        assert_shows(page, point, grid["models"][model]["caps"][at["cap"]]["buckets"])
        assert page.locator("#layers").is_disabled() == (kind != "uniform")
        changed += point["on"] != before
        before = point["on"]
    assert changed == len(moves)      # each of these moves changes the step shown
    assert errors == []
