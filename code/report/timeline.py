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
import re
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from common import checker
from common.output_files import write_text
from common.script_end import run_main
from lecture15 import timeline_grid
from lecture15.ddp_sim import ComputeModel
from report.page_cli import page_main

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


# ---- the grid as the page carries it: every number once --------------------------------------------
# timeline_grid.build_grid() repeats itself: a bucket's all-reduce time depends only on its bytes and
# the link and K (the same 118 sizes recur across 84 model-and-cap pairs); the gaps between buckets
# are nearly all 0 or ±1 (the rounding of start and duration); each printed text is, but for rare
# roundings, its stored integer written out; and every point repeats its key names. encode_grid
# keeps each number once; decode_grid (and timeline.js's decodeGrid, the same steps) gives back the
# grid exactly, and encode_grid checks that it does before the page is written.
SMALL = {-1: "n", 0: "o", 1: "p"}
SMALL_BACK = {v: k for k, v in SMALL.items()}
POINT_KEYS = ("on", "off", "exposed", "comm")


def pack_ints(values: list[int]) -> str:
    """[10737, 0, -1, 1, 42950, 7, 0, 0, 0] -> "10737onp42950,7B": -1, 0, 1 as one letter each, and a
    run of 2 to 27 zeros as one capital (A = 2 zeros, B = 3, …)."""
    out, number_before = [], False
    for v in values:
        if v in SMALL:
            out.append(SMALL[v])
            number_before = False
        else:
            out.append(("," if number_before else "") + str(v))
            number_before = True
    return re.sub(r"o{2,27}", lambda run: chr(ord("A") + len(run.group()) - 2), "".join(out))


def unpack_ints(text: str) -> list[int]:
    out: list[int] = []
    for t in re.findall(r"-?\d+|[nopA-Z]", text):
        if t.isalpha() and t.isupper():
            out.extend([0] * (ord(t) - ord("A") + 2))
        else:
            out.append(SMALL_BACK[t] if t in SMALL_BACK else int(t))
    return out


def fixed(units: int, per: int, decimals: int) -> str:
    """units / per to `decimals` places, halves up, in integers only (timeline.js's fixed())."""
    q = str((2 * units + per) // (2 * per)).rjust(decimals + 1, "0")
    return q[:-decimals] + "." + q[-decimals:]


def derived_text(units: int) -> str:
    """A time's text from its stored integer (0.1 µs), as timeline_grid.time_text writes it from the
    float; where the two roundings differ the page carries the text itself."""
    if units >= 10_000_000:
        return fixed(units, 100_000, 2) + " s"
    return fixed(units, 100, 2) + " ms" if units >= 10_000 else fixed(units, 10, 3) + " ms"


def derived_percent(on: int, off: int) -> str:
    """Overlap's gain in % from the two stored steps, as JavaScript's toFixed(0) writes it (a half
    rounds up)."""
    x = Decimal(100 * (off / on - 1))
    return str(int((x + Decimal("0.5")).to_integral_value(rounding=ROUND_FLOOR)))


def point_texts(point: dict[str, Any]) -> list[str]:
    units = [point["on"], point["off"], point["exposed"], point["comm"], point["g"][0]]
    return [derived_text(u) for u in units] + [derived_percent(point["on"], point["off"])]


def encode_grid(grid: dict[str, Any]) -> dict[str, Any]:
    """The grid with each number once (see above); decode_grid(encode_grid(g)) == g, checked here."""
    sizes = sorted({n for m in grid["models"] for c in m["caps"] for n in c["bytes"]})
    where = {n: i for i, n in enumerate(sizes)}
    count = len(grid["axes"]["beta_gbs"]) * len(grid["axes"]["alpha_us"]) * len(grid["axes"]["world_size"])
    durations: list[list[int | None]] = [[None] * len(sizes) for _ in range(count)]
    models = []
    for model in grid["models"]:
        caps = []
        for cap in model["caps"]:
            points, kinds = cap["points"], [where[n] for n in cap["bytes"]]
            for i, point in enumerate(points):
                for kind, d in zip(kinds, point["d"]):
                    if durations[i][kind] not in (None, d):
                        raise ValueError("a bucket's all-reduce time depends on more than its bytes")
                    durations[i][kind] = d
            other = {k: v for k, v in cap.items() if k != "points"}
            caps.append({**other, "kind": kinds, **{k: [p[k] for p in points] for k in POINT_KEYS},
                         "g": [pack_ints(p["g"]) for p in points], "go": [pack_ints(p["go"]) for p in points],
                         "texts": [[i, j, text] for i, p in enumerate(points)
                                   for j, (text, derived) in enumerate(zip(p["t"], point_texts(p)))
                                   if text != derived]})
        models.append({**model, "caps": caps})
    encoded = {**grid, "models": models, "sizes": sizes,
               "durations": [[-1 if d is None else d for d in row] for row in durations]}
    if decode_grid(encoded) != grid:
        raise ValueError("the page's encoding of the grid does not give the grid back")
    return encoded


def decode_grid(encoded: dict[str, Any]) -> dict[str, Any]:
    """The grid build_grid() made, from encode_grid's (timeline.js's decodeGrid does the same)."""
    table = encoded["durations"]
    models = []
    for model in encoded["models"]:
        caps = []
        for cap in model["caps"]:
            points = []
            for i in range(len(cap["on"])):
                point = {k: cap[k][i] for k in POINT_KEYS}
                point.update(d=[table[i][kind] for kind in cap["kind"]], g=unpack_ints(cap["g"][i]),
                             go=unpack_ints(cap["go"][i]))
                point["t"] = point_texts(point)
                points.append(point)
            for i, j, text in cap["texts"]:        # where the float rounded otherwise than the integer
                points[i]["t"][j] = text
            other = {k: v for k, v in cap.items() if k not in ("kind", "g", "go", "texts", *POINT_KEYS)}
            caps.append({**other, "points": points})
        models.append({**model, "caps": caps})
    return {k: v for k, v in encoded.items() if k not in ("sizes", "durations")} | {"models": models}


def render_timeline(grid: dict[str, Any] | None = None) -> str:
    """The page's HTML for `grid` (default: timeline_grid.build_grid())."""
    grid = dict(encode_grid(grid if grid is not None else timeline_grid.build_grid()), notes=notes_cards())
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
    page_main(__doc__, PAGE_NAME, write_timeline)


if __name__ == "__main__":
    run_main(main)
