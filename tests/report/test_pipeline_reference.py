"""report/pipeline.html against references of its own: what the page SHOWS (its cards, rank table and
chart labels, not its compute function) equals an event simulation written here in exact fractions
(not cs336/pipeline.py, not the page's port) and the closed forms; the smallest M equals a search in
fractions; every figure the page cites by row id equals what 06_pipeline.py --json records for that
row; the controls offer exactly the settings the enumeration test runs; a link with values the page
does not offer, or with markup in them, opens a sane page that says what it left out.
"""

from __future__ import annotations

import json
from fractions import Fraction as Fr
from pathlib import Path

import pytest
from conftest import offline_page, run_script
from pipeline_texts import held_text, ms_text, pct_text, step_text

from common import checker
from common.units import fmt_num
from report.pipeline import AXES, TARGET_TOL, notes_figures, slow_stages, smallest_m, valid, write_pipeline


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pipeline(tmp_path_factory.mktemp("report"))


# ---- the reference: each pass starts when its rank is free and its inputs are there ---------------
def orders(schedule: str, stages: int, micro: int) -> list[list[tuple[str, int]]]:
    """Each rank's passes: GPipe all forwards then all backwards; 1F1B S-d-1 warm-up forwards, then
    a forward and a backward in turn, then the backwards left."""
    out = []
    for d in range(stages):
        if schedule == "GPipe":
            out.append([("F", m) for m in range(micro)] + [("B", m) for m in range(micro)])
            continue
        warm = min(stages - d - 1, micro)
        order = [("F", m) for m in range(warm)]
        for i in range(micro - warm):
            order += [("F", warm + i), ("B", i)]
        out.append(order + [("B", m) for m in range(micro - warm, micro)])
    return out


def simulate(schedule: str, tf: list[Fr], tb: list[Fr], micro: int) -> dict:
    """Times in ms, exact: sweep the ranks, running each next pass whose inputs have ended."""
    stages, ends, free = len(tf), {}, [Fr(0)] * len(tf)
    todo = orders(schedule, stages, micro)
    while any(todo):
        moved = False
        for d in range(stages):
            while todo[d]:
                kind, m = todo[d][0]
                needs = ([("F", m, d - 1)] if d else []) if kind == "F" else \
                    [("F", m, d)] + ([("B", m, d + 1)] if d < stages - 1 else [])
                if any(n not in ends for n in needs):
                    break
                start = max([free[d]] + [ends[n] for n in needs])
                free[d] = ends[(kind, m, d)] = start + (tf[d] if kind == "F" else tb[d])
                todo[d].pop(0)
                moved = True
        assert moved, "the reference deadlocked"
    step = max(free)
    busy = [micro * (f + b) for f, b in zip(tf, tb)]
    peaks = [micro if schedule == "GPipe" else min(stages - d, micro) for d in range(stages)]
    return {"step": step, "bubble": 1 - sum(busy) / (stages * step), "busy": busy,
            "idle": [step - b for b in busy], "peak": peaks}


def interleaved(stages: int, micro: int, v: int, tf: Fr, tb: Fr) -> dict:
    """Equal stages: the closed form (M + (S-1)/v)(t_f+t_b); the peak from Megatron-LM's warm-up count
    (S-d-1)·2 + (v-1)·S chunk forwards, one more in the steady state (every forward first at M = S)."""
    step = (micro + Fr(stages - 1, v)) * (tf + tb)
    busy = micro * (tf + tb)
    held = [micro * v if micro == stages else min((stages - d - 1) * 2 + (v - 1) * stages + 1, micro * v)
            for d in range(stages)]
    return {"step": step, "bubble": 1 - busy / step, "busy": [busy] * stages, "idle": [step - busy] * stages,
            "peak": [Fr(h, v) for h in held]}


# schedule, v, S, M, t_f, t_b, slow stage, its factor: odd M, M < S, a slow first/middle/last stage,
# t_b < t_f, v = 4, M = S (interleaving's every-forward-first order)
SETTINGS = [("GPipe", 2, 4, 8, 10, 20, None, 2), ("1F1B", 2, 8, 3, 10, 20, None, 2),
            ("1F1B", 2, 8, 32, 20, 40, None, 2), ("GPipe", 2, 2, 1, 10, 10, None, 2),
            ("1F1B", 2, 4, 6, 10, 20, 2, 3), ("GPipe", 2, 8, 12, 20, 10, 0, 1.5),
            ("1F1B", 2, 8, 24, 10, 40, 7, 2), ("1F1B", 2, 4, 3, 20, 40, 3, 1.5),
            ("interleaved", 4, 8, 32, 10, 20, None, 2), ("interleaved", 2, 4, 12, 20, 20, None, 2),
            ("interleaved", 4, 2, 2, 10, 40, None, 2)]


def show(page, hash_: str) -> None:  # type: ignore[no-untyped-def]
    """Open a setting as a link would (the page's own hashchange handler, run now)."""
    page.evaluate("h => { history.replaceState(null, '', h); "
                  "dispatchEvent(new HashChangeEvent('hashchange')); }", hash_)


def test_what_the_page_shows_equals_an_exact_simulation_of_its_own(browser, page_file: Path) -> None:
    page, errors = offline_page(browser, page_file)
    for schedule, v, s, m, tf, tb, slow, x in SETTINGS:
        slow_key = "none" if slow is None else slow
        show(page, f"#schedule={schedule}&v={v}&S={s}&M={m}&tf={tf}&tb={tb}&slow={slow_key}&x={x}")
        scale = [Fr(str(x)) if d == slow else 1 for d in range(s)]
        want = (interleaved(s, m, v, Fr(tf), Fr(tb)) if schedule == "interleaved" else
                simulate(schedule, [Fr(tf) * k for k in scale], [Fr(tb) * k for k in scale], m))
        shown = page.evaluate("""() => ({cards: ['step', 'bubble', 'closed', 'eta', 'idle', 'busy', 'peak']
            .map((id) => document.getElementById(id).textContent),
            ranks: [...document.querySelectorAll('#ranks tbody tr')]
              .map((r) => [...r.cells].map((c) => c.textContent)),
            chart: [...document.querySelectorAll('#chart text')].map((t) => t.textContent)
              .filter((t) => /^(idle|peak) /.test(t))})""")
        closed = Fr(s - 1, m + s - 1) if schedule != "interleaved" else want["bubble"]
        # the exact value as the nearest float, written as Python writes it (pipeline_texts: 06's digits)
        setting, sec = {"schedule": schedule, "slow": slow}, lambda t_ms: float(t_ms / 1000)  # noqa: E731
        assert shown["cards"] == [
            step_text(setting, sec(want["step"])), pct_text(float(want["bubble"]), setting),
            pct_text(float(closed), setting) if slow is None else "—", pct_text(float(1 - want["bubble"])),
            ms_text(sec(max(want["idle"]))) + " ms", ms_text(sec(max(want["busy"]))) + " ms",
            held_text(float(max(want["peak"])))], (schedule, s, m, slow)
        rows = [[f"rank {d}", ms_text(sec(b)), ms_text(sec(i)), held_text(float(p))]
                for d, (b, i, p) in enumerate(zip(want["busy"], want["idle"], want["peak"]))]
        assert shown["ranks"] == rows, (schedule, s, m, slow)
        labels = [(f"idle {idle} ms", f"peak {peak}") for _, _, idle, peak in rows]
        assert shown["chart"] == [text for pair in labels for text in pair]
    assert errors == []
    page.context.close()


def test_the_smallest_m_equals_a_search_in_fractions() -> None:
    """report/pipeline.py's smallest_m (which the page's port equals) against the first M, counted up,
    whose exact share is within the target: (S-1)/(M+S-1); interleaved (S-1)/(vM+S-1), M a multiple
    of S; the notes' (S-1)t_f / (M(t_f+t_b) + (S-1)t_f)."""
    def first(target: Fr, fill: int, per_m: int, every: int = 1) -> int:
        """The first M (a multiple of `every`) with fill / (M·per_m + fill) <= target."""
        return next(m for m in range(every, 10_000, every) if Fr(fill, m * per_m + fill) <= target)

    for s in AXES["stages"]:
        for pct in AXES["target_pct"]:
            p = Fr(pct, 100)
            for tf in AXES["tf_ms"]:
                for tb in AXES["tb_ms"]:
                    notes = first(p, (s - 1) * tf, tf + tb)
                    for schedule, v in (("GPipe", 2), ("1F1B", 2), ("interleaved", 2), ("interleaved", 4)):
                        setting = {"schedule": schedule, "stages": s, "tf_ms": tf, "tb_ms": tb, "virtual": v}
                        ours = first(p, s - 1, v, s) if schedule == "interleaved" else first(p, s - 1, 1)
                        assert smallest_m(setting, pct) == {"ours": ours, "notes": notes}, setting
    assert TARGET_TOL < 1e-9     # (a tolerance for float noise, not a looser target)


# ---- the notes' figures: as 06_pipeline.py records the same rows --------------------------------
# the card a cited row sits by, and how the page writes 06's value of that row ("ours")
# (06's digits: Part 1's .2f for the bubble at these settings, GPipe and 1F1B; its tables' fmt_num)
AS_SHOWN = {"bubble": lambda x: f"{x:.2f} %", "notes-share": lambda x: f"{fmt_num(x)} %",
            "eta": lambda x: f"{fmt_num(x)} %", "idle": lambda x: f"{fmt_num(x)} ms",
            "busy": lambda x: f"{fmt_num(x)} ms",
            "min-ours": lambda x: f"M = {x}", "min-notes": lambda x: f"M = {x}"}


def test_every_figure_cited_is_the_notes_and_ours_is_what_06_records(browser, page_file: Path,
                                                                      tmp_path: Path) -> None:
    """Each notes' figure the page prints with a row id: the notes' value as their table prints it
    (places kept), the erratum's title where the row is an error of theirs, and our number on the
    same card equal to 06_pipeline.py's recorded value for that row (at the notes' setting)."""
    run_script("cs336/06_pipeline.py", "--json", str(tmp_path / "06.json"))
    ours = {c["ref"]: c["ours"] for c in json.loads((tmp_path / "06.json").read_text())["claims"]}
    page, errors = offline_page(browser, page_file)
    cited = notes_figures()
    assert len(cited) == 4 + 6 * 4 + 2 * 2
    for figure in cited:
        row = checker.row(figure["row"])
        m = figure["M"] or 8
        target = "&target=5" if figure["M"] is None else ""
        show(page, f"#schedule=1F1B&S={figure['S']}&M={m}&tf=10&tb=20&slow=none{target}")
        card, beside = (page.inner_text(f"#{figure['card']}{end}") for end in ("", "-notes"))
        notes = f"{row.notes_shown:.{row.places}f}" if row.places is not None else f"{row.notes_shown:g}"
        assert beside.startswith(f"the notes: {notes} {row.unit}".replace("  ", " ").strip()), figure
        assert figure["row"] in beside
        said = f"Error in the notes: {checker.erratum(row.erratum).title}" if row.erratum else "Error in"
        assert (said in beside) == bool(row.erratum), figure
        assert card == AS_SHOWN[figure["card"]](ours[figure["row"]]), (figure["row"], card)
    assert errors == []
    page.context.close()


# ---- what the controls offer is what the enumeration runs ------------------------------------------
def test_the_controls_offer_exactly_the_enumerated_settings(browser, page_file: Path) -> None:
    """Walk the controls (not the page's lists): each schedule and S, every slider position and list
    option, read back from what the page then says; the values met are the axes', less interleaving's
    refusals, and the slow stages slow_stages' (the enumeration test runs exactly those)."""
    page, errors = offline_page(browser, page_file)
    for schedule in AXES["schedule"]:
        for s in AXES["stages"]:
            show(page, f"#schedule={schedule}&S={s}&slow=none")
            met = page.evaluate("""() => {
              const seen = {}, fire = (e) => e.dispatchEvent(new Event('input', {bubbles: true}));
              for (const id of ['micro_batches', 'virtual', 'tf_ms', 'tb_ms']) {
                const e = document.getElementById(id), out = [];
                for (let i = 0; i <= Number(e.max); i++) {
                  e.value = i; fire(e); out.push(document.getElementById(id + '-out').textContent);
                }
                e.value = 0; fire(e); seen[id] = out;
              }
              seen.slow = [...document.getElementById('slow').options].map((o) => o.value);
              seen.target = [...document.getElementById('target').options].map((o) => o.value);
              const slow = document.getElementById('slow'); slow.value = seen.slow[1]; fire(slow);
              const x = document.getElementById('slow_factor'), xs = [];
              for (let i = 0; i <= Number(x.max); i++) {
                x.value = i; fire(x); xs.push(x.getAttribute('aria-valuetext'));
              }
              seen.slow_factor = xs;
              return seen; }""")
            ms = [m for m in AXES["micro_batches"]
                  if valid({"schedule": schedule, "stages": s, "micro_batches": m})]
            assert met["micro_batches"] == [f"M = {m}" for m in ms]
            assert met["virtual"] == [f"v = {v}" for v in AXES["virtual"]]
            for axis in ("tf_ms", "tb_ms"):
                assert met[axis] == [f"{t} ms" for t in AXES[axis]]
            assert met["slow"] == ["none", *map(str, slow_stages(s))]
            assert met["target"] == [str(p) for p in AXES["target_pct"]]
            assert met["slow_factor"] == [f"{x} times slower" for x in AXES["slow_factor"]]
    assert page.eval_on_selector_all("#schedule option", "os => os.map(o => o.value)") == AXES["schedule"]
    assert errors == []
    page.context.close()


# ---- links the page did not write ------------------------------------------------------------------
HOSTILE = ["#S=3", "#M=0", "#schedule=<img src=x onerror=alert(1)>",
           "#schedule=%3Cscript%3Ealert(1)%3C/script%3E",
           "#S=99999999999999999999&M=1e308&tf=-1&tb=NaN&x=Infinity&target=1e-9&v=0", "#slow=99",
           "#slow=constructor&schedule=__proto__&S=toString", "#S=%E0%A4%A", "#" + "A" * 50_000]


def open_link(browser, page_file: Path, hash_: str, width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """(page, errors, dialogs): a fresh offline page opened at the link (not loaded first without it:
    the page would rewrite its address before the link's values reached it)."""
    context = browser.new_context(offline=True, viewport={"width": width, "height": height})
    page, errors, dialogs = context.new_page(), [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(page_file.resolve().as_uri() + hash_)
    page.wait_for_load_state("load")
    return page, errors, dialogs


@pytest.mark.parametrize("hash_", HOSTILE, ids=range(len(HOSTILE)))
def test_a_link_with_values_not_offered_opens_the_notes_example_and_says_so(browser, page_file: Path,
                                                                           hash_: str) -> None:
    page, errors, dialogs = open_link(browser, page_file, hash_, 390, 844)
    assert page.inner_text("#setting").startswith("1F1B · S = 4 · M = 8 · t_f = 10 ms")
    assert page.inner_text("#step") == "330 ms"
    said = page.inner_text("#why-not")
    # the page's words on a setting it does not offer
    assert ("not a value this page offers" in said) == (len(hash_) < 1000) and len(said) < 400
    # nothing of the link became markup: no image, no element inside the message, the page's one script
    assert page.evaluate("document.querySelectorAll('img, #why-not *, script:not([type])').length") == 1
    assert dialogs == [] and errors == []
    assert "S=4" in page.url and "<" not in page.url
    page.context.close()


def test_a_link_moved_to_the_m_interleaving_allows_says_why(browser, page_file: Path) -> None:
    page, errors, _ = open_link(browser, page_file, "#schedule=interleaved&S=4&M=6&v=4")
    assert "M = 8 ·" in page.inner_text("#setting") and "M = 6 moved to 8" in page.inner_text("#why-not")
    assert errors == []
    page.context.close()


def test_one_sentence_is_announced_when_the_setting_rests(browser, page_file: Path) -> None:
    """The cards are not a live region (each step would read them all); one polite sentence is, set
    after the last of several quick moves."""
    page, errors = offline_page(browser, page_file)
    assert page.locator("[aria-live]").evaluate_all("es => es.map(e => e.id)") == ["announce"]
    page.focus("#micro_batches")
    for _ in range(3):
        page.keyboard.press("ArrowRight")          # M = 12, 16, 24
    page.wait_for_function("document.getElementById('announce').textContent.includes('M = 24')")
    said = page.inner_text("#announce")
    assert "M = 12" not in said and f"step {page.inner_text('#step')}" in said
    assert f"bubble {page.inner_text('#bubble')}" in said
    assert errors == []
    page.context.close()
