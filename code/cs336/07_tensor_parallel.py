"""CS336 lecture 8 (张量并行, Megatron 3D): PyTorch's DTensor tensor parallelism beside the hand-written one.

    python code/cs336/07_tensor_parallel.py [--world-size 4] [--tp 2] [--layers 8] [--width 128] [--batch 32]
    torchrun --standalone --nproc-per-node=4 code/cs336/07_tensor_parallel.py

The deep MLP of 05_parallel.py (x = gelu(x @ W), float64, SGD) on real ranks, laid out by
`parallelize_module` on a DeviceMesh. Part 1: the notes' layout (every layer column-wise, the
slices gathered) with ColwiseParallel, against 05 Part 2's hand-written code and one process, and the
collectives each side issues: where the plan declares the gather decides whether PyTorch's backward
all-reduces or, as the hand-written code, reduce-scatters. Part 2: Megatron's column -> row pair.
Part 3: a dp × tp mesh (2 × 2 on 4 ranks), with the bytes on each mesh dimension. A gap beyond
round-off ends the run in exit 1, naming the strategy.
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

from common import costmodel as cm
from common import dist_count
from common.budget import Cost, Term
from common.capabilities import ask_gloo
from common.cli import UsageError, make_parser, run_main
from common.launcher import launch
from common.output import Report, fmt_bytes
from cs336 import comm, mlp
from cs336 import dtensor_tp as dt

ELEM = 8                # float64
CHECK_TOL = 1e-9        # as 05_parallel.py: float64 round-off is near 1e-16; beyond this is a bug
MAX_PARAMS = 2**22      # 32 MiB of float64 per copy
# CPU seconds, all processes (bench/bench_costs.py, fitted on 8 runs here; within 0.91-1.06 of each)
COST = Cost([Term("1", 1.6, lambda a: 1), Term("W", 1.4, lambda a: a.world_size),
             Term("W·L·steps", 0.049, lambda a: a.world_size * a.layers * a.steps),
             Term("W·L·steps·(d/100)²", 0.0035,
                  lambda a: a.world_size * a.layers * a.steps * (a.width / 100) ** 2),
             Term("L·steps·B·(d/1000)²", 0.0073,
                  lambda a: a.layers * a.steps * a.batch * (a.width / 1000) ** 2)],
            memory=lambda a: ELEM * (a.world_size + 2) * 8 * a.layers * a.width * (a.batch + a.width))


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
            opt.zero_grad()
            out = dt.whole(model(x))
            loss = out.square().mean()
            loss.backward()
            if step == 0:
                res.update(output=out.detach(), loss=loss.item(), grads=dt.pieces(model, grads=True))
            opt.step()
    return res | {"params": dt.pieces(model), "log": counted.logs["tp"],
                  "python_calls": seen.collective_calls(), "group_ops_unseen": seen.unseen}


def input_grad_rank(params: list[torch.Tensor], x: torch.Tensor, mesh: DeviceMesh) -> dict:
    """Megatron's blocks once more, x needing a gradient (as an embedding's output would): counted
    forward and backward apart."""
    model = dt.as_linears(params)
    parallelize_module(model, mesh, dt.PLANS["Megatron"](len(params)))
    x = x.clone().requires_grad_()
    forward, backward = dt.DTensorComm({"tp": mesh.get_group()}), dt.DTensorComm({"tp": mesh.get_group()})
    with forward:
        out = dt.whole(model(x))
    with backward:
        out.square().mean().backward()
    return {"input_grad": x.grad, "forward": forward.logs["tp"], "backward": backward.logs["tp"]}


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
    with dist_count.counting() as seen, counted:  # dist_count: the dp all-reduce (a method), not DTensor's
        for step in range(steps):
            opt.zero_grad()
            out = model(mine)
            loss = out.square().mean()                  # the mean over MY rows, as 05's data parallel
            loss.backward()
            average_shards(model, mesh.get_group("dp"), len(mine), len(x))
            if step == 0:
                res.update(output=out.detach(), loss=loss.item(), grads=dt.pieces(model, grads=True))
            opt.step()
    dp_log = comm.CommLog(dp)
    dp_log.add_counts(seen)
    return res | {"params": dt.pieces(model), "tp_log": counted.logs["tp"], "dp_log": dp_log,
                  "rows": len(mine), "row": mesh.get_coordinate()[0],
                  "dtensor_dp_calls": sum(counted.logs["dp"].calls.values())}


def engines_worker(rank: int, world_size: int, params: list[torch.Tensor], x: torch.Tensor, steps: int,
                   tp: int) -> dict:
    """Every side in turn on this rank: 05's hand-written TP, the DTensor plans, the 2-D mesh."""
    log = comm.CommLog(world_size)
    hand = HAND.tensor_parallel_rank(params, x, steps, log)   # column slices: cut along W's dim 1
    out = {"hand": hand | {"grads": [(g, 1) for g in hand["grads"]], "log": log,
                           "params": [(w, 1) for w in hand["params"]]}}
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("tp",))
    for plan in dt.PLANS:
        out[plan] = dtensor_rank(params, x, steps, mesh, plan)
    out["input grad"] = input_grad_rank(params, x, mesh)
    out["2-D"] = mesh_2d_rank(params, x, steps, tp)
    return out


# ---- the parent: compare with one process and with each other, count, print ------------------------
QUANTITIES = ["output, step 1", "loss, step 1", "gradient of every W, step 1", "every W after the SGD steps"]


def side_gaps(runs: list[dict], ref: mlp.Reference) -> list[float]:
    """max |diff| from one process of QUANTITIES: every rank's output and loss, the joined W's."""
    return [max(mlp.max_abs_diff(r["output"], ref.output) for r in runs),
            max(abs(r["loss"] - ref.loss) for r in runs),
            mlp.max_abs_diff(dt.joined([r["grads"] for r in runs]), ref.grads),
            mlp.max_abs_diff(dt.joined([r["params"] for r in runs]), ref.params_after[-1])]


def check_sides(rep: Report, what: str, gaps: list[float], ref: mlp.Reference) -> None:
    """Step 1's output, loss and gradients (and any more) within round-off of one process; the
    trained weights (QUANTITIES' last) within a share of how far they moved there."""
    weights = QUANTITIES.index("every W after the SGD steps")
    rep.check_trained(what, gaps[weights], ref.moved, max(gaps[:weights] + gaps[weights + 1:]), CHECK_TOL)


def dtensor_vs_hand(sides: dict[str, list[dict]]) -> float:
    """The largest |difference| between a DTensor plan's output, gradients or W's and 05's."""
    hand, gaps = sides["hand"], []
    for plan in ("at input", "at output"):
        gaps += [mlp.max_abs_diff(r["output"], h["output"]) for r, h in zip(sides[plan], hand)]
        gaps += [mlp.max_abs_diff(dt.joined([r[key] for r in sides[plan]]), dt.joined([h[key] for h in hand]))
                 for key in ("grads", "params")]
    return max(gaps)


def part1_notes_layout(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    rep.part(1, "the notes' layout by parallelize_module: ColwiseParallel on every layer, gathered")
    k, L, d, b = args.world_size, args.layers, args.width, args.batch
    sides = {s: [r[s] for r in ranks] for s in ("hand", "at input", "at output")}
    found = {s: side_gaps(runs, ref) for s, runs in sides.items()}
    rep.table(["max |diff| vs one process", "by hand (05)", "DTensor: gather at input", "… at output"],
              [[q, *(g[i] for g in found.values())] for i, q in enumerate(QUANTITIES)], name="vs_one_process")
    vs_hand = dtensor_vs_hand(sides)
    for s, what in [("hand", "TP by hand (05 Part 2)"),
                    ("at input", "DTensor TP (gather at input)"),
                    ("at output", "DTensor TP (gather at output)")]:
        check_sides(rep, what, found[s], ref)
    rep.check_close("DTensor TP against TP by hand (05 Part 2)", vs_hand, CHECK_TOL)
    rep.values(p1_hand_gap=max(found["hand"]), p1_at_input_gap=max(found["at input"]),
               p1_at_output_gap=max(found["at output"]), p1_dtensor_vs_hand_gap=vs_hand)
    scatter, reduce = cm.tp_step_traffic(k, L, d, b, ELEM), dt.colwise_traffic(k, L, d, b, ELEM, "all_reduce")
    logs = {s: [r["log"] for r in runs] for s, runs in sides.items()}
    n = args.steps
    dt.traffic_table(rep, [("by hand (05 Part 2)", "p1_hand", logs["hand"], n, [scatter] * k),
                       ("DTensor, at input", "p1_at_input", logs["at input"], n, [scatter] * k),
                       ("DTensor, at output", "p1_at_output", logs["at output"], n, [reduce] * k)])
    a = b * d * ELEM
    # a backward call of each DTensor plan (the same L-1 calls; "at input" sends what 05 sends)
    first = ranks[0]
    ratio = first["at output"]["log"].sent["all_reduce"] / first["at input"]["log"].sent["reduce_scatter"]
    rep.values(p1_backward_ratio=ratio, p1_backward_ratio_formula=cm.ring_bytes_sent("all_reduce", k, a)
               / cm.ring_bytes_sent("reduce_scatter", k, a))
    rep.note(f"formula: cm.tp_step_traffic, 05's (gather at output: its backward calls priced as "
             f"all-reduces). e = {ELEM} B, A = B·d·e = {fmt_bytes(a)}. Forward, every side all-gathers L = "
             f"{L} times. Backward, the gradient of a layer's input, Σ_r dz_r·W_rᵀ, is a sum over ranks "
             f"(DTensor: Partial). Where the plan gathers at the next layer's input (declared Shard(-1)), "
             f"DTensor reduces it back to Shard(-1): a reduce-scatter, what 05 writes by hand. Where it "
             f"gathers at a layer's output, the next input is Replicate, and so is its gradient: an "
             f"all-reduce, {ratio:.2f}× the bytes ((p−1)/p·A → 2(p−1)/p·A), of which each rank uses only its "
             f"columns; and GELU runs on the whole tensor, p times.")
    counting_note(rep, ranks)


def counting_note(rep: Report, ranks: list[dict]) -> None:
    """How DTensor's collectives were counted, and what dist_count's patched methods saw of them."""
    python = sum(r[s]["python_calls"] for r in ranks for s in dt.PLANS)
    recorded = sum(sum(r[s]["log"].calls.values()) for r in ranks for s in dt.PLANS)
    unseen = sum(r[s]["group_ops_unseen"] or 0 for r in ranks for s in dt.PLANS)
    rep.values(dtensor_calls_recorded=recorded, dtensor_group_ops_unseen=unseen,
               dtensor_calls_through_python=python)
    rep.note(f"DTensor's collectives (every plan and rank): {recorded} logged by a dispatch mode, as "
             f"CommDebugMode counts them (cs336/dtensor_tp.py); common.dist_count's patched ProcessGroup "
             f"methods saw {python}: they are functional collectives (torch.ops._c10d_functional), which "
             f"reach the group from C++. The groups' own operation counters moved {unseen} times: none was "
             f"missed.")


def part2_megatron(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference,
                   input_grad: torch.Tensor) -> None:
    rep.part(2, "Megatron's pair: ColwiseParallel, then RowwiseParallel, on each block of two layers")
    k, d, b, blocks = args.world_size, args.width, args.batch, args.layers // 2
    found = side_gaps([r["Megatron"] for r in ranks], ref)
    found.append(max(mlp.max_abs_diff(r["input grad"]["input_grad"], input_grad) for r in ranks))
    rep.table(["max |diff| vs one process", "DTensor, Megatron"],
              [*zip(QUANTITIES, found[:4]), ["dL/dx, x needing a gradient", found[4]]], name="vs_one_process")
    check_sides(rep, "Megatron TP (DTensor)", found, ref)
    rep.value("p2_megatron_gap", max(found))
    one = [dt.megatron_traffic(k, blocks, b, d, ELEM)] * k
    grad_runs = [r["input grad"] for r in ranks]
    dt.traffic_table(rep, [
        ("a step, x is data", "p2_step", [r["Megatron"]["log"] for r in ranks], args.steps,
         [dt.megatron_traffic(k, 2 * blocks - 1, b, d, ELEM)] * k),
        ("dL/dx too: forward", "p2_forward", [r["forward"] for r in grad_runs], 1, one),
        ("… and backward", "p2_backward", [r["backward"] for r in grad_runs], 1, one)])
    a = b * d * ELEM
    both = max(r["forward"].per_step(1, dt.OPS)[1] + r["backward"].per_step(1, dt.OPS)[1] for r in grad_runs)
    rep.values(p2_input_grad_bytes=both, p2_notes_tp_bytes=cm.tp_step_bytes_per_device(blocks, a, k))
    rep.note(f"{blocks} blocks. W₁ by columns: each rank computes gelu(x·W₁_r), its own columns of the "
             f"hidden layer, with no communication; W₂ by rows: h_r·W₂_r is rank r's term of the block's "
             f"output (Partial), one all-reduce makes it whole (Megatron's g). Backward mirrors it: the "
             f"block's input gradient Σ_r dz_r·W₁_rᵀ is all-reduced (Megatron's f), except where the input "
             f"is data: block 1 of a step. Each all-reduce carries A = B·d·e = {fmt_bytes(a)}: 2(p−1)/p·A a "
             f"call. With x needing dL/dx, forward and backward together are the notes' 2L all-reduces of A "
             f"(cm.tp_step_bytes_per_device, L = {blocks} blocks): {fmt_bytes(both)}.")


def part3_mesh_2d(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    k, tp, L, d, b = args.world_size, args.tp, args.layers, args.width, args.batch
    dp = k // tp
    rep.part(3, f"a {dp} × {tp} mesh (dp, tp): Megatron's blocks within each row, data parallel across")
    runs = [r["2-D"] for r in ranks]
    by_row = [[r for r in runs if r["row"] == i] for i in range(dp)]
    output = torch.cat([row[0]["output"] for row in by_row])
    loss = sum(row[0]["rows"] * row[0]["loss"] for row in by_row) / b
    per_row = [[mlp.max_abs_diff(output, ref.output), abs(loss - ref.loss),
                mlp.max_abs_diff(dt.joined([r["grads"] for r in row]), ref.grads),
                mlp.max_abs_diff(dt.joined([r["params"] for r in row]), ref.params_after[-1])]
               for row in by_row]
    found = [max(g) for g in zip(*per_row)]
    rep.table(["max |diff| vs one process (worst row)", f"DTensor, {dp} × {tp}"], [*zip(QUANTITIES, found)],
              name="vs_one_process")
    check_sides(rep, f"DP × TP ({dp} × {tp} mesh)", found, ref)
    rep.value("p3_mesh_gap", max(found))
    local = sum(p.numel() for p, _ in runs[0]["params"])
    dt.traffic_table(rep, [
        ("tp: activations", "p3_tp", [r["tp_log"] for r in runs], args.steps,
         [dt.megatron_traffic(tp, L - 1, r["rows"], d, ELEM) for r in runs]),
        ("dp: gradient shards", "p3_dp", [r["dp_log"] for r in runs], args.steps,
         [dt.shard_average_traffic(dp, local, ELEM)] * k)])
    rep.value("p3_dtensor_dp_calls", sum(r["dtensor_dp_calls"] for r in runs))
    rep.note(f"each rank holds {local:,} of the {L * d * d:,} weights (1/{tp}) and {runs[0]['rows']} of the "
             f"{b} rows. tp carries activations ({L // 2} all-reduces of rows × d forward, {L // 2 - 1} "
             f"backward) in groups of {tp}, counted by DTensorComm; dp carries gradients: one all-reduce of "
             f"my shards, 1/{tp} of the model, with the {dp} ranks holding the same ones, counted by "
             f"dist_count (a method call). The notes' Megatron keeps tp inside a node's fast links for that.")
    rep.note("The dp average is written out (× my rows, SUM over the dp group, ÷ B, as 05's data parallel, "
             "in one bucket as DDP): Megatron's DP, on shards. DDP itself refuses DTensor parameters in "
             "torch 2.13 (its first broadcast has no DTensor sharding strategy); FSDP2's fully_shard over dp "
             "would shard the parameters as well (ZeRO-3).")


def check_args(args: argparse.Namespace) -> None:
    """Sizes every part can split evenly: a row of at least 2 tp ranks, at least 2 rows; pairs of layers."""
    k, tp = args.world_size, args.tp
    if tp < 2 or k % tp or k // tp < 2:
        raise UsageError(f"--world-size {k} must be --tp {tp} (at least 2) times a data-parallel size "
                         "of at least 2")
    if args.layers < 2 or args.layers % 2:
        raise UsageError(f"--layers {args.layers}: Megatron's blocks pair the layers, so an even number, "
                         "at least 2")
    if args.width % k:
        raise UsageError(f"--width {args.width} must be a multiple of --world-size {k}: DTensor cuts "
                         "uneven widths as torch.chunk, 05 as tensor_split: they would hold other columns")
    if args.batch < k // tp:
        raise UsageError(f"--batch {args.batch} < {k // tp} data-parallel rows: every row needs a sample")
    if args.layers * args.width**2 > MAX_PARAMS:
        raise UsageError(f"--layers × --width² must be at most {MAX_PARAMS:,} (a few seconds on a laptop)")


def main() -> None:
    parser = make_parser(__doc__, world_size=4, tp=2, layers=8, width=128, batch=32, steps=3, seed=0,
                         real=True, quick={"steps": 2}, cost=COST,
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
    ranks = launch(engines_worker, args.world_size, params, x, args.steps, args.tp, timeout_s=args.timeout_s)
    part1_notes_layout(rep, args, ranks, ref)          # ColwiseParallel on each layer, 05 by hand
    part2_megatron(rep, args, ranks, ref, input_grad)  # column -> row: an all-reduce a block forward
    part3_mesh_2d(rep, args, ranks, ref)               # dp × tp: the bytes on each mesh dimension
    rep.finish()


if __name__ == "__main__":
    run_main(main)
