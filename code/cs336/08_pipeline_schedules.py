"""CS336 lecture 8, pipeline parallelism (流水线并行 … 1F1B 调度): PyTorch's own schedules on real ranks.

    python code/cs336/08_pipeline_schedules.py [--pp 4] [--micro-batches 8] [--layers 8] [--width 128]
    torchrun --standalone --nproc-per-node=4 code/cs336/08_pipeline_schedules.py

torch.distributed.pipelining runs the notes' deep MLP (cs336/mlp.py) cut into --pp stages S, one
per rank (gloo, CPU, float64): PipelineStage under ScheduleGPipe, Schedule1F1B and
ScheduleInterleaved1F1B (two virtual stages per rank), at --micro-batches M, and interleaved again
at M = S. Part 1 compares each with one process (loss, gradients, parameters after --steps SGD
steps): a gap beyond round-off ends the run in exit 1. Part 2 prints the order in which each rank
really ran its forward and backward passes, recorded from the stage module's forward and a hook on
its output's gradient, beside the order cs336/pipeline.py simulates (06_pipeline.py's schedules),
and says where they differ and why. Two judges: a rank off the order PyTorch's own rule gives it
(read from its source, written apart from the simulator: cs336/engine_probes.py) ends the run in
exit 1 too; the rows say whether the simulator's order is what ran. Part 3 counts the activations
each stage held against the simulator's peak; Part 4 the messages each rank sent (counted:
point-to-point, so what went on the wire) against the formula that 05_parallel.py's hand-written
GPipe (its Part 3) meets.
--quick changes nothing here: every schedule runs in well under a second.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import os

import torch
from torch import nn

# Imported here, before the ranks fork, so they inherit it (it imports torch._dynamo: ~2 s each otherwise).
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from common.cli import make_parser
from common.costmodel.steps import pp_step_traffic
from common.dist_count import counting
from common.error_types import UsageError
from common.launch import launch, under_torchrun
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import MOVED_SHARE
from common.units import fmt_bytes
from cs336 import mlp
from cs336 import pipeline as pp
from cs336.engine_probes import PassLog, as_megatron, listed_order, most_held, order_text, pytorch_order

ELEM = 8                 # float64: the pipeline and one process differ only in the order of additions
VIRTUAL = 2              # interleaved 1F1B: model chunks (virtual stages) per rank
DEFAULT_STAGES = 4
CHECK_TOL = 1e-9         # of a quantity's size: round-off is ~1e-16; a lost micro-batch is far above
TF_MS, TB_MS = 10.0, 20.0  # the notes' worked example (t_b = 2 t_f): how Part 2 lays an order out in time
# CPU time here (bench/bench_costs.py, 2 cores): imports and the one-process reference, then every
# schedule's passes (4 runs × steps × S·M micro-batch passes per rank) and the W² gloo start-up.
COST = Cost([Term("1", 9.0, lambda a: 1), Term("S²", 0.05, lambda a: stages(a) ** 2),
             Term("S·M·steps", 0.004, lambda a: stages(a) * a.micro_batches * a.steps),
             Term("L·steps·B·(d/1000)²", 0.05,
                  lambda a: a.layers * a.steps * a.batch * (a.width / 1000) ** 2)],
            memory=lambda a: ELEM * (stages(a) + 2) * 4 * a.layers * a.width * (a.batch + a.width),
            ranks=lambda a: stages(a))


def main() -> None:
    parser = make_parser(__doc__, pp=DEFAULT_STAGES, world_size=DEFAULT_STAGES, micro_batches=8, layers=8,
                         width=128, batch=32, steps=2, seed=0, real=True, cost=COST,
                         context={"pp": "S, a rank each", "world_size": "the same as --pp",
                                  "micro_batches": "M", "width": "d of every layer", "steps": "SGD steps",
                                  "seed": "weights and data"},
                         # nothing here is long: the imports and the ranks' start are most of a run
                         help_for={"quick": "accepted and ignored: every schedule runs in well under a "
                                            "second here (the imports and the ranks' start take the rest)"})
    args = parser.parse_args()
    check_args(args)
    s, m = args.pp, args.micro_batches
    runs = {"GPipe": ("GPipe", m), "1F1B": ("1F1B", m), "interleaved": ("interleaved", m),
            "interleaved_ms": ("interleaved", s)}    # at M = S PyTorch and Megatron part ways (Part 2)
    ref = mlp.train_one_process(*data(args), args.steps, "sgd")   # what every schedule must equal
    ref.refuse_still_weights(f"--layers {args.layers} --width {args.width}")
    rep = Report(__file__, "torch.distributed.pipelining's schedules beside the simulator (CS336 lecture 8)",
                 args)
    rep.line(f"  {args.layers} layers x = gelu(x @ W), W {args.width}×{args.width}, batch {args.batch}, "
             f"loss = mean(x²), float64;\n  S = {s} stages on {s} real ranks (gloo), M = {m} micro-batches, "
             f"interleaved with {VIRTUAL} chunks per rank, {args.steps} steps")
    ranks = launch(schedules_worker, s, *data(args), args.steps, runs, timeout_s=args.timeout_s)
    rep.part(1, "each schedule against one process: loss, gradients, parameters after the steps")
    part1_one_process(rep, args, runs, ranks, ref)   # loss, gradients, parameters: = one process
    rep.part(2, f"the order each rank ran its passes, against the simulator's order (S = {s})")
    part2_orders(rep, args, runs, ranks)        # what each rank ran, the simulator's order, timelines
    rep.part(3, "activations held per stage: what ran, PyTorch's cache, the simulator's peak")
    part3_activations(rep, args, runs, ranks)   # GPipe holds M micro-batches, 1F1B at most S
    rep.part(4, "messages each rank sent per step, counted, against the send/recv GPipe formula")
    part4_sends(rep, args, runs, ranks)         # send/recv counted = 05's GPipe formula
    rep.finish()


def chunks(kind: str) -> int:
    """Model chunks (virtual stages) per rank: VIRTUAL for interleaved 1F1B, one otherwise."""
    return VIRTUAL if kind == "interleaved" else 1


def stages(args: argparse.Namespace) -> int:
    """S: --pp, or --world-size when only that was moved (a rank per stage either way)."""
    return args.pp if args.pp != DEFAULT_STAGES else args.world_size


# ---- rank code ----------------------------------------------------------------------------------
class StageBlock(nn.Module):
    """One stage's consecutive layers of the deep MLP: x = gelu(x @ W) for each of its W."""

    def __init__(self, ws: list[torch.Tensor]) -> None:
        super().__init__()
        self.ws = nn.ParameterList(nn.Parameter(w.clone()) for w in ws)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mlp.forward(list(self.ws), x)


def run_schedule(rank: int, k: int, params: list[torch.Tensor], x: torch.Tensor, steps: int, kind: str,
                 micro_batches: int) -> dict:
    v = chunks(kind)
    layers = mlp.stage_layers(len(params), k * v)
    log, modules, stages_here = PassLog(), [], []
    for chunk in range(v):
        index = chunk * k + rank            # virtual stage j on rank j mod S, as the simulator places it
        module = StageBlock([params[i] for i in layers[index]])
        stage = PipelineStage(module, index, k * v, torch.device("cpu"))
        log.watch(stage, module)
        modules.append((index, module))
        stages_here.append(stage)

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (out - target).square().sum() / x.numel()   # summed over the micro-batches: the batch's mean

    if kind == "interleaved":   # scale_grads=False: the loss is already the batch's mean
        schedule = ScheduleInterleaved1F1B(stages_here, micro_batches, loss_fn=loss_fn, scale_grads=False)
    else:
        engine = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[kind]
        schedule = engine(stages_here[0], micro_batches, loss_fn=loss_fn, scale_grads=False)
    opt = torch.optim.SGD([p for _, m in modules for p in m.parameters()], lr=mlp.LR_SGD)
    res: dict = {"listed": listed_order(schedule, rank)}
    for step in range(steps):
        opt.zero_grad()
        log.recording, losses = step == 0, []
        with counting() as counts:          # the last step's are kept: the first also exchanges shapes
            schedule.step(*([x] if rank == 0 else []), target=torch.zeros_like(x), losses=losses)
        if step == 0:
            res["loss"] = sum(loss.item() for loss in losses) if losses else None
            res["grads"] = {i: w.grad.clone() for index, m in modules for i, w in zip(layers[index], m.ws)}
        opt.step()
    res["params"] = {i: w.detach() for index, m in modules for i, w in zip(layers[index], m.ws)}
    return res | {"passes": log.passes, "most_cached": log.most_cached, "sends": counts.sends,
                  "sent": counts.sent_bytes}


def schedules_worker(rank: int, world_size: int, params: list[torch.Tensor], x: torch.Tensor, steps: int,
                     runs: dict[str, tuple[str, int]]) -> dict:
    """Every schedule in turn on this rank."""
    return {key: run_schedule(rank, world_size, params, x, steps, kind, m) for key, (kind, m) in runs.items()}


# ---- the parts: the parent compares and prints --------------------------------------------------
def simulated(kind: str, s: int, m: int) -> pp.PipelineRun:
    return pp.run_schedule(kind, s, m, TF_MS / 1e3, TB_MS / 1e3, virtual=VIRTUAL)


def label(key: str, runs: dict[str, tuple[str, int]]) -> str:
    kind, m = runs[key]
    return f"{kind}{' 1F1B' if kind == 'interleaved' else ''}, M = {m}"


def part1_one_process(rep: Report, args: argparse.Namespace, runs: dict, ranks: list[dict],
                      ref: mlp.Reference) -> None:
    rows = []
    # step 1's loss and gradients each within CHECK_TOL of its own size (an absolute bound passed a
    # lost micro-batch's loss at --layers 14 --width 16, where the loss is 2e-9); the weights against
    # how far they moved
    sizes = [abs(ref.loss), max(float(g.abs().max()) for g in ref.grads)]
    for key in runs:
        out = [r[key] for r in ranks]
        grads = {i: g for r in out for i, g in r["grads"].items()}
        params = {i: p for r in out for i, p in r["params"].items()}
        every = range(args.layers)
        gaps = [abs(out[-1]["loss"] - ref.loss), mlp.max_abs_diff([grads[i] for i in every], ref.grads),
                mlp.max_abs_diff([params[i] for i in every], ref.params_after[-1])]
        step_one = max(g / size if size > 0 else g for g, size in zip(gaps[:2], sizes))
        row = [label(key, runs), *gaps, f"{step_one:.2g}"]
        mark, off = rep.mark_trained(f"{row[0]} against one process", gaps[2], ref.moved, step_one, CHECK_TOL,
                                     relative=True)
        rows.append(row + [off, mark])
        rep.value(f"{key}_max_diff", max(gaps))
    rep.table(["schedule", "loss", f"gradients of the {args.layers} W", f"weights after {args.steps} steps",
               "step 1 ÷ size", "weights ÷ moved", "within bounds"], rows, name="vs_one_process")
    rep.note("max |difference| from the same model trained in one process (cs336/mlp.py); step 1's loss "
             f"and gradients as a share of their size (≤ {CHECK_TOL:g}), the trained weights' of how far "
             f"they moved, {ref.moved:.2g} (≤ {MOVED_SHARE:g}). The loss is Σ over micro-batches of Σ out² / "
             "(B·d): each micro-batch's "
             "share of the batch's mean, so the schedules run with scale_grads=False (PyTorch would "
             "otherwise divide the gradients by M)")


def data(args: argparse.Namespace) -> tuple[list[torch.Tensor], torch.Tensor]:
    return (mlp.make_params(args.layers, args.width, args.seed),
            mlp.make_batch(args.batch, args.width, args.seed))


def part2_orders(rep: Report, args: argparse.Namespace, runs: dict, ranks: list[dict]) -> None:
    s = stages(args)
    rep.note(f"a timeline is an order laid out as the simulator runs it, with the notes' t_f = {TF_MS:g} ms\n"
             f"and t_b = {TB_MS:g} ms (interleaved: 1/{VIRTUAL} of that per chunk); the order is what\n"
             f"ran, the times a model. An interleaved rank's {VIRTUAL} chunks show alike in a chart; the\n"
             "orders printed prime the second (F0')")
    rep.value("stages", s)
    readings: set[str] = set()   # each way of reading a chart, printed under the first chart it fits
    for key in runs:
        compare_order(rep, key, runs, ranks, s, readings)
    short = [r for r in range(s) if not as_megatron(s, runs["interleaved_ms"][1], r, VIRTUAL)]
    rep.note(f"interleaved at M = S: Megatron-LM runs every forward first when M = S, and so does the\n"
             "simulator; PyTorch keeps its general warm-up of (v-1)·S + 2(S-1-r) forwards on rank r, then\n"
             f"one forward and one backward: fewer than the v·M = {VIRTUAL * s} forwards on "
             f"rank{'s' if len(short) > 1 else ''} {', '.join(map(str, short)) or 'none'}, which start\n"
             "backwards earlier: the same makespan, fewer activations held (Part 3). For M a multiple of S\n"
             "from 2S on, both agree")
    listed = ranks[-1]["1F1B"]["listed"]
    ran_last = [(kind, m) for kind, m, _ in ranks[-1]["1F1B"]["passes"]]
    if listed and listed != ran_last:
        shown = " ".join(f"{kind}{m}" for kind, m in listed[:6])
        rep.note(f"Schedule1F1B.pipeline_order, PyTorch's own listing, gives the last rank {shown} …, off\n"
                 "by one micro-batch from what ran (F0 B0 F1 …): the orders here are recorded, not read\n"
                 "from it")
    rep.compare_with_notes(in_table=True)


# Each schedule's values under the names the rows of cs336/engines.toml compare, written out so that
# grep finds the row and the line that records it. Its ranks that ran the simulator's order, those a
# formula predicts do, the makespan of the order ran and of the simulator's:
ORDER_VALUES = {
    "GPipe": ("GPipe_ranks_as_simulated", "GPipe_ranks_predicted", "GPipe_makespan_ms",
              "GPipe_sim_makespan_ms"),
    "1F1B": ("1F1B_ranks_as_simulated", "1F1B_ranks_predicted", "1F1B_makespan_ms", "1F1B_sim_makespan_ms"),
    "interleaved": ("interleaved_ranks_as_simulated", "interleaved_ranks_predicted",
                    "interleaved_makespan_ms", "interleaved_sim_makespan_ms"),
    "interleaved_ms": ("interleaved_ms_ranks_as_simulated", "interleaved_ms_ranks_predicted",
                       "interleaved_ms_makespan_ms", "interleaved_ms_sim_makespan_ms")}
# ... and the micro-batches each rank held, ran and simulated, rank by rank and the most on any rank
HELD_VALUES = {
    "GPipe": ("GPipe_held", "GPipe_held_sim", "GPipe_held_most", "GPipe_held_sim_most"),
    "1F1B": ("1F1B_held", "1F1B_held_sim", "1F1B_held_most", "1F1B_held_sim_most"),
    "interleaved": ("interleaved_held", "interleaved_held_sim", "interleaved_held_most",
                    "interleaved_held_sim_most"),
    "interleaved_ms": ("interleaved_ms_held", "interleaved_ms_held_sim", "interleaved_ms_held_most",
                       "interleaved_ms_held_sim_most")}


def compare_order(rep: Report, key: str, runs: dict, ranks: list[dict], s: int, readings: set[str]) -> None:
    """One schedule's recorded orders against the simulator's: the timeline they make, the ranks
    that differ (rows: the simulator judged), and the check that every rank ran the order PyTorch's
    schedule prescribes it (PyTorch judged: a rank off it ends the run)."""
    kind, m = runs[key]
    v = chunks(kind)
    ran = [r[key]["passes"] for r in ranks]
    sim = simulated(kind, s, m)
    laid = pp.simulate(ran, m, TF_MS / 1e3, TB_MS / 1e3, virtual=v, name=kind)
    same = [a == b for a, b in zip(ran, sim.orders)]
    scale, reading = pp.chart_key(laid)
    # a rank off the order PyTorch's own rule gives it is a wrong engine, as a gap from one process is
    off_rule = sum(ran[r] != pytorch_order(kind, s, m, r, VIRTUAL) for r in range(s))
    ok = rep.mark(f"{label(key, runs)}: ranks off PyTorch's own rule", off_rule == 0,
                  f"{off_rule} of {s}")
    rep.line(f"\n  {label(key, runs)}: {sum(same)} of {s} ranks ran the simulator's order, every rank "
             f"PyTorch's own rule ({ok}); makespan {laid.makespan * 1e3:g} ms (the simulator's order: "
             f"{sim.makespan * 1e3:g} ms); {scale}")
    for row in pp.ascii_chart(laid)[0]:
        rep.line("    " + row.replace("stage ", "rank "))
    if reading not in readings:
        readings.add(reading)
        rep.note(reading)
    for rank in [r for r in range(s) if not same[r]]:
        rep.line(f"    rank {rank} ran   {order_text(ran[rank], s)}\n"
                 f"    simulator's  {order_text(sim.orders[rank], s)}")
    # where PyTorch's rule and the simulator's (Megatron's) meet: a formula, never the simulator itself
    predicted = [kind != "interleaved" or as_megatron(s, m, r, VIRTUAL) for r in range(s)]
    names = ORDER_VALUES[key]
    for name, value in zip(names, (sum(same), sum(predicted), round(laid.makespan * 1e3, 9),
                                  round(sim.makespan * 1e3, 9))):
        rep.value(name, value)


def part3_activations(rep: Report, args: argparse.Namespace, runs: dict, ranks: list[dict]) -> None:
    s = stages(args)
    rows, ran_all, cached_all = [], [], []
    for key, (kind, m) in runs.items():
        v = chunks(kind)
        ran = [most_held(r[key]["passes"], v) for r in ranks]
        cached = [r[key]["most_cached"] / v for r in ranks]
        sim = simulated(kind, s, m).peak_activations
        bound = {"GPipe": f"M = {m}", "1F1B": f"min(S - s, M) ≤ S = {s}"}.get(kind, "-")
        rows.append([label(key, runs), *(" ".join(f"{h:g}" for h in held) for held in (ran, cached, sim)),
                     bound])
        ran_all.append(rows[-1][1])
        cached_all.append(rows[-1][2])
        for name, value in zip(HELD_VALUES[key], (rows[-1][1], rows[-1][3], max(ran), max(sim))):
            rep.value(name, value)
    rep.table(["schedule", "ran, rank 0 … S-1", "PyTorch's fwd_cache", "the simulator's", "the notes' bound"],
              rows,
              name="held")
    rep.value("held_all", " | ".join(ran_all))
    rep.value("cached_all", " | ".join(cached_all))
    rep.note("micro-batches whose forward had run on the stage and whose backward had not, at most (in\n"
             f"whole stages: an interleaved chunk is 1/{VIRTUAL}); 'ran' counts them in the recorded order,\n"
             "the cache is what PyTorch's stages kept for backward, read after every forward. GPipe keeps\n"
             "all M; 1F1B at most S - s on stage s (the notes' O(S)), whatever M is")
    rep.compare_with_notes(in_table=True)


def part4_sends(rep: Report, args: argparse.Namespace, runs: dict, ranks: list[dict]) -> None:
    s = stages(args)
    rows = []
    for key, (kind, m) in runs.items():
        v = chunks(kind)
        # rank r's virtual stages r, r + S, …, each a stage of an S·v-stage pipeline of the same batch
        formula = [[pp_step_traffic(s * v, j, m, args.batch, args.width, ELEM) for j in range(r, s * v, s)]
                   for r in range(s)]
        sends, f_sends = ([r[key]["sends"] for r in ranks], [sum(c for c, _ in f) for f in formula])
        sent, f_sent = sum(r[key]["sent"] for r in ranks), sum(b for f in formula for _, b in f)
        rows.append([label(key, runs), " ".join(map(str, sends)), " ".join(map(str, f_sends)),
                     fmt_bytes(sent), fmt_bytes(f_sent)])
        rep.value(f"{key}_sends", rows[-1][1])
        rep.value(f"{key}_sends_formula", rows[-1][2])
        rep.value(f"{key}_sent", sent)
        rep.value(f"{key}_sent_formula", f_sent)
    rep.table(["schedule", "sends per rank", "by the formula", "bytes sent", "bytes by the formula"], rows,
              name="sends")
    rep.note("sends and bytes counted on all ranks by common.dist_count (PyTorch's batch_isend_irecv ends\n"
             "in ProcessGroup.send) in the\n"
             "last step (the first also exchanges shapes): point-to-point sends, so the bytes counted are\n"
             "the bytes on the wire here (no collective algorithm in between, no ring model). The formula\n"
             "is costmodel_steps.pp_step_traffic, which 05_parallel.py's send/recv GPipe meets: a\n"
             "micro-batch's activation forward, its gradient back. Interleaved is a pipeline of\n"
             f"{VIRTUAL}·S stages:\n"
             f"{VIRTUAL}·S - 1 boundaries to cross where plain schedules have S - 1, each crossed by the\n"
             "whole batch's activation and its gradient")
    rep.compare_with_notes(in_table=True)


def check_args(args: argparse.Namespace) -> None:
    """One rank per stage; sizes every schedule (and the simulator) accepts."""
    if args.pp != args.world_size and DEFAULT_STAGES not in (args.pp, args.world_size):
        raise UsageError(f"--pp {args.pp} and --world-size {args.world_size}: one rank per stage, "
                         "give one of them")
    s = stages(args)
    if under_torchrun() and s != int(os.environ["WORLD_SIZE"]):
        raise UsageError(f"--pp {s} under torchrun with {os.environ['WORLD_SIZE']} ranks: one rank per stage")
    args.pp = args.world_size = s
    if s < 2:
        raise UsageError(f"--pp must be at least 2 (a pipeline needs two stages), got {s}")
    if args.micro_batches < s or args.micro_batches % s:
        raise UsageError(f"--micro-batches {args.micro_batches}: a multiple of --pp {s} (1F1B needs M ≥ S, "
                         "interleaved 1F1B M a multiple of S)")
    if args.layers < VIRTUAL * s:
        raise UsageError(f"--layers {args.layers} < {VIRTUAL}·S = {VIRTUAL * s}: a layer per virtual stage")
    if args.steps < 2:
        raise UsageError(f"--steps {args.steps}: at least 2 (Part 4 counts the last step's messages; "
                         "the first also exchanges shapes)")
    if args.batch % args.micro_batches:
        # PyTorch sizes a stage's receive buffers from the first micro-batch: a shorter one fails
        raise UsageError(f"--batch {args.batch}: a multiple of --micro-batches {args.micro_batches} "
                         "(PyTorch's stages need micro-batches of one size)")


if __name__ == "__main__":
    run_main(main)
