"""report/memory.html's numbers (code/report/memory.py): the page's JS model against the Python one
for every setting it offers, failing when either moves (mutations of the JS, of the Python model and
of what the page writes into the DOM), and the controls offering exactly the enumerated settings.
The page itself (opening state, controls, URL, widths, command line): test_memory_page.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import offline_page, open_mutated

from common.costmodel import steps as costmodel_steps
from common.units import fmt_bytes, fmt_time
from cs336 import ledger as lg
from report import memory
from report.memory import all_settings, setting_numbers

NUMBERS = ("params", "grads", "master", "adam", "state", "activations", "total", "sent", "seconds")


BYTES = ("params", "grads", "master", "adam", "state", "activations", "total", "sent")


def written(v: dict) -> list[str | None]:
    """The model's numbers as the terminal writes them (common/units.py): the page must show these."""
    return [*(None if v[k] is None else fmt_bytes(v[k]) for k in BYTES), fmt_time(v["seconds"]),
            *(x for r in v["traffic"] for x in (fmt_bytes(r["bytes"]), fmt_time(r["seconds"])))]


def page_numbers(page, start: int, stop: int) -> tuple[int, list]:  # type: ignore[no-untyped-def]
    """How many settings the page offers, and for those from `start` to `stop` (its order) the
    setting, its JS model's numbers and the digits the page writes for them."""
    # one JSON string: Playwright's own serialisation of 15,000 objects takes 40 s here, this 1 s
    return json.loads(page.evaluate("""([start, stop]) => { const all = allSettings();
        return JSON.stringify([all.length, all.slice(start, stop).map((s) => {
        const v = compute(s);
        return [s, v, [...%s.map((k) => v[k] === null ? null : fmtBytes(v[k])), fmtTime(v.seconds),
                       ...v.traffic.flatMap((r) => [fmtBytes(r.bytes), fmtTime(r.seconds)])]];
        })]); }""" % json.dumps(BYTES), [start, stop]))


def setting_differences(s: dict, got: dict, shown: list) -> list[str]:
    """What of one setting's JS numbers (and the digits shown) differs from setting_numbers'."""
    want = setting_numbers(s)
    bad = [k for k in NUMBERS if (got[k] is None) != (want[k] is None)
           or (want[k] is not None and not math.isclose(got[k], want[k], rel_tol=1e-9))]
    bad += ["fits"] if got["fits"] != want["fits"] else []
    rows = [(r["axis"], r["kind"], r["calls"]) for r in got["traffic"]]
    wanted = [(r["axis"], r["kind"], r["calls"]) for r in want["traffic"]]
    bad += ["traffic rows"] if rows != wanted else []
    bad += [f"{r['axis']} {r['kind']} {k}" for r, w in zip(got["traffic"], want["traffic"])
            for k in ("bytes", "seconds") if not math.isclose(r[k], w[k], rel_tol=1e-9)]
    return bad + (["the digits shown"] if shown != written(want) else [])


def differences(page, first: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """Every setting the page offers, its JS model against setting_numbers: what differs (with
    `first`, only the first setting that does, read 1,000 settings at a time: a mutation's test
    stops at the first block that shows it)."""
    py = all_settings()
    step = 1000 if first else len(py)
    out = []
    for start in range(0, len(py), step):
        count, js = page_numbers(page, start, start + step)
        if count != len(py) or [s for s, _, _ in js] != py[start:start + step]:
            return ["the page offers other settings than all_settings()"]
        for s, got, shown in js:
            bad = setting_differences(s, got, shown)
            if bad:
                out.append(f"{s}: {', '.join(bad)}")
                if first:
                    return out
    return out


def test_every_setting_equals_the_python_model(browser, memory_page: Path) -> None:
    page, errors = offline_page(browser, memory_page)
    assert len(all_settings()) > 10_000          # every model, GPUs, stage, TP, PP, b, s and link
    assert differences(page) == []
    assert errors == []
    page.context.close()


# Each mutation breaks one thing the JS model computes; the enumeration must notice every one.
# (text in the page, what it becomes): the ring's rounds, ZeRO over all GPUs instead of the DP
# ranks, a stage's layers rounded down, an end stage of the pipeline sending both ways.
MUTATIONS = [('"all-reduce": (k) => 2 * (k - 1)', '"all-reduce": (k) => 2 * k - 1'),
             ("b * local / dp : b * local", "b * local / s.world : b * local"),
             ("stageLayers = model.layers ? Math.ceil(", "stageLayers = model.layers ? Math.floor("),
             ("const ways = s.pp > 2 ? 2 : 1", "const ways = 2"),
             # the digits: toPrecision rounds 406.25 MB up where Python's 4 digits round it to even
             ("return String(Math.sign(x) * Number(",
              "return String(Number(x.toPrecision(digits))); (Number(")]


@pytest.mark.parametrize("before,after", MUTATIONS)
def test_the_enumeration_fails_when_the_page_parts_from_the_model(browser, memory_page: Path, tmp_path: Path,
                                                                   before: str, after: str) -> None:
    page, _ = open_mutated(browser, memory_page, tmp_path, before, after)
    assert differences(page, first=True) != []
    page.context.close()


REAL_ACT, REAL_ZERO = lg.activation_bytes, costmodel_steps.zero_step_collectives


def _notes_text_zero1(stage: str, nbytes: float, layers: int = 1):  # type: ignore[no-untyped-def]
    """The notes' text's ZeRO-1 (DDP's all-reduce kept): the page prices the paper's."""
    if stage == "ZeRO-1":
        return REAL_ZERO("DDP", nbytes) + REAL_ZERO("ZeRO-1", nbytes)[1:]
    return REAL_ZERO(stage, nbytes, layers)


# The same on Python's side: setting_numbers moved while the page's JS stays.
PY_MUTATIONS = {"activations twice": ("lg", "activation_bytes", lambda *a, **k: 2 * REAL_ACT(*a, **k)),
                "the notes' text's ZeRO-1": ("memory", "zero_step_collectives", _notes_text_zero1)}


@pytest.mark.parametrize("name", PY_MUTATIONS)
def test_the_enumeration_fails_when_the_python_model_moves(browser, memory_page: Path, monkeypatch,
                                                           name: str) -> None:
    where, attr, fake = PY_MUTATIONS[name]
    monkeypatch.setattr(lg if where == "lg" else memory, attr, fake)
    page, _ = offline_page(browser, memory_page)
    assert differences(page, first=True) != []
    page.context.close()


def shown_in_the_dom(page, settings: list[dict]) -> list[dict]:  # type: ignore[no-untyped-def]
    """What the page's cards, card checks and traffic table say after each setting is set."""
    return json.loads(page.evaluate("""(settings) => JSON.stringify(settings.map((s) => {
        setState(s); update("test");
        const text = (sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent);
        return {cards: text(".card .value"), fits: text("#fits span"),
                rows: [...$("traffic").tBodies[0].rows].map((r) => [...r.cells].map((c) => c.textContent))};
        }))""", settings))


def dom_differences(page, settings: list[dict]) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for s, got in zip(settings, shown_in_the_dom(page, settings)):
        v = setting_numbers(s)
        cards = [fmt_bytes(v[k]) if v[k] is not None else "not modelled"
                 for k in ("params", "grads", "master", "adam", "activations", "state", "total")]
        rows = [[r["axis"], r["kind"], r["what"], str(r["calls"]), fmt_bytes(r["bytes"]),
                 fmt_time(r["seconds"])] for r in v["traffic"]]
        rows.append(["all", "", "one after another", str(sum(r["calls"] for r in v["traffic"])),
                     fmt_bytes(v["sent"]), fmt_time(v["seconds"])])
        fits = [f"{gb} GB card: {'fits' if f else 'does not fit'}"
                for gb, f in zip(memory.CARDS_GB, v["fits"])]
        if got["cards"] != cards or got["rows"] != rows or [f.split(" — ")[0] for f in got["fits"]] != fits:
            out.append(f"{s}: {got} is not {cards}, {rows}, {fits}")
    return out


# One setting in 23 (every model, stage and link among them): the DOM says what setting_numbers says.
SAMPLE = all_settings()[::23]
# Each breaks what the page writes, not what it computes: two cards' numbers swapped, the total's
# time in every traffic row.
DOM_MUTATIONS = [("$(id).textContent = fmtBytes(v[id]);",
                  '$(id).textContent = fmtBytes(v[{grads: "params", params: "grads"}[id] ?? id]);'),
                 ("fmtBytes(r.bytes), fmtTime(r.seconds)]", "fmtBytes(r.bytes), fmtTime(v.seconds)]")]


def test_the_page_shows_what_the_model_says(browser, memory_page: Path) -> None:
    assert {s["model"] for s in SAMPLE} == set(memory.BY_KEY) and len(SAMPLE) > 600
    page, errors = offline_page(browser, memory_page)
    assert dom_differences(page, SAMPLE) == []
    assert errors == []
    page.context.close()


@pytest.mark.parametrize("before,after", DOM_MUTATIONS)
def test_the_dom_check_fails_when_the_page_writes_another_number(browser, memory_page: Path, tmp_path: Path,
                                                                 before: str, after: str) -> None:
    page, _ = open_mutated(browser, memory_page, tmp_path, before, after)
    # a part of SAMPLE (every model, every stage): a difference there is one in the whole check
    assert dom_differences(page, SAMPLE[::8]) != []
    page.context.close()


# What the selects offer, read from the DOM (not from allSettings) after each model and GPU count is
# chosen as a user chooses them (the value set, then the input and change events select_option fires),
# in one call: a round trip per choice took 5 s.
_READ_CONTROLS = """(models) => {
    const choose = (id, value) => { $(id).value = String(value);
        for (const kind of ["input", "change"]) $(id).dispatchEvent(new Event(kind, {bubbles: true})); };
    const values = (id) => [...$(id).options].map((o) => o.value);
    const enabled = (id) => [...$(id).options].filter((o) => !o.disabled).map((o) => Number(o.value));
    return models.map((key) => {
        choose("model", key);
        const opts = Object.fromEntries(["world", "stage", "tp", "pp", "batch", "seq", "link"]
            .map((id) => [id, values(id)]));
        // TP and PP at 1 first, then the GPUs: what is greyed must follow the GPU count's own change
        const byWorld = opts.world.map((w) => {
            choose("tp", 1); choose("pp", 1); choose("world", w);
            return {tp: enabled("tp"), pp: enabled("pp")};
        });
        return {key, opts, byWorld};
    });
}"""


def offered_by_the_controls(page) -> list[dict]:  # type: ignore[no-untyped-def]
    """Every setting the selects offer, combined by the test's own rule: TP × PP divide the GPUs,
    PP ≤ layers, no TP or PP for a bare count; asserts the options the rule forbids are greyed out."""
    offered = []
    for read in page.evaluate(_READ_CONTROLS, list(memory.BY_KEY)):
        key, opts, model = read["key"], read["opts"], memory.BY_KEY[read["key"]]
        num = {k: [int(x) for x in opts[k]] for k in ("world", "tp", "pp")}
        shapes = ([(int(b), int(q)) for b in opts["batch"] for q in opts["seq"]] if model["layers"]
                  else [(None, None)])
        assert opts["batch"] == (["-"] if not model["layers"] else opts["batch"])
        for w, enabled in zip(num["world"], read["byWorld"]):
            for control in ("tp", "pp"):
                assert enabled[control] == [d for d in num[control] if ok(model, w, d, 1)], (key, w, control)
        offered += [{"model": key, "world": w, "stage": z, "tp": t, "pp": q, "batch": b, "seq": sq, "link": k}
                    for w in num["world"] for z in opts["stage"] for t in num["tp"] for q in num["pp"]
                    if ok(model, w, t, q) for b, sq in shapes for k in opts["link"]]
    return offered


def test_the_controls_offer_exactly_the_enumerated_settings(browser, memory_page: Path, monkeypatch) -> None:
    page, errors = offline_page(browser, memory_page)
    offered = offered_by_the_controls(page)
    assert offered == all_settings()
    assert errors == []
    page.context.close()
    # an enumeration that leaves out a world size the page offers: seen
    monkeypatch.setattr(memory, "WORLD_SIZES", memory.WORLD_SIZES[:-1])
    assert offered != all_settings()


# Each breaks the controls, not the model: nothing greyed out; a GPU count's change not handled (the
# options stay greyed for the count before).
CONTROL_MUTATIONS = [("o.disabled = !valid(", "o.disabled = false && !valid("),
                     ('for (const id of CONTROLS) $(id).addEventListener("change"',
                      'for (const id of CONTROLS) if (id !== "world") $(id).addEventListener("change"')]


@pytest.mark.parametrize("before,after", CONTROL_MUTATIONS)
def test_the_controls_check_fails_when_the_controls_break(browser, memory_page: Path, tmp_path: Path,
                                                          before: str, after: str) -> None:
    """The in-page reading sees the page's own greying and its handling of each choice: with either
    broken, the check above fails. (That the model's change reaches the page's handler is shown by
    the check passing at all: a bare count's options differ from a shaped model's.)"""
    page, _ = open_mutated(browser, memory_page, tmp_path, before, after)
    with pytest.raises(AssertionError):
        offered_by_the_controls(page)
    page.context.close()


def ok(model: dict, world: int, tp: int, pp: int) -> bool:
    if not model["layers"]:
        return tp == pp == 1
    return world % (tp * pp) == 0 and pp <= model["layers"]
