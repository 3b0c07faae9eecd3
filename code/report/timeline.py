"""report/timeline.html: the handbook's DDP timeline to play with (通信与反向重叠; Lecture 15 §3).

    python code/report/timeline.py OUT_DIR   # writes OUT_DIR/timeline.html (reproduce.py: write_timeline)

Sliders for the model (ResNet-50, BERT-large, a uniform stack of N layers), bucket cap, α, β and K.
One self-contained page (data, script and style inline; it fetches nothing): sliders pick a point
of lecture15.timeline_grid's precomputed grid and the page draws that point's two-stream timeline.
The page computes no model: every time it shows was computed by lecture15.ddp_sim in Python.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import json
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from common import checker
from common.cli import OneLineParser, run_main
from common.files import check_output_dir, make_output_dir, write_text
from lecture15 import timeline_grid
from lecture15.ddp_sim import ComputeModel

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_NAME = "timeline.html"
SCRIPT_COMMAND = "python code/lecture15/03_overlap.py"


def embedded_json(data: Any) -> str:
    """JSON safe inside a <script> element: no '</script>' or '<!--' can end or bend it."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


SLIDERS = (("layers", "layers N (uniform stack)"), ("cap", "bucket cap"), ("beta", "bandwidth β"),
           ("alpha", "latency α"), ("k", "world size K"))
# (element id, label, whether it is one of the two numbers the page is about)
CARDS = (("step-on", "step with overlap (DDP)", True), ("step-off", "step without overlap", False),
         ("exposed", "exposed communication", True), ("faster", "overlap faster by", False),
         ("buckets", "buckets", False), ("comm", "all-reduce, all buckets", False),
         ("backward", "backward", False), ("first", "first all-reduce starts", False))
# The notes' figures for the page's opening setting (lecture 15 §3, 03_overlap.py Part 1), shown beside
# the cards while the setting is theirs: (card, row of lecture15/notes.toml).
NOTES_CARDS = (("step-on", "L15-3.2-step-no-first-cap"), ("step-off", "L15-3.1-step-no-overlap"),
               ("faster", "L15-3.1-faster"), ("first", "L15-3.2-first-comm-start"))


def notes_cards() -> list[dict[str, str]]:
    """Each card's notes' figure at the opening setting, read from the notes' table (never typed here)."""
    out = []
    for card, row_id in NOTES_CARDS:
        row = checker.row(row_id)
        out.append({"card": card, "row": row_id, "section": row.section, "statement": row.statement,
                    "text": f"{row.notes_shown:g} {row.unit}".strip()})
    return out


def render_timeline(grid: dict[str, Any] | None = None) -> str:
    """The page's HTML for `grid` (default: timeline_grid.build_grid())."""
    grid = dict(grid if grid is not None else timeline_grid.build_grid(), notes=notes_cards())
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(("html", "html.j2")))
    compute = ComputeModel()
    return env.get_template("timeline.html.j2").render(
        grid_json=embedded_json(grid), command=SCRIPT_COMMAND, sliders=SLIDERS, cards=CARDS,
        flops_tps=f"{compute.flops_per_s / 1e12:g}",
        backward_over_forward=f"{compute.backward_over_forward:g}",
        uniform_width=timeline_grid.UNIFORM_WIDTH, uniform_tokens=timeline_grid.UNIFORM_TOKENS)


def write_timeline(directory: Path, html: str | None = None) -> Path:
    """Write `directory`/timeline.html (`html`, default render_timeline()'s), whole or not at all;
    return its path."""
    path = Path(directory) / PAGE_NAME
    write_text(str(path), render_timeline() if html is None else html)
    return path


def main() -> None:
    parser = OneLineParser(description=__doc__)
    parser.add_argument("out_dir", help="folder to write timeline.html into (created if its parent exists)")
    args = parser.parse_args()
    check_output_dir(args.out_dir, "OUT_DIR")
    make_output_dir(args.out_dir)
    path = write_timeline(Path(args.out_dir))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    run_main(main)
