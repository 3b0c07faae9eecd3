"""report/memory.html (code/report/memory.py) in headless Chromium: the opening state with the notes'
figures and 04_memory.py's own verdicts, each control against the model, the URL, reset, hostile
links, the command line, and the page at 390, 768 and 1366 px. Its numbers for every setting it
offers: test_memory_model.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import offline_page, run_script

from common import verdicts
from common.units import fmt_bytes, fmt_time
from cs336 import ledger as lg
from report import memory
from report.memory import DEFAULT, all_settings, setting_numbers

NUMBERS = ("params", "grads", "master", "adam", "state", "activations", "total", "sent", "seconds")


def test_page_is_small_and_self_contained(memory_page: Path) -> None:
    assert memory_page.stat().st_size <= 1.5e6
    html = memory_page.read_text(encoding="utf-8")
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    for link in ('href="index.html"', 'href="timeline.html"', 'href="pipeline.html"'):
        assert link in html


def card_bytes(page, card: str) -> float:  # type: ignore[no-untyped-def]
    return float(page.locator(f"#{card}").get_attribute("data-bytes"))


def test_opens_on_the_notes_setting_with_their_figures(browser, memory_page: Path, memory_claims: list[dict],
                                                      memory_costs: list[dict]) -> None:
    """The notes' figures beside ours, each with the verdict 04_memory.py's or 03_costs.py's run gave it."""
    page, errors = offline_page(browser, memory_page)
    want = setting_numbers(DEFAULT)
    for card in ("params", "grads", "master", "adam", "state", "total"):
        assert card_bytes(page, card) == pytest.approx(want[card], rel=1e-12)
        assert page.locator(f"#{card}").text_content() == fmt_bytes(want[card])
    by_ref = {c["ref"]: c for c in memory_claims}
    # the notes' figures beside ours, each with the verdict 04_memory.py's run gave it
    for card, ref in (("params", "CS-llama-mem-params"), ("adam", "CS-llama-mem-adam"),
                      ("state", "CS-llama-mem-total")):
        text = page.locator(f"#{card}-notes").text_content()
        assert f"{by_ref[ref]['notes']:g} GB" in text and ref in text
        assert verdicts.verdict(by_ref[ref]) in text
    assert "CS-llama-fits" in page.locator("#fits-80").text_content()
    # the notes' all-reduce beside our traffic, with 03_costs.py's verdicts, on each link they price
    cost = {c["ref"]: c for c in memory_costs}
    for link, ref in (("nvlink", "CS-llama-t-nvlink"), ("infiniband", "CS-llama-t-ib"),
                      ("ethernet", "CS-llama-t-eth")):
        choose(page, "link", link)
        text = page.locator("#traffic-notes").text_content()
        for r in ("CS-llama-volume", ref):
            assert f"{cost[r]['notes']:g} {cost[r]['unit']}" in text and r in text
            assert verdicts.verdict(cost[r]) in text
        assert fmt_bytes(setting_numbers(shown_setting(page))["sent"]) == "39 GB"
    choose(page, "world", 8)                      # off their setting: their figures go
    assert page.locator("#traffic-notes").text_content() == ""
    page.click("#reset")
    cells = page.locator("#notes-table tbody tr").evaluate_all(
        "rows => rows.map((r) => [...r.children].map((c) => c.textContent.trim()))")
    for row, stage in zip(cells, lg.STAGES):
        assert row[0] == stage
        assert row[3] == fmt_bytes(lg.zero_bytes_per_gpu(stage, 13e9, 4))
        assert row[4] == verdicts.verdict(by_ref[memory.MEMORY_ROWS[stage]])
        assert row[7] == verdicts.verdict(by_ref[memory.COMM_ROWS[stage]])
    assert "notes inconsistent" in [r[7] for r in cells]        # ZeRO-1's and ZeRO-3's cells (erratum)
    choose(page, "model", "200m")     # their 3.2 "GiB" is GB: 04 says "matches as they write"
    assert verdicts.verdict(by_ref["CS-mem-200m"]) == "matches as they write"
    assert "3.2 GB (matches as they write, row CS-mem-200m; read as: GiB written for GB" in page.locator(
        "#state-notes").text_content()
    assert errors == []
    page.context.close()


def choose(page, control: str, value: object) -> None:  # type: ignore[no-untyped-def]
    page.select_option(f"#{control}", str(value))


def shown_setting(page) -> dict:  # type: ignore[no-untyped-def]
    return page.evaluate("() => readState()")


def test_each_control_moves_what_the_model_says(browser, memory_page: Path) -> None:
    page, errors = offline_page(browser, memory_page)
    before = setting_numbers(DEFAULT)
    choose(page, "stage", "ZeRO-3")                   # ZeRO-3 divides the parameters by the world size
    assert card_bytes(page, "params") == pytest.approx(before["params"] / 4)
    choose(page, "world", 16)
    assert card_bytes(page, "params") == pytest.approx(before["params"] / 16)
    steps = [("tp", 2), ("pp", 4), ("batch", 4), ("seq", 2048), ("link", "ethernet"), ("model", "gpt3"),
             ("stage", "ZeRO-1"), ("model", "200m"), ("world", 64)]
    for control, value in steps:
        old = shown_setting(page)
        choose(page, control, value)
        s = shown_setting(page)
        assert s[control] == value
        now, then = setting_numbers(s), setting_numbers(old)
        assert card_bytes(page, "total") == pytest.approx(now["total"], rel=1e-12), control
        assert page.locator("#traffic tbody tr").count() == len(now["traffic"]) + 1, control
        if control in ("pp", "batch", "seq"):         # activations move with the stage's layers and b × s
            assert card_bytes(page, "activations") != then["activations"], control
        if control == "link":                         # the same bytes, priced on a slower link
            assert now["sent"] == then["sent"] and now["seconds"] > then["seconds"]
    assert page.locator("#tp").is_disabled() is False and page.locator("#batch").is_disabled()
    assert errors == []
    page.context.close()


def test_url_round_trip_reset_and_a_bad_url(browser, memory_page: Path) -> None:
    page, errors = offline_page(browser, memory_page)
    for control, value in (("model", "gpt3"), ("world", 256), ("tp", 8), ("pp", 4), ("stage", "ZeRO-2")):
        choose(page, control, value)
    moved, url = shown_setting(page), page.url
    assert "#" in url and "tp=8" in url
    again, errors2 = offline_page(browser, memory_page)
    again.goto(url)
    again.reload()
    assert shown_setting(again) == moved
    page.click("#reset")
    assert shown_setting(page) == DEFAULT and "world=4" in page.url
    # a setting the page does not offer (TP × PP = 64 on 4 GPUs, a world size of 3) is repaired
    again.goto(memory_page.resolve().as_uri() + "#model=llama&world=3&tp=8&pp=8&stage=ZeRO-9")
    again.reload()
    s = shown_setting(again)
    assert (s["world"], s["stage"]) == (4, "DDP") and 4 % (s["tp"] * s["pp"]) == 0
    assert errors == errors2 == []
    for p in (page, again):
        p.context.close()


# Links a user could be sent: values off the lists, names of every JS object's own properties, markup.
HOSTILE = ["world=3", "tp=0", "world=1e308", "world=99999999999999999999", "batch=-1&seq=NaN",
           "model=__proto__", "model=constructor", "model=toString", "link=__proto__", "stage=hasOwnProperty",
           "model=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E", "model=<script>alert(1)</script>", "%E0%A4%A"]


@pytest.mark.parametrize("fragment", HOSTILE)
def test_a_hostile_url_gives_an_offered_setting(browser, memory_page: Path, fragment: str) -> None:
    page, errors = offline_page(browser, memory_page)
    page.on("dialog", lambda d: (errors.append(f"dialog {d.message}"), d.dismiss()))
    page.goto("about:blank")                       # then a page opened on the link, not a hash change
    page.goto(memory_page.resolve().as_uri() + "#" + fragment)
    assert errors == []
    assert shown_setting(page) in all_settings()
    assert page.locator("#total").text_content() == fmt_bytes(setting_numbers(shown_setting(page))["total"])
    assert page.locator("img").count() == 0 and page.locator("script").count() == 2   # nothing injected
    key = fragment.split("=")[0]
    if key in memory.DEFAULT:                      # said, once, in the status line
        assert f"does not offer: {key} " in page.locator("#status").text_content()
    page.context.close()


def test_the_students_question_in_one_line(browser, memory_page: Path) -> None:
    """Llama 2 13B on 8 × 80 GB with ZeRO-3 on InfiniBand: the answer line says it, and only it is
    announced (the prose is what is tested here: it is what a screen reader reads)."""
    page, errors = offline_page(browser, memory_page)
    page.goto(memory_page.resolve().as_uri() + "#model=llama&world=8&stage=ZeRO-3&link=infiniband")
    page.reload()
    v = setting_numbers(shown_setting(page))
    assert v["fits"] == [False, True, True, True]
    assert page.locator("#answer").text_content() == (
        f"Each GPU holds {fmt_bytes(v['total'])} ({fmt_bytes(v['state'])} of training state + "
        f"{fmt_bytes(v['activations'])} of activations): fits a 40, 80 or 141 GB card, not a 24 GB one. "
        f"It sends {fmt_bytes(v['sent'])} per step, {fmt_time(v['seconds'])} on InfiniBand NDR "
        "(40 GB/s effective) (a model's price).")
    live = page.locator("[aria-live]").evaluate_all("els => els.map((e) => e.id)")
    assert live == ["answer", "status"]
    assert errors == []
    page.context.close()


def part2_ledger_column(stdout: str) -> list[str]:
    table = stdout.split("== Part 2")[1].split("note:")[0]
    return [re.split(r"\s{2,}", line.strip())[2] for line in table.splitlines()
            if line.strip().startswith(("DDP", "ZeRO-"))]


def test_the_command_line_prints_the_same_setting(browser, memory_page: Path) -> None:
    page, errors = offline_page(browser, memory_page)
    opening = page.locator("#command").text_content()
    assert opening == "python code/cs336/04_memory.py --params 13B --world-size 4 --layers 40"
    printed = run_script("cs336/04_memory.py", *opening.split()[2:]).stdout
    assert part2_ledger_column(printed) == [fmt_bytes(setting_numbers(dict(DEFAULT, stage=st))["state"])
                                            for st in lg.STAGES]
    for control, value in (("model", "gpt3"), ("world", 1024), ("tp", 8), ("pp", 8), ("batch", 96)):
        choose(page, control, value)
    split = page.locator("#command").text_content()
    s = shown_setting(page)
    printed = run_script("cs336/04_memory.py", *split.split()[2:]).stdout
    # Part 2 prints one TP × PP slice's ZeRO over the DP ranks; Part 3 the same 3D split
    assert part2_ledger_column(printed) == [fmt_bytes(setting_numbers(dict(s, stage=st))["state"])
                                            for st in lg.STAGES]
    state, zero1 = (setting_numbers(dict(s, stage=st))["state"] for st in ("DDP", "ZeRO-1"))
    # the lines a student reads, with the page's own numbers in them
    assert f"training state, 16 B each              {fmt_bytes(state)}" in printed
    assert f"with ZeRO-1 across the 16 DP replicas  {fmt_bytes(zero1)}" in printed
    assert errors == []
    page.context.close()


@pytest.mark.parametrize("width,height", [(390, 844), (768, 1024), (1366, 768)])
def test_the_page_at_three_widths(browser, memory_page: Path, width: int, height: int,
                                  tmp_path: Path) -> None:
    shots = Path(os.environ.get("PAGE_SCREENSHOTS") or tmp_path)      # to look at, as test_pages_screens
    page, errors = offline_page(browser, memory_page, width, height)
    fcp = page.evaluate("""() => new Promise((done) => {
        new PerformanceObserver((l) => done(l.getEntries()[0].startTime))
          .observe({type: 'paint', buffered: true});
        setTimeout(() => done(null), 3000); })""")
    assert fcp is not None and fcp <= 1000, f"first paint {fcp} ms"
    assert page.evaluate("document.documentElement.scrollWidth") <= width      # nothing scrolls sideways
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / f"memory-{width}.png"), full_page=False)
    for control in ("model", "world", "stage", "tp", "pp", "batch", "seq", "link", "reset"):
        box = page.locator(f"#{control}").bounding_box()
        assert box["height"] >= 24 and box["width"] >= 24, control
        assert page.locator(f"label[for={control}]").count() == (control != "reset"), control
    # the chart stays in view while the last control moves
    page.locator("#link").scroll_into_view_if_needed()
    choose(page, "link", "infiniband")
    chart, link = page.locator("#chart").bounding_box(), page.locator("#link").bounding_box()
    assert chart["y"] >= 0 and chart["y"] + chart["height"] <= height, chart
    assert link["y"] >= chart["y"] + chart["height"] - 1 and link["y"] + link["height"] <= height + 1
    page.screenshot(path=str(shots / f"memory-{width}-moved.png"), full_page=False)
    small = page.evaluate("""() => [...document.querySelectorAll('body *')].filter((e) =>
        e.childNodes.length && [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())
        && e.getBoundingClientRect().width > 0 && parseFloat(getComputedStyle(e).fontSize) < 12)
        .map((e) => e.tagName + ' ' + e.textContent.slice(0, 30))""")
    assert small == []
    assert page.locator("#answer").get_attribute("aria-live") == "polite"
    assert errors == []
    page.context.close()


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    proc = run_script("report/memory.py", str(tmp_path / "no" / "such" / "dir"), expect_rc=None)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_written_alone_it_is_the_page_reproduce_writes(memory_page: Path, tmp_path: Path) -> None:
    """`python code/report/memory.py OUT_DIR` (report/page_cli.page_main): a new folder made, the
    page written byte for byte as reproduce.py's, and one line saying where and how big."""
    out = tmp_path / "alone"
    proc = run_script("report/memory.py", str(out))
    written = out / "memory.html"
    assert written.read_bytes() == memory_page.read_bytes()
    assert proc.stdout.splitlines() == [f"wrote {written} ({written.stat().st_size / 1e3:.0f} kB)"]
    assert proc.stderr == ""
