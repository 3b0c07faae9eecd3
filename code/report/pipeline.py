"""report/pipeline.html: CS336 lecture 8's pipeline schedules to play with (流水线并行: bubble, 1F1B).

    python code/report/pipeline.py OUT_DIR   # writes OUT_DIR/pipeline.html (reproduce.py: write_pages)

Pick the schedule (GPipe, 1F1B, interleaved 1F1B with v chunks), the stages S, the micro-batches M,
t_f and t_b, and one slow stage; see every rank's passes, the step, the bubble beside the notes' own
formula, the activations each rank holds, and the smallest M for a bubble target. One self-contained
page (it fetches nothing). The page carries a port of cs336/pipeline.py (pipeline_model.js, the same
operations in the same order); tests/report/test_pipeline_model.py runs it on every setting the page
offers and compares it with the Python model. This module holds the page's settings, the notes'
figures (read from cs336/notes.toml) and the two computations the model has no function for, built
on its public ones: the activations a rank holds over time and the smallest M of a closed form.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import re
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from common import checker
from common.output_files import write_text
from common.script_end import run_main
from cs336 import pipeline as pp
from report.page_cli import page_main
from report.timeline import embedded_json

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_NAME = "pipeline.html"
SCRIPT_COMMAND = "python code/cs336/06_pipeline.py"

# What the page offers: a few values per control, so that a test can run every setting (the axes'
# product, less what interleaving refuses) against the Python model in seconds.
AXES = {
    "schedule": ["GPipe", "1F1B", "interleaved"],
    "virtual": [2, 4],                         # v, interleaved only (06's --virtual-stages is >= 2)
    "stages": [2, 4, 8],                       # S
    "micro_batches": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32],
    "tf_ms": [10, 20],
    "tb_ms": [10, 20, 40],                     # t_b = t_f and 2 t_f: the notes' two η columns
    "slow_factor": [1.5, 2, 3],                # the slow stage's times × this (06 Part 5's --slow-factor)
    "target_pct": [5, 10, 20],                 # bubble targets for the smallest M
}
# The notes' worked example (06_pipeline.py's defaults): S = 4, t_f = 10 ms, t_b = 20 ms, M = 8.
DEFAULT = {"schedule": "1F1B", "virtual": 2, "stages": 4, "micro_batches": 8, "tf_ms": 10, "tb_ms": 20,
           "slow": None, "slow_factor": 2, "target_pct": 5}
# (element id, label) of the sliders, each over its axis (M over the values the schedule allows)
SLIDERS = (("virtual", "chunks a rank, v"), ("stages", "stages S"), ("micro_batches", "micro-batches M"),
           ("tf_ms", "forward t_f a micro-batch"), ("tb_ms", "backward t_b a micro-batch"))
# (element id, label, whether it is one of the numbers the page is about)
# (the simulated ones say so: beside them stand a closed form, the notes' formula and their figures)
CARDS = (("step", "step (makespan), simulated", True),
         ("bubble", "bubble, simulated: idle share of S × step", True),
         ("notes-share", "the notes' formula: forward fill only", False),
         ("closed", "bubble by the closed form (equal stages)", False),
         ("eta", "efficiency η = 1 − bubble", False),
         ("idle", "idle, simulated: most on a rank", False), ("busy", "busy, most on a rank", False),
         ("peak", "peak activations held, in micro-batches: most on a rank", False),
         ("min-ours", "smallest M for the target", False),
         ("min-notes", "smallest M by the notes' formula", False))
TARGET_TOL = 1e-12          # "within" a target: float noise on its boundary counted in (as 06's FIVE_PERCENT)



def _settings(pattern: str) -> list[tuple[int, ...]]:
    """The settings of the notes' rows whose ids match `pattern` (its groups: S, M), in the table's
    order: the page shows a figure wherever the notes print one, and types none of their settings."""
    return [tuple(map(int, m.groups())) for row in checker.all_rows() if (m := re.fullmatch(pattern, row.id))]


# The notes' tables in cs336/notes.toml, by (S, M) (06's EFFICIENCY and BUBBLE) and by S (its 5 % rows).
ETA = _settings(r"CS-eta-S(\d+)-M(\d+)")
BUBBLE = _settings(r"CS-bubble-S(\d+)-M(\d+)-share")
FIVE_PCT = [s for (s,) in _settings(r"CS-five-pct-S(\d+)-real")]


def slow_stages(stages: int) -> list[int]:
    """The stages the page can slow: the first, the middle one S // 2 (06 Part 5's) and the last."""
    return sorted({0, stages // 2, stages - 1})


def valid(setting: dict[str, Any]) -> bool:
    """Whether the model runs this setting: interleaved 1F1B needs M a multiple of S (interleaved_order)."""
    return setting["schedule"] != "interleaved" or setting["micro_batches"] % setting["stages"] == 0


def stage_times(setting: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Each stage's t_f and t_b in seconds, the slow stage's × its factor (06 Part 5's way: tf · x)."""
    s, tf, tb = setting["stages"], setting["tf_ms"] / 1e3, setting["tb_ms"] / 1e3
    scale = [setting["slow_factor"] if d == setting["slow"] else 1.0 for d in range(s)]
    return [tf * x for x in scale], [tb * x for x in scale]


def run_setting(setting: dict[str, Any]) -> pp.PipelineRun:
    """The model's run of a page setting."""
    tfs, tbs = stage_times(setting)
    return pp.run_schedule(setting["schedule"], setting["stages"], setting["micro_batches"], tfs, tbs,
                           virtual=setting["virtual"])


def held_over_time(run: pp.PipelineRun, device: int) -> list[tuple[float, float]]:
    """(time, activations held from then on) at the end of each of `device`'s passes: a forward's
    output is kept from its end until its backward ends (PipelineRun.peak_activations' reading), in
    whole-stage micro-batches (a chunk counts 1/v). Its largest value is the run's peak."""
    held, out = 0, []
    for (kind, _, _), end in zip(run.orders[device], run.ends[device]):
        held += 1 if kind == pp.FORWARD else -1
        out.append((end, held / run.virtual))
    return out


def interleaved_share(stages: int, micro_batches: int, virtual: int) -> float:
    """Idle share of S × step for interleaved 1F1B with equal stages: 1 - M(t_f+t_b) / its closed-form
    makespan (pp.makespan_closed_form; t_f + t_b cancels, so 1 s each)."""
    return 1.0 - micro_batches * 2.0 / pp.makespan_closed_form(stages, micro_batches, 1.0, 1.0, virtual)


def smallest_m(setting: dict[str, Any], target_pct: float) -> dict[str, int]:
    """The smallest M whose bubble is within target_pct % of the step, equal stages: for the chosen
    schedule by its closed form (GPipe and 1F1B: (S-1)/(M+S-1); interleaved: M a multiple of S),
    and by the notes' formula with its forward-only fill (notes_bubble_share)."""
    s, share = setting["stages"], target_pct / 100 + TARGET_TOL
    tf, tb = setting["tf_ms"] / 1e3, setting["tb_ms"] / 1e3
    if setting["schedule"] == "interleaved":
        v = setting["virtual"]
        ours = s * pp.smallest_micro_batches(s, share, lambda k: interleaved_share(s, k * s, v))
    else:
        ours = pp.smallest_micro_batches(s, share, lambda m: pp.bubble_fraction_closed_form(s, m))
    notes = pp.smallest_micro_batches(s, share, lambda m: pp.notes_bubble_share(s, m, tf, tb))
    return {"ours": ours, "notes": notes}


# ---- the notes' figures, read from their table (never typed here) --------------------------------
def _row(row_id: str, shown_as: str) -> dict[str, Any]:
    """A row's figure as the notes print it (3.0 %, not 3 %) and, where it is an error of theirs, the
    erratum's title: the student reads why beside the two numbers, not only an id."""
    row = checker.row(row_id)
    figure = f"{row.notes_shown:.{row.places}f}" if row.places is not None else f"{row.notes_shown:g}"
    return {"row": row_id, "text": f"{figure} {row.unit}".strip(), "section": row.section,
            "erratum": row.erratum or "", "why": checker.erratum(row.erratum).title if row.erratum else "",
            "as": shown_as}


def notes_figures() -> list[dict[str, Any]]:
    """The notes' figures the page can set beside ours: each with the setting it belongs to (t_f =
    10 ms, t_b = 20 ms, equal stages, GPipe or 1F1B: the worked example) and the card it sits by."""
    out = []
    for s, m in ETA:
        out.append({"S": s, "M": m, "card": "eta", **_row(f"CS-eta-S{s}-M{m}", "η")})
    for s, m in BUBBLE:
        ids = f"CS-bubble-S{s}-M{m}"
        out += [{"S": s, "M": m, "card": "bubble", **_row(f"{ids}-share", "their share")},
                {"S": s, "M": m, "card": "notes-share", **_row(f"{ids}-notes-share", "their share")},
                {"S": s, "M": m, "card": "idle", **_row(f"{ids}-bubble", "their bubble, (S−1)·t_f")},
                {"S": s, "M": m, "card": "busy", **_row(f"{ids}-work", "their compute, M(t_f+t_b)")}]
    for s in FIVE_PCT:
        out += [{"S": s, "M": None, "card": "min-ours", **_row(f"CS-five-pct-S{s}-real", "their M")},
                {"S": s, "M": None, "card": "min-notes", **_row(f"CS-five-pct-S{s}-notes", "their M")}]
    return out


def page_data() -> dict[str, Any]:
    return {"axes": AXES, "default": DEFAULT, "target_tol": TARGET_TOL, "notes": notes_figures(),
            "command": SCRIPT_COMMAND}


def render_pipeline() -> str:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(("html", "html.j2")))
    return env.get_template("pipeline.html.j2").render(data_json=embedded_json(page_data()),
                                                       sliders=SLIDERS, cards=CARDS)


def write_pipeline(directory: Path) -> Path:
    """Write `directory`/pipeline.html, whole or not at all; return its path."""
    path = Path(directory) / PAGE_NAME
    write_text(str(path), render_pipeline())
    return path


def main() -> None:
    page_main(__doc__, PAGE_NAME, write_pipeline)


if __name__ == "__main__":
    run_main(main)
