"""CS336 lecture 8 (数据并行, 张量并行, 流水线并行, ZeRO): the notes' deep-MLP sketches on real ranks.

    python code/cs336/05_parallel.py [--world-size 4] [--layers 8] [--width 128] [--batch 32]
    python code/cs336/05_parallel.py --world-size 3 --layers 7 --width 100 --batch 30   # uneven

One launch runs every strategy on the same ranks (gloo, CPU, float64): data parallel (Part 1),
tensor parallel with its backward written out (Part 2), a GPipe pipeline over send/recv (Part 3),
ZeRO-1 and ZeRO-2 with Adam (Part 4). Each is compared with the same model trained in one process
(cs336/mlp.py): output, loss, every gradient, parameters after the steps; a gap beyond round-off
ends the run in exit 1, naming the strategy. Every call goes through cs336/comm.py, which counts
it; Part 5 puts the counts beside costmodel's formulas and the notes'.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common.cli import make_parser
from common.costmodel.collectives import algorithm, padded_shard_elements, split_sizes
from common.costmodel.steps import dp_step_traffic, pp_step_traffic, tp_step_traffic, zero_step_traffic
from common.error_types import UsageError
from common.launch import ask_gloo, gloo_lacks, launch
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import MOVED_SHARE
from common.units import fmt_bytes
from cs336 import comm, ledger, mlp

ELEM = 8                # float64: one process and the ranks differ only in summation order
MAX_PARAMS = 2**24      # 128 MiB of float64 per copy; every rank holds at least one
# CPU time here (bench/bench_costs.py: 15 runs, W = 2 … 24, fitted within 6 %). The W³ term is every
# collective's 2(W − 1) ring rounds, each waiting for W processes to take turns on 2 cores: 4 s at W = 8,
# L = 8, but 2 h at W = 64, L = 64. Memory: each process's copies of the model, its Adam state and
# the activations of every layer (float64), for W ranks and the parent's two reference runs.
COST = Cost([Term("1", 6.0, lambda a: 1), Term("W²", 0.04, lambda a: a.world_size**2),
             Term("W·L·steps", 0.012, lambda a: a.world_size * a.layers * a.steps),
             Term("W³·L·steps", 0.00027, lambda a: a.world_size**3 * a.layers * a.steps),
             Term("W·L·steps·(d/100)²", 0.003,
                  lambda a: a.world_size * a.layers * a.steps * (a.width / 100) ** 2),
             Term("L·steps·B·(d/1000)²", 0.013,
                  lambda a: a.layers * a.steps * a.batch * (a.width / 1000) ** 2),
             Term("M·W·steps", 0.0065, lambda a: a.micro_batches * a.world_size * a.steps)],
            memory=lambda a: ELEM * (a.world_size + 2) * 4 * a.layers * a.width * (a.batch + a.width))
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, which the reference uses
# A strategy and one process differ only in the order of float64 additions: round-off near 1e-16 of
# values of order 1. A gap above this is a bug (a lost reduce, a wrong slice): the run ends in exit 1.
CHECK_TOL = 1e-9


def main() -> None:
    parser = make_parser(__doc__, world_size=4, layers=8, width=128, batch=32, micro_batches=4, steps=3,
                         seed=0, real=True, quick={"steps": 2}, cost=COST,
                         context={"width": "d of every layer", "micro_batches": "the pipeline's M",
                                  "steps": "optimizer steps", "seed": "weights and data"})
    args = parser.parse_args()
    check_args(args)
    k = args.world_size
    ask_gloo()  # does gloo have AVG and reduce_scatter? asked once here; forked ranks inherit it
    params, x = (
        mlp.make_params(args.layers, args.width, args.seed),
        mlp.make_batch(args.batch, args.width, args.seed),
    )
    # One process first: its optimizer imports torch._dynamo (~1 s), which forked ranks then inherit
    # instead of importing it four times over on two cores (the launch: 5 s -> 1 s here).
    sgd = mlp.train_one_process(params, x, args.steps, "sgd")
    adam = mlp.train_one_process(params, x, args.steps, "adam")
    sgd.refuse_still_weights(f"--layers {args.layers} --width {args.width}")
    rep = Report(__file__, "data, tensor and pipeline parallelism and ZeRO on the deep MLP (CS336 lecture 8)",
                 args)
    rep.line(f"  {args.layers} layers x = gelu(x @ W), W {args.width}×{args.width}, batch {args.batch}, loss "
             f"= mean(x²), float64;\n  {k} real ranks (gloo, one launch for every part), {args.steps} steps")
    ranks = launch(strategies_worker, k, params, x, args.steps, args.micro_batches, timeout_s=args.timeout_s)
    rep.part(1, "data parallel: a slice of the batch per rank, all-reduce of every W.grad")
    part1_data_parallel(rep, args, ranks, sgd)       # the notes' DP loop: slices, SUM then ÷ B
    rep.part(2, "tensor parallel: column slices of every W, all-gather forward, reduce-scatter backward")
    part2_tensor_parallel(rep, args, ranks, sgd)     # column slices, all-gather, the backward derived
    rep.part(3, "pipeline parallel: a block of layers per rank, micro-batches over send/recv (GPipe)")
    part3_pipeline(rep, args, ranks, sgd)            # stages, micro-batches, send/recv both ways
    rep.part(4, "ZeRO-1 and ZeRO-2: reduce-scatter gradients, Adam on my shard, all-gather parameters")
    part4_zero(rep, args, ranks, adam)               # reduce-scatter, Adam on a shard, all-gather
    rep.part(5, "traffic per rank per step: calls counted on the ranks, their bytes in the ring model, "
                "the cost model's formula, the notes' estimate")
    part5_summary(rep, args, ranks)                  # counted bytes and calls vs formulas vs the notes
    rep.finish()


# ---- rank code: the notes' sketches, each step in full; the parent compares and prints -----------
def data_parallel_rank(params: list[torch.Tensor], x: torch.Tensor, steps: int, log: comm.CommLog) -> dict:
    rank, k = dist.get_rank(), dist.get_world_size()
    mine = x.tensor_split(k)[rank]                      # my slice; the first B % k slices one longer
    ws = [w.clone().requires_grad_() for w in params]   # a whole replica of the model
    opt, res = torch.optim.SGD(ws, lr=mlp.LR_SGD), {}
    for step in range(steps):
        opt.zero_grad()
        out = mlp.forward(ws, mine)
        loss = out.square().mean()                      # the mean over MY slice, as in the sketch
        loss.backward()
        if step == 0:                                   # the sketch's op=AVG, on copies (not counted)
            avg = [w.grad.clone() for w in ws]
            for g in avg:
                if gloo_lacks("avg"):                   # an older gloo: what AVG means
                    dist.all_reduce(g)
                    g.div_(k)
                else:
                    dist.all_reduce(g, op=dist.ReduceOp.AVG)
            res.update(output=out.detach(), loss=loss.item(), avg_grads=avg)
        for w in ws:                                    # the sketch: one all-reduce per W
            w.grad.mul_(len(mine))                      # weight my mean by my slice's size,
            comm.all_reduce_sum(w.grad, log)            # add up every rank's,
            w.grad.div_(len(x))                         # and divide by the whole batch
        if step == 0:
            res["grads"] = [w.grad.clone() for w in ws]
        opt.step()
    return res | {"params": [w.detach() for w in ws]}


def tensor_parallel_rank(params: list[torch.Tensor], x: torch.Tensor, steps: int, log: comm.CommLog) -> dict:
    rank, k = dist.get_rank(), dist.get_world_size()
    widths = split_sizes(x.shape[1], k)
    cols = slice(mlp.offsets(widths)[rank], mlp.offsets(widths)[rank] + widths[rank])
    ws = [w[:, cols].clone() for w in params]           # my column slice of every layer
    opt, res = torch.optim.SGD(ws, lr=mlp.LR_SGD), {}
    for step in range(steps):
        inputs, pre = [], []
        h = x                                           # every rank sees the whole batch
        for w in ws:                                    # the notes' forward: local matmul, gather
            inputs.append(h)
            pre.append(h @ w)
            h = comm.all_gather_columns(F.gelu(pre[-1]), widths, log)
        loss = h.square().mean()                        # every rank holds the whole output
        grad_out = (2 / h.numel() * h)[:, cols]         # dL/dh, my columns only
        grads: list[torch.Tensor] = [torch.empty(0)] * len(ws)
        for layer in reversed(range(len(ws))):          # the backward the notes leave as homework
            dz = grad_out * mlp.gelu_grad(pre[layer])   # through gelu, my columns
            grads[layer] = inputs[layer].T @ dz         # dL/dW_local = (full input)ᵀ · (my slice of dL/dz)
            if layer > 0:                               # the first layer's input is data
                grad_out = tp_input_gradient(dz, ws[layer], widths, log)
        if step == 0:
            res.update(output=h, loss=loss.item(), grads=grads)
        for w, g in zip(ws, grads):
            w.grad = g
        opt.step()
    return res | {"params": ws}


def tp_input_gradient(dz: torch.Tensor, w_local: torch.Tensor, widths: list[int],
                      log: comm.CommLog) -> torch.Tensor:
    """dL/d input = Σ_r dz_r · W_rᵀ: each rank holds one term of the sum. The layer below owns the
    same columns, so it needs only its columns of the sum: one reduce-scatter."""
    return comm.reduce_scatter_columns(dz @ w_local.T, widths, log)


def pipeline_rank(params: list[torch.Tensor], x: torch.Tensor, steps: int, micro_batches: int,
                  log: comm.CommLog) -> dict:
    rank, k = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == k - 1
    ws = [params[i].clone().requires_grad_() for i in mlp.stage_layers(len(params), k)[rank]]
    opt, res = torch.optim.SGD(ws, lr=mlp.LR_SGD), {}
    for step in range(steps):
        opt.zero_grad()
        inputs, outputs = [], []
        for chunk in x.tensor_split(micro_batches):     # GPipe: every micro-batch forward ...
            h = chunk if first else comm.recv(chunk.shape, rank - 1, log).requires_grad_()
            outputs.append(mlp.forward(ws, h))
            inputs.append(h)
            if not last:
                comm.send(outputs[-1].detach(), rank + 1, log)
        for m in reversed(range(micro_batches)):        # ... then every micro-batch backward
            if last:                                    # this micro-batch's share of the whole batch's mean
                (outputs[m].square().sum() / x.numel()).backward()
            else:
                outputs[m].backward(comm.recv(outputs[m].shape, rank + 1, log))
            if not first:
                comm.send(inputs[m].grad, rank - 1, log)
        if step == 0:
            out = torch.cat(outputs).detach()
            res.update(output=out, loss=out.square().mean().item(), grads=[w.grad.clone() for w in ws])
        opt.step()
    return res | {"params": [w.detach() for w in ws]}


def zero_rank(params: list[torch.Tensor], x: torch.Tensor, steps: int, stage: int, log: comm.CommLog) -> dict:
    rank, k = dist.get_rank(), dist.get_world_size()
    mine = x.tensor_split(k)[rank]
    ws = [w.clone().requires_grad_() for w in params]   # parameters stay whole on every rank
    flat = mlp.flatten_padded([w.detach() for w in ws], k)  # zero-padded to a multiple of k
    shard = len(flat) // k
    my_shard = flat[rank * shard:(rank + 1) * shard].clone()  # the only parameters I update
    m, v = torch.zeros_like(my_shard), torch.zeros_like(my_shard)  # my Adam state: 1/p of it
    res: dict = {"params_after": []}
    for t in range(1, steps + 1):
        for w in ws:
            w.grad = None
        mlp.forward(ws, mine).square().mean().backward()
        flat_grad = mlp.flatten_padded([w.grad for w in ws], k) * len(mine)  # weighted as in Part 1
        if stage == 2:                                  # ZeRO-2: drop the whole gradient at once
            for w in ws:
                w.grad = None
        g = comm.reduce_scatter_columns(flat_grad.view(1, -1), [shard] * k, log).view(-1) / len(x)
        del flat_grad
        res["grad_bytes"] = g.nbytes + sum(w.grad.nbytes for w in ws if w.grad is not None)
        # Adam on my shard, written as torch.optim.Adam computes it (defaults β = 0.9, 0.999, ε = 1e-8)
        m.mul_(ADAM_BETAS[0]).add_(g, alpha=1 - ADAM_BETAS[0])
        v.mul_(ADAM_BETAS[1]).addcmul_(g, g, value=1 - ADAM_BETAS[1])
        denom = v.sqrt() / math.sqrt(1 - ADAM_BETAS[1] ** t) + ADAM_EPS
        my_shard.addcdiv_(m, denom, value=-mlp.LR_ADAM / (1 - ADAM_BETAS[0] ** t))
        new = comm.all_gather_columns(my_shard.view(1, -1), [shard] * k, log).view(-1)
        with torch.no_grad():
            for w, piece in zip(ws, mlp.unflatten(new, ws)):
                w.copy_(piece)
        if rank == 0:
            res["params_after"].append([w.detach().clone() for w in ws])
    return res | {"shard": shard, "mv_bytes": m.nbytes + v.nbytes}


def strategies_worker(rank: int, world_size: int, params: list[torch.Tensor], x: torch.Tensor,
                      steps: int, micro_batches: int) -> dict:
    """Every strategy in turn on this rank, each with its own log of calls."""
    runs = {"DP": lambda log: data_parallel_rank(params, x, steps, log),
            "TP": lambda log: tensor_parallel_rank(params, x, steps, log),
            "PP": lambda log: pipeline_rank(params, x, steps, micro_batches, log),
            "ZeRO-1": lambda log: zero_rank(params, x, steps, 1, log),
            "ZeRO-2": lambda log: zero_rank(params, x, steps, 2, log)}
    out = {}
    for name, run in runs.items():
        log = comm.CommLog(world_size)
        out[name] = run(log) | {"log": log}
    return out


# ---- the parts: the parent compares with one process and prints ---------------------------------
def sizes_text(sizes: list[int]) -> str:
    """[11, 11, 10] -> '11, 11, 10'; long lists as counts: '20 × 2 + 12 × 1'."""
    if len(sizes) <= 8:
        return ", ".join(map(str, sizes))
    return " + ".join(f"{sizes.count(v)} × {v}" for v in sorted(set(sizes), reverse=True))


def compare(rep: Report, args: argparse.Namespace, ref: mlp.Reference, strategy: str, output: torch.Tensor,
            loss: float, grads: list[torch.Tensor], params: list[torch.Tensor],
            extra: list | None = None) -> None:
    """The table every strategy prints, max |diff| from one process (float64: round-off only), and
    the check that ends the run (exit 1, naming the strategy and the gap) beyond CHECK_TOL."""
    rows = [["output, step 1", mlp.max_abs_diff(output, ref.output)], ["loss, step 1", abs(loss - ref.loss)],
            [f"gradient of each of the {args.layers} W, step 1", mlp.max_abs_diff(grads, ref.grads)],
            *(extra or []), [f"parameters after {args.steps} SGD steps (lr {mlp.LR_SGD})",
             mlp.max_abs_diff(params, ref.params_after[-1])]]
    gap = max(r[1] for r in rows if r not in (extra or []))
    rep.value("max_diff", gap, compared=False)
    # step 1 to round-off; the trained weights (the last row) against how far they moved
    mark, _ = rep.mark_trained(f"{strategy} against one process", rows[-1][1], ref.moved,
                               max(r[1] for r in rows[:3]), CHECK_TOL)
    rep.table(["quantity", "max |diff| vs one process"],
              rows + [[f"step 1 ≤ {CHECK_TOL:g}, W ≤ {MOVED_SHARE:g} × the {ref.moved:.2g} moved", mark]],
              name="vs_one_process")


def part1_data_parallel(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    dp, sizes = [r["DP"] for r in ranks], split_sizes(args.batch, args.world_size)
    avg_gap = mlp.max_abs_diff(dp[0]["avg_grads"], ref.grads)
    compare(rep, args, ref, "DP", torch.cat([r["output"] for r in dp]),
            sum(n * r["loss"] for n, r in zip(sizes, dp)) / args.batch, dp[0]["grads"], dp[0]["params"],
            [["  the same with the sketch's op=AVG", avg_gap]])
    same = all(torch.equal(a, b) for r in dp for a, b in zip(r["params"], dp[0]["params"]))
    differ = len({r["loss"] for r in dp}) == len(dp)
    rep.note(f"batch slices {sizes_text(sizes)}; a rank's loss is its slice's mean, so its gradient counts "
             "n_r/B of the whole: × n_r, all-reduce (SUM), ÷ B. op=AVG weights every slice alike: right for "
             "equal slices.")
    rep.value("dp_losses_differ", differ)
    rep.value("dp_replicas_same", same)
    rep.value("dp_losses_differ_params_same", differ and same)
    rep.value("avg_is_batch_gradient", avg_gap <= CHECK_TOL)
    rep.value("slices", sizes_text(sizes))


def part2_tensor_parallel(rep: Report, args: argparse.Namespace, ranks: list[dict],
                          ref: mlp.Reference) -> None:
    tp, widths = [r["TP"] for r in ranks], split_sizes(args.width, args.world_size)
    def joined(key: str) -> list[torch.Tensor]:
        return [torch.cat([r[key][i] for r in tp], dim=1) for i in range(args.layers)]
    outputs = [r["output"] for r in tp]   # every rank holds the whole output: the worst of them
    worst = max(range(len(tp)), key=lambda i: mlp.max_abs_diff(outputs[i], ref.output))
    compare(rep, args, ref, "TP", outputs[worst], tp[worst]["loss"], joined("grads"), joined("params"))
    rep.note(f"column slices of width {sizes_text(widths)}; z = x·W, y = gelu(z); rank r holds W_r = W[:, "
             "cols_r] and the whole x. dL/dW_r = xᵀ · dz_r, dz_r = (dL/dy)[:, cols_r] ⊙ gelu'(z_r): local. "
             "dL/dx = Σ_r dz_r · W_rᵀ is a sum over ranks, of which the layer below needs its columns: one "
             "reduce-scatter (tp_input_gradient). L all-gathers, L − 1 reduce-scatters a step.")


def part3_pipeline(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    k, pp = args.world_size, [r["PP"] for r in ranks]
    compare(rep, args, ref, "PP", pp[-1]["output"], pp[-1]["loss"], [g for r in pp for g in r["grads"]],
            [p for r in pp for p in r["params"]])
    rows = []
    for rank, (r, layers) in enumerate(zip(pp, mlp.stage_layers(args.layers, k))):
        (sends, sent), recvs = (
            r["log"].per_step(args.steps, ("send",)),
            r["log"].per_step(args.steps, ("recv",))[0],
        )
        f_sends, f_sent = pp_step_traffic(k, rank, args.micro_batches, args.batch, args.width, ELEM)
        rows.append([rank, f"{layers.start}–{layers.stop - 1}", sends, f_sends, recvs, fmt_bytes(sent),
                     fmt_bytes(f_sent)])
    rep.table(["rank", "layers", "sends a step", "sends by the formula", "receives a step",
               "bytes sent a step, counted", "bytes by the formula"], rows, name="per_rank")
    rep.note(f"micro-batches of {sizes_text(split_sizes(args.batch, args.micro_batches))} rows; sends "
             "and their bytes counted by cs336/comm.py (point-to-point: what went on the wire). The backward "
             "mirrors the notes' forward-only sketch: a middle stage sends 2M a step. GPipe holds "
             "O(M) activations.")


def part4_zero(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    k, n = args.world_size, args.layers * args.width**2
    z1, z2 = [r["ZeRO-1"] for r in ranks], [r["ZeRO-2"] for r in ranks]
    gap = max(mlp.max_abs_diff(z[0]["params_after"][s], p) for z in (z1, z2)
              for s, p in enumerate(ref.params_after))
    rep.value("max_diff", gap, compared=False)
    mark, _ = rep.mark_trained("ZeRO-1 and ZeRO-2 (Adam) against one process", gap, ref.moved)
    rep.table(["after step", "ZeRO-1 max |diff| vs torch.optim.Adam", "ZeRO-2"],
              [[s + 1, mlp.max_abs_diff(z1[0]["params_after"][s], p),
                mlp.max_abs_diff(z2[0]["params_after"][s], p)] for s, p in enumerate(ref.params_after)]
              + [[f"≤ {MOVED_SHARE:g} × {ref.moved:.2g} moved", mark, mark]], name="vs_one_process")
    shard = padded_shard_elements(n, k)
    rows = [[r, a["shard"], a["mv_bytes"], ledger.optimizer_state_bytes(n, k, 2 * ELEM), a["grad_bytes"],
             b["grad_bytes"]] for r, (a, b) in enumerate(zip(z1, z2))]
    rep.table(["rank", "shard", "m+v bytes held", "2e·⌈P/p⌉", "ZeRO-1 grad bytes held", "ZeRO-2"], rows,
              name="state_bytes")
    pad = shard * k - n
    rep.note(f"P = {n:,} parameters + {pad} zeros of padding: {k} equal shards (unsharded, m and v: "
             f"{2 * ELEM * n:,} B a rank). float64, e = {ELEM} B: m and v are 2e·P/p (the notes' 12P/p is "
             "fp32 master + m + v). Gradient bytes at the step: ZeRO-1 holds the whole gradient and its "
             "shard, ZeRO-2 the shard.")
    rep.value("mv_is_shard",
              all(a["mv_bytes"] == ledger.optimizer_state_bytes(n, k, 2 * ELEM) for a in z1 + z2))


def part5_summary(rep: Report, args: argparse.Namespace, ranks: list[dict]) -> None:
    k, L, d, b, m = args.world_size, args.layers, args.width, args.batch, args.micro_batches
    n, act = L * d * d, b * d * ELEM
    busiest = max(range(k), key=lambda r: ranks[r]["PP"]["log"].sent.get("send", 0))
    cases = [("DP", ("all_reduce",), 0, dp_step_traffic(k, L, d, ELEM),
              f"2(p−1)/p·Pe {fmt_bytes(algorithm('ring all-reduce').busiest_bytes(k, n * ELEM))}"),
             ("TP", ("all_gather", "reduce_scatter"), 0, tp_step_traffic(k, L, d, b, ELEM),
              f"2L·2(p−1)/p·A {fmt_bytes(2 * L * algorithm('ring all-reduce').busiest_bytes(k, act))}"),
             (f"PP rank {busiest}", ("send",), busiest, pp_step_traffic(k, busiest, m, b, d, ELEM),
              f"A per boundary {fmt_bytes(act)}")]
    cases += [(z, ("reduce_scatter", "all_gather"), 0, zero_step_traffic(k, n, ELEM), "")
              for z in ("ZeRO-1", "ZeRO-2")]
    rows, agree = [], True
    for name, ops, rank, (f_calls, f_sent), notes_sent in cases:
        key = name.split()[0]
        counted = [r[key]["log"].per_step(args.steps, ops) for r in ranks]
        formulas = [pp_step_traffic(k, r, m, b, d, ELEM)
                    for r in range(k)] if key == "PP" else [(f_calls, f_sent)] * k
        equal = all(c == f[0] and math.isclose(s, f[1], rel_tol=1e-12)
                    for (c, s), f in zip(counted, formulas))
        agree &= equal
        rows.append([name, counted[rank][0], f_calls, fmt_bytes(counted[rank][1]), fmt_bytes(f_sent),
                     "yes" if equal else "NO", notes_sent])
    rep.table(["strategy", "calls, counted", "calls by the formula", "bytes sent: ring model, PP counted",
               "bytes by the formula", "all ranks as it", "notes' estimate"], rows, name="traffic")
    rep.value("counted_equals_formula", agree, compared=False)
    rep.note(f"e = {ELEM} B, A = B·d·e. Bytes: a collective's are the ring model's price of each counted "
             "call (costmodel.collectives' ring busiest_bytes at the call's size: what NCCL's ring sends), "
             "PP's sends are counted (what went on the wire). DP all-reduces each W apart: L calls where "
             "the notes count one (the same bytes). TP's calls send (p−1)/p each, the notes charge "
             "2(p−1)/p. ZeRO's RS + AG move one all-reduce.")
    rep.note("not what gloo ran here: gloo runs each reduce-scatter (TP's backward, ZeRO's gradients) as "
             "an all-reduce of every chunk (the profiler's gloo spans say so: cs336/gloo_ran.py), "
             "which a ring prices at 2(p−1)/p of the input a rank where a reduce-scatter's is (p−1)/p. The "
             "ring model's figure is NCCL's, which has a real reduce-scatter; 07_tensor_parallel.py shows "
             "both.")
    ops = {s: {op.replace("_", "-") for r in ranks for op in r[s]["log"].calls} for s in ("DP", "TP", "PP")}
    rep.value("dp_collectives", " + ".join(sorted(ops["DP"])))
    rep.value("tp_collectives", " + ".join(sorted(ops["TP"])))
    rep.value("pp_collectives", " / ".join(sorted(ops["PP"], reverse=True)))
    held_fractions(rep, args, ranks)


def held_fractions(rep: Report, args: argparse.Namespace, ranks: list[dict]) -> None:
    """The share of the weights a rank holds, in the notes' terms: 1 (all), 1/p (uneven splits within
    a column or a layer of it), else the fractions."""
    k, total = args.world_size, args.layers * args.width**2
    shares: list[str] = []
    for s, slack in (("DP", 0), ("TP", args.layers * args.width), ("PP", args.width**2)):
        held = [sum(w.numel() for w in r[s]["params"]) for r in ranks]
        one_p = sum(held) == total and all(abs(h - total / k) < slack for h in held)
        shares.append("1" if set(held) == {total} else "1/p" if one_p else f"{max(held) / total:.3g}")
    rep.value("held_fractions", ", ".join(shares))


def check_args(args: argparse.Namespace) -> None:
    """Sizes every strategy can split: at least one layer, column and sample per rank."""
    k = args.world_size
    if k < 2:
        raise UsageError(f"--world-size must be at least 2 (strategies split work between ranks), got {k}")
    for flag, value, what in [("--layers", args.layers, "a layer per pipeline stage"),
                              ("--width", args.width, "a column per tensor-parallel slice"),
                              ("--batch", args.batch, "a sample per data-parallel slice")]:
        if value < k:
            raise UsageError(f"{flag} {value} < --world-size {k}: every rank needs {what}")
    if args.micro_batches > args.batch:
        raise UsageError(f"--micro-batches {args.micro_batches} > --batch {args.batch}: a micro-batch needs "
                         "a row")
    if args.layers * args.width**2 > MAX_PARAMS:
        raise UsageError(f"--layers × --width² must be at most {MAX_PARAMS:,} (a few seconds on a laptop)")


if __name__ == "__main__":
    run_main(main)
