"""report/memory.html: the memory ledger with ZeRO, TP and PP to play with (CS336 lecture 8).

    python code/report/memory.py OUT_DIR   # writes OUT_DIR/memory.html (reproduce.py: write_pages)

Pick a model, the world size, a ZeRO stage, TP and PP; see the bytes each GPU holds (parameters,
gradients, optimizer state, activations where the notes model them), which cards hold them, and
what each GPU sends per step, priced on one of the notes' links. One self-contained page: it carries
the ledger's entries and a small JS model of the per-GPU bytes and the step's collectives;
`setting_numbers` below is the same computation in Python, made of cs336.ledger's and
common.costmodel.steps' public functions, and tests/report/test_memory_model.py runs the page's model
for every setting it offers and holds it equal to this. The notes' ZeRO table comes with the
verdicts of 04_memory.py's own run (its --json), never decided again here.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import itertools
import json
import math
import subprocess
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from common import checker, verdicts
from common.costmodel.collectives import algorithm
from common.costmodel.link import CS336_ETHERNET, CS336_INFINIBAND, CS336_NVLINK
from common.costmodel.steps import pp_step_traffic, tp_step_bytes_per_device, zero_step_collectives
from common.leftovers import owned_folder
from common.output_files import write_text
from common.script_end import run_main
from common.units import fmt_bytes
from cs336 import ledger as lg
from report.page_cli import page_main
from report.timeline import embedded_json

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGE_NAME = "memory.html"
SCRIPT = "cs336/04_memory.py"
COSTS = "cs336/03_costs.py"               # the Llama example's all-reduce: 39 GB, 87 / 975 / 3900 ms
CODE = Path(__file__).resolve().parents[1]
FP16 = lg.LEDGER["fp16 parameters"]       # bytes of a parameter, gradient and activation value
CARDS_GB = (24, 40, 80, 141)               # common cards' memory, GB = 1e9 B
WORLD_SIZES = (1, 2, 4, 8, 16, 64, 256, 1024)
DEGREES = (1, 2, 4, 8)                     # TP and PP ways; TP stays inside an 8-GPU node
LINKS = {"nvlink": CS336_NVLINK, "infiniband": CS336_INFINIBAND, "ethernet": CS336_ETHERNET}


def _model(key: str, m: lg.Model | None, params: float, batches: tuple[int, ...] = (),
           seqs: tuple[int, ...] = (), note: str = "") -> dict[str, Any]:
    return {"key": key, "name": m.name if m else f"{params / 1e9:g}B parameters (no shape given)",
            "params": m.params if m else params, "layers": m.layers if m else 0,
            "width": m.width if m else 0, "batches": list(batches), "seqs": list(seqs), "note": note}


# The notes' models (cs336.ledger), then bare parameter counts: these have no layers or width, so
# no activations and no TP or PP (which split layers and their width). Batches are per DP replica.
MODELS = [
    _model("200m", lg.NOTES_200M, 0, note="the notes' DDP example: a count, no shape"),
    _model("mlp", lg.MLP_12, 0, (32, 128, 512), (1,), "the notes' 4-GPU example (batch 128 of vectors)"),
    _model("llama", lg.LLAMA2_13B, 0, (1, 2, 4, 8), (2048, 4096), "the notes' 13B examples"),
    _model("gpt3", lg.GPT3_175B, 0, (1, 8, 32, 96), (2048,), "04_memory.py Part 3's 3D example"),
] + [_model(f"{n / 1e9:g}b", None, n) for n in (1e9, 7e9, 70e9, 405e9, 1e12)]   # keys a URL can carry
BY_KEY = {m["key"]: m for m in MODELS}
# The notes' ZeRO table's setting: 13B on 4 cards (04_memory.py's defaults), Llama 2 13B's 40 layers.
DEFAULT = {"model": "llama", "world": 4, "stage": "DDP", "tp": 1, "pp": 1, "batch": 1, "seq": 4096,
           "link": "nvlink"}


def valid(model: dict[str, Any], world: int, tp: int, pp: int) -> bool:
    """TP × PP must divide the GPUs (the rest is DP); a model without a shape has no TP or PP; a
    pipeline has no more stages than layers."""
    if not model["layers"]:
        return tp == pp == 1
    return world % (tp * pp) == 0 and pp <= model["layers"]


def all_settings() -> list[dict[str, Any]]:
    """Every setting the page offers, in the page's order (memory.js's allSettings())."""
    out = []
    for model in MODELS:
        shapes = list(itertools.product(model["batches"], model["seqs"])) or [(None, None)]
        for world, stage, tp, pp in itertools.product(WORLD_SIZES, lg.STAGES, DEGREES, DEGREES):
            if valid(model, world, tp, pp):
                out += [{"model": model["key"], "world": world, "stage": stage, "tp": tp, "pp": pp,
                         "batch": b, "seq": s, "link": link} for b, s in shapes for link in LINKS]
    return out


def setting_numbers(s: dict[str, Any]) -> dict[str, Any]:
    """What the page shows for setting `s` (bytes, seconds), from the ledger and the cost model."""
    model, link = BY_KEY[s["model"]], LINKS[s["link"]]
    tp, pp, stage = s["tp"], s["pp"], s["stage"]
    dp = s["world"] // (tp * pp)
    local = model["params"] / (tp * pp)           # a TP × PP shard; ZeRO shards it over the DP ranks
    held = {name: b / dp if name in lg.SHARDED[stage] else b for name, b in lg.ledger_bytes(local).items()}
    state = lg.zero_bytes_per_gpu(stage, local, dp)
    if not math.isclose(sum(held.values()), state, rel_tol=1e-12):
        raise ValueError("the page's split of the ledger does not add up to zero_bytes_per_gpu")
    out: dict[str, Any] = {"params": held["fp16 parameters"], "grads": held["fp16 gradients"],
                           "master": held["fp32 master weights"],
                           "adam": held["Adam m (fp32)"] + held["Adam v (fp32)"], "state": state,
                           "activations": None, "dp": dp}
    stage_layers = math.ceil(model["layers"] / pp) if model["layers"] else 0
    act = lg.activation_bytes(s["batch"], model["width"], FP16, s["seq"]) if stage_layers else 0.0
    if stage_layers:   # the notes' A = b × s × d × 2 B: one output kept per layer of this stage
        out["activations"] = stage_layers * act
    out["total"] = state + (out["activations"] or 0.0)
    out["fits"] = [out["total"] <= gb * 1e9 for gb in CARDS_GB]
    out["traffic"] = traffic_rows(stage, local, dp, tp, pp, stage_layers, act, s, link)
    out["sent"] = sum(r["bytes"] for r in out["traffic"])
    out["seconds"] = sum(r["seconds"] for r in out["traffic"])
    return out


def traffic_rows(stage: str, local: float, dp: int, tp: int, pp: int, stage_layers: int, act: float,
                 s: dict[str, Any], link: Any) -> list[dict[str, Any]]:
    """One row per collective a GPU takes part in per step (axes of one way send nothing)."""
    rows = []
    if dp > 1:   # ZeRO-3 gathers layer by layer; a model without layers as one piece
        for c in zero_step_collectives(stage, FP16 * local, layers=stage_layers or 1):
            rows.append({"axis": "DP", "kind": c.kind, "what": c.what, "calls": c.calls,
                         "bytes": c.calls * c.ring.busiest_bytes(dp, c.nbytes),
                         "seconds": c.calls * c.ring.time(dp, c.nbytes, link)})
    if tp > 1:   # the notes' table: one all-reduce of A per layer forward, one backward
        ring = algorithm("ring all-reduce")
        rows.append({"axis": "TP", "kind": "all-reduce", "what": "activations", "calls": 2 * stage_layers,
                     "bytes": tp_step_bytes_per_device(stage_layers, act, tp),
                     "seconds": 2 * stage_layers * ring.time(tp, act, link)})
    if pp > 1:   # the busiest stage (a middle one, when there is one), micro-batches of one sample
        rank = 1 if pp > 2 else 0
        width = BY_KEY[s["model"]]["width"]
        sends, sent = pp_step_traffic(pp, rank, s["batch"], s["batch"] * s["seq"], width, FP16)
        rows.append({"axis": "PP", "kind": "send", "what": "activations and their gradients", "calls": sends,
                     "bytes": sent, "seconds": sends * link.message_time(sent / sends)})
    return rows


# ---- the notes' ZeRO table, with 04_memory.py's verdicts ----------------------------------------
# the 13B on 4 cards of the notes' table (04_memory.py's defaults): the ledger's Llama 2 13B
NOTES_PARAMS, NOTES_WORLD = lg.LLAMA2_13B.params, 4
SHORT = {"all-reduce": "AR", "reduce-scatter": "RS", "all-gather": "AG"}   # as the notes' table writes them
MEMORY_ROWS = {"DDP": "CS-zero-mem-ddp", "ZeRO-1": "CS-zero-mem-zero1", "ZeRO-2": "CS-zero-mem-zero2",
               "ZeRO-3": "CS-zero-mem-zero3"}
COMM_ROWS = {"DDP": "CS-zero-comm-ddp", "ZeRO-1": "CS-zero-comm-zero1", "ZeRO-2": "CS-zero-comm-zero2",
             "ZeRO-3": "CS-zero-comm-zero3"}
# Figures of the notes shown beside a card while the setting is theirs: (card, row, setting).
# The Llama 2 13B ledger is DDP's (any number of cards: DDP shards nothing); ZeRO's are on 4 cards.
DDP = {"stage": "DDP"}
BESIDE = [("params", "CS-llama-mem-params", DDP), ("grads", "CS-llama-mem-grads", DDP),
          ("master", "CS-llama-mem-master", DDP), ("adam", "CS-llama-mem-adam", DDP),
          ("state", "CS-llama-mem-total", DDP), ("fits-80", "CS-llama-fits", DDP),
          ("adam", "CS-zero1-13b", {"stage": "ZeRO-1", "world": 4}),
          ("grads", "CS-zero2-13b", {"stage": "ZeRO-2", "world": 4}),
          ("state", "CS-mem-200m", {"model": "200m", "stage": "DDP"})]
DEFAULT_AT = {"model": "llama", "tp": 1, "pp": 1}
# 03_costs.py's figures of the Llama example's DDP all-reduce (its --world-size 4), beside the traffic
# table's total while the setting is theirs: (what, row, the link it is priced on or None for bytes).
TRAFFIC_BESIDE = [("bytes", "CS-llama-volume", None), ("time", "CS-llama-t-nvlink", "nvlink"),
                  ("time", "CS-llama-t-ib", "infiniband"), ("time", "CS-llama-t-eth", "ethernet")]
TRAFFIC_AT = {"model": "llama", "world": 4, "stage": "DDP", "tp": 1, "pp": 1}


def script_claims(script: str = SCRIPT) -> list[dict[str, Any]]:
    """A script's claims at its defaults (the notes' setting), from its own --json."""
    with owned_folder("course-run-") as tmp:     # a killed run's folder is removed by the next
        out = Path(tmp) / "claims.json"
        subprocess.run([sys.executable, str(CODE / script), "--json", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text(encoding="utf-8"))["claims"]


def decided(claim: dict[str, Any]) -> dict[str, Any]:
    """A claim as the page shows it: ours, the notes', the verdict word and its reason."""
    word = verdicts.verdict(claim)
    return {"row": claim["ref"], "what": claim["what"], "ours": claim["ours"], "notes": claim["notes"],
            "unit": claim["unit"], "verdict": word, "agrees": word in verdicts.AGREEING,
            "reading": claim.get("reading") or "",
            "why": verdicts.readable(claim["why"]) if word not in verdicts.AGREEING else "",
            "assumes": claim.get("assumes") or ""}


def notes_table(claims: list[dict[str, Any]], costs: list[dict[str, Any]]) -> dict[str, Any]:
    """The notes' ZeRO table (13B on 4 cards) beside ours, the figures set beside the cards (04's
    claims) and beside the traffic (03's)."""
    by_ref, cost = {c["ref"]: c for c in claims}, {c["ref"]: c for c in costs}
    needed = [*MEMORY_ROWS.values(), *COMM_ROWS.values(), *(b[1] for b in BESIDE)]
    for script, have, want in ((SCRIPT, by_ref, needed), (COSTS, cost, [b[1] for b in TRAFFIC_BESIDE])):
        missing = [r for r in want if r not in have]
        if missing:
            raise ValueError(f"{script} recorded no claim for {', '.join(missing)}")
    rows = []
    for stage in lg.STAGES:
        formula = checker.row(MEMORY_ROWS[stage]).what.split(" = ")[0]
        rows.append({"stage": stage, "formula": formula,
                     "notes_bytes": lg.zero_notes_formula(stage, NOTES_PARAMS, NOTES_WORLD),
                     "ours_bytes": lg.zero_bytes_per_gpu(stage, NOTES_PARAMS, NOTES_WORLD),
                     "memory": decided(by_ref[MEMORY_ROWS[stage]]), "comm": decided(by_ref[COMM_ROWS[stage]]),
                     "paper": " + ".join(SHORT[c.kind] for c in zero_step_collectives(stage, 1.0))})
    beside = [dict(decided(by_ref[ref]), card=card, at={**DEFAULT_AT, **at}) for card, ref, at in BESIDE]
    traffic = [dict(decided(cost[ref]), card=what, at=dict(TRAFFIC_AT, **({"link": link} if link else {})))
               for what, ref, link in TRAFFIC_BESIDE]
    return {"rows": rows, "beside": beside, "traffic": traffic, "params": NOTES_PARAMS, "world": NOTES_WORLD}


def page_data(claims: list[dict[str, Any]], costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything the page's script reads: the offered settings, the ledger, the links, the notes."""
    return {"models": MODELS, "world_sizes": list(WORLD_SIZES), "degrees": list(DEGREES),
            "stages": list(lg.STAGES), "cards_gb": list(CARDS_GB), "default": DEFAULT,
            "ledger": lg.LEDGER, "sharded": {k: list(v) for k, v in lg.SHARDED.items()},
            "links": {k: {"name": v.name, "alpha_s": v.alpha_s, "beta_Bps": v.beta_Bps}
                      for k, v in LINKS.items()},
            "fp16": FP16, "notes": notes_table(claims, costs)}


def render_memory(claims: list[dict[str, Any]] | None = None,
                  costs: list[dict[str, Any]] | None = None) -> str:
    """The page's HTML; `claims`, `costs`: 04_memory.py's and 03_costs.py's from runs at their
    defaults (default: run them now; each is a model, under a second)."""
    data = page_data(script_claims() if claims is None else claims,
                     script_claims(COSTS) if costs is None else costs)
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(("html", "html.j2")))
    env.filters["bytes"] = fmt_bytes
    return env.get_template("memory.html.j2").render(data_json=embedded_json(data), data=data)


def write_memory(directory: Path, claims: list[dict[str, Any]] | None = None,
                 costs: list[dict[str, Any]] | None = None) -> Path:
    """Write `directory`/memory.html, whole or not at all; return its path."""
    path = Path(directory) / PAGE_NAME
    write_text(str(path), render_memory(claims, costs))
    return path


def main() -> None:
    page_main(__doc__, PAGE_NAME, write_memory)


if __name__ == "__main__":
    run_main(main)
