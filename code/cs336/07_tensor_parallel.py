"""CS336 lecture 8 (张量并行, Megatron 3D): PyTorch's DTensor tensor parallelism beside the hand-written one.

    python code/cs336/07_tensor_parallel.py [--world-size 4] [--tp 2] [--layers 8] [--width 128] [--batch 32]
    torchrun --standalone --nproc-per-node=4 code/cs336/07_tensor_parallel.py

The deep MLP of 05_parallel.py (x = gelu(x @ W), float64, SGD) on real ranks, laid out by
`parallelize_module` on a DeviceMesh. Part 1: the notes' layout (every layer column-wise, the
slices gathered) with ColwiseParallel, against 05 Part 2's hand-written code and one process, and the
collectives each side issues: where the plan declares the gather decides whether PyTorch's backward
all-reduces or, as the hand-written code, reduce-scatters. Part 2: Megatron's column -> row pair.
Part 3: a dp × tp mesh (2 × 2 on 4 ranks), with the bytes on each mesh dimension. Parts 1 and 2 run
on any --world-size from 2 that divides --width; Part 3 needs --world-size = --tp × a dp of at least
2, and is left out, saying so, where it is not. Bytes are counted (what the process group was
handed), priced by the ring model (what NCCL sends for it), and read on the wire here (what gloo
ran: it runs a reduce-scatter as all-reduces). A gap from one process beyond round-off (the trained
weights: beyond a share of how far they moved) ends the run in exit 1, naming the strategy.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import importlib.util
from typing import Any

import torch
import torch.distributed as dist

# DTensor's import (1.2 s here) runs once, in the parent: forked ranks inherit it.
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

from common import dist_count
from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.steps import tp_step_bytes_per_device
from common.error_types import UsageError
from common.launch import ask_gloo, launch
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import MOVED_SHARE
from common.units import fmt_bytes
from cs336 import comm, gloo_ran, mlp
from cs336 import dtensor_tp as dt

RING_ALLREDUCE = algorithm("ring all-reduce")

ELEM = 8                # float64
CHECK_TOL = 1e-9        # of a quantity's own size: float64 round-off is near 1e-16; beyond this is a bug
MAX_PARAMS = 2**22      # 32 MiB of float64 per copy
# CPU seconds, all processes (bench/bench_costs.py, fitted on 8 runs here; within 0.91-1.06 of each)
COST = Cost([Term("1", 1.6, lambda a: 1), Term("W", 1.4, lambda a: a.world_size),
             Term("W·L·steps", 0.049, lambda a: a.world_size * a.layers * a.steps),
             Term("W·L·steps·(d/100)²", 0.0035,
                  lambda a: a.world_size * a.layers * a.steps * (a.width / 100) ** 2),
             Term("L·steps·B·(d/1000)²", 0.0073,
                  lambda a: a.layers * a.steps * a.batch * (a.width / 1000) ** 2)],
            memory=lambda a: ELEM * (a.world_size + 2) * 8 * a.layers * a.width * (a.batch + a.width))


def main() -> None:
    parser = make_parser(__doc__, world_size=4, tp=2, layers=8, width=128, batch=32, steps=2, seed=0,
                         real=True, cost=COST,
                         context={"tp": "Part 3: ranks in a row of the mesh", "steps": "SGD steps",
                                  "width": "d of every layer", "seed": "weights and data"})
    args = parser.parse_args()
    check_args(args)
    ask_gloo()  # 05's reduce-scatter asks whether gloo has one; asked once here, forked ranks inherit it
    params = mlp.make_params(args.layers, args.width, args.seed)
    x = mlp.make_batch(args.batch, args.width, args.seed)
    ref = mlp.train_one_process(params, x, args.steps, "sgd")  # its optimizer imports torch._dynamo pre-fork
    ref.refuse_still_weights(f"--layers {args.layers} --width {args.width}")
    rep = Report(__file__, "DTensor tensor parallel beside the hand-written one, and a DP × TP mesh", args)
    rep.line(f"  {args.layers} layers x = gelu(x @ W), W {args.width}×{args.width}, batch {args.batch}, "
             f"loss = mean(x²), float64, {args.steps} SGD steps (lr {mlp.LR_SGD});\n"
             f"  {args.world_size} real ranks (gloo), one launch for every part")
    xg = x.clone().requires_grad_()
    (input_grad,) = torch.autograd.grad(mlp.forward(params, xg).square().mean(), xg)
    tp = args.tp if mesh_fits(args) else None             # None: Part 3 is left out, saying why
    ranks = launch(engines_worker, args.world_size, params, x, args.steps, tp, timeout_s=args.timeout_s)
    rep.part(1, "the notes' layout by parallelize_module: ColwiseParallel on every layer, gathered")
    part1_notes_layout(rep, args, ranks, ref)          # ColwiseParallel on each layer, 05 by hand
    rep.part(2, "Megatron's pair: ColwiseParallel, then RowwiseParallel, on each block of two layers")
    part2_megatron(rep, args, ranks, ref, input_grad)  # column -> row: an all-reduce a block forward
    shape = f"{args.world_size // args.tp} × {args.tp}" if tp is not None else "dp × tp"
    rep.part(3, f"a {shape} mesh (dp, tp): Megatron's blocks within each row, data parallel across")
    part3_mesh_2d(rep, args, ranks, ref)               # dp × tp: the bytes on each mesh dimension
    rep.finish()


def _load_05() -> Any:
    """05_parallel.py, whose tensor_parallel_rank (Part 2, written by hand) is the from-scratch side."""
    path = Path(__file__).with_name("05_parallel.py")
    spec = importlib.util.spec_from_file_location("cs336_05_parallel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HAND = _load_05()


# ---- rank code ----------------------------------------------------------------------------------
def dtensor_rank(params: list[torch.Tensor], x: torch.Tensor, steps: int, mesh: DeviceMesh,
                 plan: str) -> dict:
    """A plan of dt.PLANS trained for `steps` SGD steps on the whole batch. Every collective is
    counted by DTensorComm, and dist_count looks on: do torch.distributed's methods see them?"""
    model = dt.as_linears(params)
    parallelize_module(model, mesh, dt.PLANS[plan](len(params)))
    opt, res = torch.optim.SGD(model.parameters(), lr=mlp.LR_SGD), {}
    counted = dt.DTensorComm({"tp": mesh.get_group()})
    with dist_count.counting() as seen, counted:
        for step in range(steps):
            with gloo_ran.watching(on=step == steps - 1) as ran:   # what gloo ran: the last step's
                opt.zero_grad()
                out = dt.whole(model(x))
                loss = out.square().mean()
                loss.backward()
                if step == 0:
                    res.update(output=out.detach(), loss=loss.item(), grads=dt.pieces(model, grads=True))
                opt.step()
    return res | {"params": dt.pieces(model), "log": counted.logs["tp"], "ran": ran.by_kind(mesh.size()),
                  "python_calls": seen.collective_calls(), "group_ops_unseen": seen.unseen}


def input_grad_rank(params: list[torch.Tensor], x: torch.Tensor, mesh: DeviceMesh) -> dict:
    """Megatron's blocks once more, x needing a gradient (as an embedding's output would): counted
    forward and backward apart."""
    model = dt.as_linears(params)
    parallelize_module(model, mesh, dt.PLANS["Megatron"](len(params)))
    x = x.clone().requires_grad_()
    forward, backward = dt.DTensorComm({"tp": mesh.get_group()}), dt.DTensorComm({"tp": mesh.get_group()})
    with gloo_ran.watching() as ran:
        with forward:
            out = dt.whole(model(x))
        with backward:
            out.square().mean().backward()
    return {"input_grad": x.grad, "forward": forward.logs["tp"], "backward": backward.logs["tp"],
            "ran": ran.by_kind(mesh.size())}


def average_shards(model: torch.nn.Module, group: dist.ProcessGroup, rows: int, batch: int) -> None:
    """Data parallelism on shards: my gradient shards × my rows, summed over the dp group in one flat
    buffer (one bucket, as DDP's), ÷ the whole batch (05's data parallel, on 1/tp of the model)."""
    shards = [p.grad.to_local() for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in shards]) * rows
    dist.all_reduce(flat, group=group)                  # op=SUM
    for g, summed in zip(shards, flat.div_(batch).split([g.numel() for g in shards])):
        g.copy_(summed.view_as(g))


def mesh_2d_rank(params: list[torch.Tensor], x: torch.Tensor, steps: int, tp: int) -> dict:
    """dp × tp: Megatron's blocks over my row of the mesh ("tp"), my row's slice of the batch, and my
    gradient shards averaged over my column ("dp"): the ranks that hold the same shards."""
    dp = dist.get_world_size() // tp
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    model = dt.as_linears(params)
    parallelize_module(model, mesh["tp"], dt.PLANS["Megatron"](len(params)))
    mine = x.tensor_split(dp)[mesh.get_local_rank("dp")]
    opt, res = torch.optim.SGD(model.parameters(), lr=mlp.LR_SGD), {}
    counted = dt.DTensorComm({"tp": mesh.get_group("tp"), "dp": mesh.get_group("dp")})
    # dist_count: the dp all-reduce (a method), not DTensor's; gloo_ran: the last step, both dimensions
    with dist_count.counting() as seen, counted:
        for step in range(steps):
            with gloo_ran.watching(on=step == steps - 1) as ran:
                opt.zero_grad()
                out = model(mine)
                loss = out.square().mean()              # the mean over MY rows, as 05's data parallel
                loss.backward()
                average_shards(model, mesh.get_group("dp"), len(mine), len(x))
                if step == 0:
                    res.update(output=out.detach(), loss=loss.item(), grads=dt.pieces(model, grads=True))
                opt.step()
    dp_log = comm.CommLog(dp)
    dp_log.add_counts(seen)
    return res | {"params": dt.pieces(model), "tp_log": counted.logs["tp"], "dp_log": dp_log,
                  "rows": len(mine), "row": mesh.get_coordinate()[0], "ran": ran.by_kind(tp),
                  "dtensor_dp_calls": sum(counted.logs["dp"].calls.values())}


def engines_worker(rank: int, world_size: int, params: list[torch.Tensor], x: torch.Tensor, steps: int,
                   tp: int | None) -> dict:
    """Every side in turn on this rank: 05's hand-written TP, the DTensor plans, the 2-D mesh (tp
    None: not at this world size)."""
    log = comm.CommLog(world_size)
    with gloo_ran.watching() as ran:
        hand = HAND.tensor_parallel_rank(params, x, steps, log)   # column slices: cut along W's dim 1
    pieces = {"grads": [(g, 1) for g in hand["grads"]], "params": [(w, 1) for w in hand["params"]]}
    out = {"hand": hand | pieces | {"log": log, "ran": gloo_ran.per_step(ran.by_kind(world_size), steps)}}
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("tp",))
    for plan in dt.PLANS:
        out[plan] = dtensor_rank(params, x, steps, mesh, plan)
    out["input grad"] = input_grad_rank(params, x, mesh)
    if tp is not None:
        out["2-D"] = mesh_2d_rank(params, x, steps, tp)
    return out


# ---- the parent: compare with one process, count, print ----------------------------------------------
def check_sides(rep: Report, what: str, gaps: list[float], ref: mlp.Reference,
                input_grad: torch.Tensor | None = None) -> str:
    """Step 1's output, loss and gradients (and dL/dx, given its one-process value) each within
    CHECK_TOL of its own size in one process (an absolute bound passed a zero dL/dx at --batch 512,
    where dL/dx is 6e-10); the trained weights (dt.QUANTITIES' last) within a share of how far they
    moved there: a mark for the table's last row."""
    weights = dt.QUANTITIES.index("every W after the SGD steps")
    sizes = [float(ref.output.abs().max()), abs(ref.loss), max(float(g.abs().max()) for g in ref.grads)]
    sizes += [] if input_grad is None else [float(input_grad.abs().max())]
    step_one = [g / size if size > 0 else g for g, size in zip(gaps[:weights] + gaps[weights + 1:], sizes)]
    return rep.mark_trained(f"{what} against one process", gaps[weights], ref.moved, max(step_one), CHECK_TOL,
                            relative=True)[0]


def bounds_row(ref: mlp.Reference) -> str:
    """The label of the marks' row under a table of gaps from one process."""
    return f"step 1 ≤ {CHECK_TOL:g}·size, W ≤ {MOVED_SHARE:g}·{ref.moved:.2g} moved"


# The values the rows of cs336/engines.toml compare, under the names they write (grep finds the row and
# the line that records it): each side's calls and ring-model bytes a step, counted and by the formula
# (dt.traffic_table's Names), and what gloo ran for them (gloo_ran.report: calls, bytes).
P1_TRAFFIC = {"hand": ("p1_hand_calls", "p1_hand_bytes", "p1_hand_formula_calls", "p1_hand_formula_bytes"),
              "at input": ("p1_at_input_calls", "p1_at_input_bytes", "p1_at_input_formula_calls",
                           "p1_at_input_formula_bytes"),
              "at output": ("p1_at_output_calls", "p1_at_output_bytes", "p1_at_output_formula_calls",
                            "p1_at_output_formula_bytes")}
P1_WIRE = {"hand": ("p1_hand_wire", "p1_hand_wire_bytes"),
           "at input": ("p1_at_input_wire", "p1_at_input_wire_bytes"),
           "at output": ("p1_at_output_wire", "p1_at_output_wire_bytes")}
P2_TRAFFIC = {"step": ("p2_step_calls", "p2_step_bytes", "p2_step_formula_calls", "p2_step_formula_bytes"),
              "forward": ("p2_forward_calls", "p2_forward_bytes", "p2_forward_formula_calls",
                          "p2_forward_formula_bytes"),
              "backward": ("p2_backward_calls", "p2_backward_bytes", "p2_backward_formula_calls",
                           "p2_backward_formula_bytes")}
P3_TRAFFIC = {"tp": ("p3_tp_calls", "p3_tp_bytes", "p3_tp_formula_calls", "p3_tp_formula_bytes"),
              "dp": ("p3_dp_calls", "p3_dp_bytes", "p3_dp_formula_calls", "p3_dp_formula_bytes")}


def part1_notes_layout(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    k, L, d, b, n = args.world_size, args.layers, args.width, args.batch, args.steps
    sides = {s: [r[s] for r in ranks] for s in ("hand", "at input", "at output")}
    found = {s: dt.side_gaps(runs, ref) for s, runs in sides.items()}
    marks = [check_sides(rep, what, found[s], ref) for s, what in [
        ("hand", "TP by hand (05 Part 2)"), ("at input", "DTensor TP (gather at input)"),
        ("at output", "DTensor TP (gather at output)")]]
    rep.table(["max |diff| vs one process", "by hand (05)", "DTensor: gather at input", "… at output"],
              [[q, *(g[i] for g in found.values())] for i, q in enumerate(dt.QUANTITIES)]
              + [[bounds_row(ref), *marks]], name="vs_one_process")
    scatter, reduce = (dt.colwise_traffic(k, L, d, b, ELEM, op) for op in ("reduce_scatter", "all_reduce"))
    logs = {s: [r["log"] for r in runs] for s, runs in sides.items()}
    labels = {"hand": "by hand (05)", "at input": "DTensor, at input", "at output": "DTensor, at output"}
    formulas = {"hand": scatter, "at input": scatter, "at output": reduce}
    dt.traffic_table(rep, [(labels[s], P1_TRAFFIC[s], logs[s], n, [formulas[s]] * k) for s in sides])
    a = b * d * ELEM
    ratio = dt.backward_call_bytes(logs["at output"][0]) / dt.backward_call_bytes(logs["at input"][0])
    rep.value("p1_backward_ratio", ratio)
    rep.value("p1_backward_ratio_formula", RING_ALLREDUCE.busiest_bytes(k, a)
               / algorithm("ring reduce-scatter").busiest_bytes(k, a))
    rep.note(f"counted: the calls each side handed its group (05: comm.CommLog; DTensor: a dispatch mode); "
             f"ring model: what a ring sends for them (formula: dt.colwise_traffic; its reduce-scatter side "
             f"is cm.tp_step_traffic); all ranks as it: every rank's calls and bytes equal its formula. "
             f"e = {ELEM} B, "
             f"A = B·d·e = {fmt_bytes(a)}. Forward, every side "
             f"all-gathers L = {L} times. Backward, the gradient of a layer's input, Σ_r dz_r·W_rᵀ, is a sum "
             f"over ranks (DTensor: Partial). Where the plan gathers at the next layer's input (declared "
             f"Shard(-1)), DTensor reduces it back to Shard(-1): a reduce-scatter, what 05 writes by hand. "
             f"Where it gathers at a layer's output, the next input is Replicate, and so is its gradient: an "
             f"all-reduce, of which each rank uses only its columns (and GELU runs on the whole tensor, p "
             f"times): in the ring model, NCCL's price, {ratio:.2f}× the bytes a backward call "
             f"((p−1)/p·A → 2(p−1)/p·A).")
    moved = gloo_ran.report(rep, [dt.wire_case(labels[s], P1_WIRE[s], sides[s], logs[s], n) for s in sides],
                            k)
    same = ("the same bytes as" if moved["p1_at_output_wire_bytes"] == moved["p1_hand_wire_bytes"]
            else "other bytes than")
    rep.note(f"On the wire here the plan gathered at the output moves {same} 05 (a row below): the ring "
             f"model's {ratio:.2f}× is NCCL's price, not what gloo ran.")
    dt.counting_note(rep, [r[s] for r in ranks for s in dt.PLANS])
    rep.compare_with_notes(in_table=True)


def part2_megatron(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference,
                   input_grad: torch.Tensor) -> None:
    k, d, b, blocks, n = args.world_size, args.width, args.batch, args.layers // 2, args.steps
    found = dt.side_gaps([r["Megatron"] for r in ranks], ref)
    found.append(max(mlp.max_abs_diff(r["input grad"]["input_grad"], input_grad) for r in ranks))
    mark = check_sides(rep, "Megatron TP (DTensor)", found, ref, input_grad)
    rep.table(["max |diff| vs one process", "DTensor, Megatron"],
              [*zip(dt.QUANTITIES, found[:4]), ["dL/dx, x needing a gradient", found[4]],
               [bounds_row(ref), mark]], name="vs_one_process")
    one = [dt.megatron_traffic(k, blocks, b, d, ELEM)] * k
    steps, grad_runs = [r["Megatron"] for r in ranks], [r["input grad"] for r in ranks]
    dt.traffic_table(rep, [
        ("a step, x is data", P2_TRAFFIC["step"], [r["log"] for r in steps], n,
         [dt.megatron_traffic(k, 2 * blocks - 1, b, d, ELEM)] * k),
        ("dL/dx too: forward", P2_TRAFFIC["forward"], [r["forward"] for r in grad_runs], 1, one),
        ("… and backward", P2_TRAFFIC["backward"], [r["backward"] for r in grad_runs], 1, one)])
    a = b * d * ELEM
    both = max(r["forward"].per_step(1, dt.OPS)[1] + r["backward"].per_step(1, dt.OPS)[1] for r in grad_runs)
    rep.value("p2_input_grad_bytes", both)
    rep.value("p2_notes_tp_bytes", tp_step_bytes_per_device(blocks, a, k))
    rep.note(f"{blocks} blocks. W₁ by columns: each rank computes gelu(x·W₁_r), its own columns of the "
             f"hidden layer, with no communication; W₂ by rows: h_r·W₂_r is rank r's term of the block's "
             f"output (Partial), one all-reduce makes it whole (Megatron's g). Backward mirrors it: the "
             f"block's input gradient Σ_r dz_r·W₁_rᵀ is all-reduced (Megatron's f), except where the input "
             f"is data: block 1 of a step. Each all-reduce carries A = B·d·e = {fmt_bytes(a)}: 2(p−1)/p·A a "
             f"call in the ring model. With x needing dL/dx, forward and backward together are the notes' 2L "
             f"all-reduces of A (cm.tp_step_bytes_per_device, L = {blocks} blocks): {fmt_bytes(both)} in the "
             f"ring model.")
    gloo_ran.report(rep, [dt.wire_case("a step, x is data", ("p2_step_wire", "p2_step_wire_bytes"), steps,
                                       [r["log"] for r in steps], n),
                          dt.wire_case("dL/dx too: both", ("p2_input_grad_wire", "p2_input_grad_wire_bytes"),
                                       grad_runs,
                                       [r["forward"] + r["backward"] for r in grad_runs], 1)], k)
    rep.compare_with_notes(in_table=True)


def part3_mesh_2d(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    k, tp, L, d, b = args.world_size, args.tp, args.layers, args.width, args.batch
    dp = k // tp
    if "2-D" not in ranks[0]:
        rep.line(f"  not run: Part 3 needs --world-size = --tp × a data-parallel size of at least 2 (4 ranks "
                 f"at --tp 2); here {k} ranks, --tp {tp}")
        rep.value("p3_dtensor_dp_calls", None)
        for name in P3_TRAFFIC["tp"] + P3_TRAFFIC["dp"]:
            rep.value(name, None)
        return
    runs = [r["2-D"] for r in ranks]
    found = dt.mesh_gaps(runs, ref, dp, b)
    mark = check_sides(rep, f"DP × TP ({dp} × {tp} mesh)", found, ref)
    rep.table(["max |diff| vs one process (worst row)", f"DTensor, {dp} × {tp}"],
              [*zip(dt.QUANTITIES, found), [bounds_row(ref), mark]], name="vs_one_process")
    local = sum(p.numel() for p, _ in runs[0]["params"])
    tp_logs, dp_logs = [r["tp_log"] for r in runs], [r["dp_log"] for r in runs]
    dt.traffic_table(rep, [
        ("tp: activations", P3_TRAFFIC["tp"], tp_logs, args.steps,
         [dt.megatron_traffic(tp, L - 1, r["rows"], d, ELEM) for r in runs]),
        ("dp: gradient shards", P3_TRAFFIC["dp"], dp_logs, args.steps,
         [dt.shard_average_traffic(dp, local, ELEM)] * k)])
    rep.value("p3_dtensor_dp_calls", sum(r["dtensor_dp_calls"] for r in runs))
    rep.note(f"each rank holds {local:,} of the {L * d * d:,} weights (1/{tp}) and {runs[0]['rows']} of the "
             f"{b} rows. tp carries activations ({L // 2} all-reduces of rows × d forward, {L // 2 - 1} "
             f"backward) in groups of {tp}, counted by DTensorComm; dp carries gradients: one all-reduce of "
             f"my shards, 1/{tp} of the model, with the {dp} ranks holding the same ones, counted by "
             f"dist_count (a method call). The notes' Megatron keeps tp inside a node's fast links for that.")
    gloo_ran.report(rep, [dt.wire_case("a step, tp and dp", ("p3_step_wire", "p3_step_wire_bytes"), runs,
                                       [tp_logs[0] + dp_logs[0]], args.steps)], tp)
    rep.note("The dp average is written out (× my rows, SUM over the dp group, ÷ B, as 05's data parallel, "
             "in one bucket as DDP): Megatron's DP, on shards. DDP itself refuses DTensor parameters in "
             "torch 2.13 (its first broadcast has no DTensor sharding strategy); FSDP2's fully_shard over dp "
             "would shard the parameters as well (ZeRO-3).")
    rep.compare_with_notes(in_table=True)


def mesh_fits(args: argparse.Namespace) -> bool:
    """Part 3's mesh: --world-size = --tp × a data-parallel size of at least 2."""
    return args.world_size % args.tp == 0 and args.world_size // args.tp >= 2


def check_args(args: argparse.Namespace) -> None:
    """Sizes Parts 1 and 2 can split evenly (pairs of layers, columns per rank), and Part 3's rows."""
    k, tp = args.world_size, args.tp
    if k < 2:
        raise UsageError(f"--world-size {k}: tensor parallelism splits each layer over at least 2 ranks")
    if tp < 2:
        raise UsageError(f"--tp {tp}: Part 3's rows of the mesh need at least 2 tensor-parallel ranks")
    if args.layers < 2 or args.layers % 2:
        raise UsageError(f"--layers {args.layers}: Megatron's blocks pair the layers, so an even number, "
                         "at least 2")
    if args.width % k:
        raise UsageError(f"--width {args.width} must be a multiple of --world-size {k} (e.g. --width "
                         f"{max(k, args.width - args.width % k)}): DTensor cuts uneven widths as "
                         "torch.chunk, 05 as tensor_split: they would hold other columns")
    if mesh_fits(args) and args.batch < k // tp:
        raise UsageError(f"--batch {args.batch} < {k // tp} data-parallel rows: every row needs a sample")
    if args.layers * args.width**2 > MAX_PARAMS:
        raise UsageError(f"--layers × --width² must be at most {MAX_PARAMS:,} (a few seconds on a laptop)")


if __name__ == "__main__":
    run_main(main)
