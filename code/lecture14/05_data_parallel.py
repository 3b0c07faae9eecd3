"""Lecture 14 §4 (数据并行): partition, average gradients, train step; equivalence, pitfalls, async, speedup.

    python code/lecture14/05_data_parallel.py [--world-size 4] [--seed 0] [--ps-workers 8] [--quick]

Parts 1–6 follow §4 of the notes (the §2.2 deadlock is 02_primitives.py Part 4).
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import random

import torch
import torch.distributed as dist
from torch import nn

from common.cli import link_from_args, make_parser
from common.costmodel.collectives import algorithm
from common.error_types import UsageError
from common.flags import positive_float, positive_int
from common.launch import ask_gloo, gloo_lacks, launch, preload_for_ddp, rank_device
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import MOVED_SHARE
from common.units import fmt_bytes, fmt_time
from lecture14 import async_sgd, figures
from lecture14 import data_parallel as dp
from lecture14.costmodel import data_parallel_speedup

D_IN, HIDDEN = 8, 16        # the small float64 MLP regression of Parts 2 and 4
SAMPLES = 64                # divisible by 2, 4 and 8, so every simulated shard has the same size
PER_RANK_REAL = 16          # the real HW5 run uses 16·W samples: equal shards for any W
LR = 0.1
UNEQUAL_SAMPLES, UNEQUAL_RANKS = 10, 4   # Part 3: the notes' 10 samples on 4 ranks (3, 3, 2, 2)
MICRO_BATCHES = 4           # Part 4
GRAD_COMPUTATIONS = 400     # Part 5: gradient computations per schedule
PS_SAMPLES, PS_DIM, PS_BATCH = 256, 10, 8
PS_LRS = [0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 1.0]
GRAD_SIZES_MB = [10, 100, 400]           # Part 6


# CPU time here (bench/bench_costs.py, W = 2 … 32): the one-process parts, then one launch of HW5's
# training; W ranks take turns on 2 cores. No flag allocates by size (--ps-workers is bounded below).
COST = Cost([Term("1", 7.0, lambda a: 1), Term("W", 0.19, lambda a: a.world_size),
             Term("W²", 0.015, lambda a: a.world_size**2)])


def main() -> None:
    parser = make_parser(__doc__, world_size=4, alpha_us=5.0, beta_gbs=25.0, seed=0, real=True, figs=True,
                         cost=COST, context={"seed": "data, model and partition"})
    parser.add_argument("--ps-workers", type=positive_int, default=8, help="Part 5 workers")
    parser.add_argument("--step-ms", type=positive_float, default=20.0, help="Part 6: single-GPU step time "
                                                                             "in ms")
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be at least 2 (data parallelism needs two ranks), got "
                         f"{args.world_size}")
    if args.ps_workers > GRAD_COMPUTATIONS:
        raise UsageError(f"--ps-workers must be at most {GRAD_COMPUTATIONS}, got {args.ps_workers}")
    ask_gloo()  # does gloo have AVG and reduce_scatter? asked once here; forked ranks inherit it
    rep = Report(__file__, "data parallelism (lecture 14 §4)", args)
    rep.part(1, "partition_indices: the same split on every rank, without communication")
    part1_partition(rep, args)      # HW5 1.1: seeded shuffle, size // W plus remainder, no communication
    rep.part(2, "K replicas = one big batch (mathematically), but not bit-identical")
    part2 = part2_equivalence(rep, args)  # K replicas vs one big batch; HW5 on real gloo ranks
    rep.part(3, f"pitfall: unequal shards ({UNEQUAL_SAMPLES} samples on {UNEQUAL_RANKS} ranks)")
    part3_unequal_shards(rep, args)  # 3,3,2,2: the mean of means is biased; weight or sum-then-divide
    rep.part(4, f"gradient accumulation: {MICRO_BATCHES} micro-batches on one rank vs {MICRO_BATCHES} ranks")
    part4_accumulation(rep, args, part2)  # micro-batches in time = ranks in space (Part 2's runs)
    rep.part(5, f"parameter server: synchronous vs asynchronous with stale gradients ({args.ps_workers} "
                "workers)")
    part5_async(rep, args)          # sync vs async parameter server, stale gradients, divergence
    rep.part(6, "speedup without overlap: T1 / (T1/K + T_comm), ring all-reduce")
    part6_speedup(rep, args)        # T1 / (T1/K + T_comm) and HW5's 1.4× budget
    rep.finish()


# ---- rank code: each returns data; the parent prints --------------------------------------------

def partition_worker(rank: int, world_size: int, size: int, seed: int) -> list[int]:
    """No communication: every rank derives the whole permutation and keeps its own slice."""
    return dp.partition_indices(size, world_size, rank, seed)


def hw5_worker(rank: int, world_size: int, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
               steps: int, seed: int) -> tuple[list[float], dict]:
    """HW5 as a student writes it: my shard, my optimizer, train_step with average_gradients."""
    shard = dp.partition_indices(len(x), world_size, rank, seed)
    device = rank_device()  # the CPU under gloo; this rank's GPU under NCCL
    model = model.to(device)  # this rank's own copy (forked, pickled, or torchrun's)
    inputs, targets = x[shard].to(device), y[shard].to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(steps):
        dp.train_step(model, optimizer, nn.functional.mse_loss, inputs, targets)
    return dp.flat_params(model).tolist(), average_checks(rank, device)


def average_checks(rank: int, device: torch.device) -> dict:
    """§4.1 on this rank: why average_gradients is SUM then ÷ W (does gloo take ReduceOp.AVG?), and
    that a parameter whose grad is None is skipped. Whether gloo has AVG was asked once, before the
    ranks started; no error of a real collective is caught here (a failing rank is the launcher's)."""
    error = gloo_lacks("avg") or ""  # older gloo: "Cannot use ReduceOp.AVG with Gloo"
    avg = None
    if not error:  # in a gloo group (a new one when the default group is NCCL, which has AVG)
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
        avg = t.tolist()
    # The second layer takes no part in the forward: its grad stays None on every rank.
    model = nn.ModuleDict({"used": nn.Linear(3, 1), "unused": nn.Linear(3, 1)}).double().to(device)
    x = torch.tensor([[rank + 1.0, 2.0 * rank, 1.0]], dtype=torch.float64, device=device)
    model["used"](x).sum().backward()  # integer-valued gradients (x and 1): exact in any sum order
    local = [g for p in model["used"].parameters() for g in p.grad.reshape(-1).tolist()]
    dp.average_gradients(model)
    return {"avg": avg, "avg_error": error, "local": local,
            "averaged": [g for p in model["used"].parameters() for g in p.grad.reshape(-1).tolist()],
            "unused_none": all(p.grad is None for p in model["unused"].parameters())}


# ---- the parts ----------------------------------------------------------------------------------
def part1_partition(rep: Report, args: argparse.Namespace) -> None:
    w, size = args.world_size, UNEQUAL_SAMPLES
    state_before = random.getstate()
    shards = launch(partition_worker, w, size, args.seed, backend="auto", timeout_s=args.timeout_s)
    rows = [[r, len(s), " ".join(map(str, s))] for r, s in enumerate(shards)]
    rep.table(["real rank", "samples", "indices (its slice of the seeded shuffle)"], rows, name="real_ranks")
    covered = sorted(i for s in shards for i in s) == list(range(size))
    rows, drops_remainder = [], True
    for n in sorted({max(w - 1, 0), w, size, 1003}):
        parts = [dp.partition_indices(n, w, r, args.seed) for r in range(w)]  # W independent calls
        sizes = [len(p) for p in parts]
        once = sorted(i for p in parts for i in p) == list(range(n))
        naive_kept = sum(dp.naive_proportional_sizes(n, w))
        drops_remainder &= n - naive_kept == n % w
        rows.append([n, " ".join(map(str, sizes)), "yes" if once else "NO", n % w, naive_kept,
                     n - naive_kept])
    rep.table(["size", f"sizes (W = {w})", "each index once", "ranks +1", "int(size/W) keeps", "drops"], rows,
              name="sizes")
    untouched = random.getstate() == state_before  # the shuffles left the global random state alone
    rep.note("rank r gets size // W samples, the first size % W ranks one more; slicing by the "
             "fraction 1/W instead (naive, not used) drops the remainder.")
    rep.value("partition_ranks", w)
    rep.value("seed", args.seed)
    rep.value("partition_alone_covers", covered and untouched)
    rep.value("proportional_drops_remainder", drops_remainder)


def part2_equivalence(rep: Report, args: argparse.Namespace) -> dict:
    steps = 5 if args.quick else 20
    x, y = dp.make_regression_data(SAMPLES, D_IN, args.seed)
    model = dp.make_mlp(D_IN, HIDDEN, args.seed)
    reference, losses = dp.train_full_batch(model, x, y, steps, LR)
    rows, diffs, all_identical, runs = [], [], True, {}
    for k in (2, 4, 8):
        shards = [dp.partition_indices(SAMPLES, k, r, args.seed) for r in range(k)]
        run = runs[k] = dp.simulate_data_parallel(model, x, y, shards, steps, LR)
        identical = all(torch.equal(dp.flat_params(run.replicas[0]), dp.flat_params(m)) for m in run.replicas)
        all_identical &= identical
        diffs.append(dp.max_abs_diff(run.replicas[0], reference))
        rows.append([str(k), SAMPLES // k, "yes" if identical else "NO", diffs[-1], run.losses[-1], "-"])
    results, real_row = hw5_on_real_ranks(rep, args, model, steps)
    rep.table(["K", "samples each", "bit-identical", "max |Δθ|, full batch", "loss at last step",
               "= one process"], rows + [real_row], name="replicas")
    w = args.world_size
    rep.line(f"  full batch: {SAMPLES} samples, MLP {D_IN}→{HIDDEN}→1 (tanh), float64, SGD lr {LR}, "
             f"{steps} steps; loss {losses[0]:.4g} → {losses[-1]:.4g}; the last row: HW5's train_step and "
             f"average_gradients on {w} real ranks ({PER_RANK_REAL * w} samples), its weights held to one "
             f"process (= one process: ok = within {MOVED_SHARE:g} of how far they moved)")
    rep.value("replicas_identical", all_identical)
    rep.value("full_batch_gap", max(diffs))
    rep.value("steps", steps)
    average_gradients_checks(rep, w, [c for _, c in results])
    return {"model": model, "x": x, "y": y, "steps": steps, "full": reference, "runs": runs}


def hw5_on_real_ranks(rep: Report, args: argparse.Namespace, model: nn.Module, steps: int
                      ) -> tuple[list, list]:
    """HW5's functions on W real ranks, against the same training in one process: the ranks'
    results, and Part 2's row for them, its self-checks marks in the row."""
    w = args.world_size
    xr, yr = dp.make_regression_data(PER_RANK_REAL * w, D_IN, args.seed)
    preload_for_ddp(w)  # the ranks' first optimizer imports torch._dynamo
    results = launch(hw5_worker, w, model, xr, yr, steps, args.seed, backend="auto", timeout_s=args.timeout_s)
    params = [torch.tensor(p, dtype=torch.float64) for p, _ in results]
    shards = [dp.partition_indices(len(xr), w, r, args.seed) for r in range(w)]
    simulated = dp.simulate_data_parallel(model, xr, yr, shards, steps, LR).replicas[0]
    full, _ = dp.train_full_batch(model, xr, yr, steps, LR)
    moved = dp.max_abs_diff(full, model)   # how far one process moved the weights: the checks' scale
    # gloo may add the ranks' gradients in another order than the simulation's rank order: the last
    # bit may differ (with W = 2 it cannot: a + b = b + a). Every rank must hold the same bits.
    others = "rank 1" if w == 2 else f"ranks 1–{w - 1}"
    apart = max(dp.max_abs_diff(params[0], p) for p in params)
    identical = rep.mark(f"HW5 on {w} ranks, {others} vs rank 0", apart <= 0.0,
                         f"max |difference| {apart:.3g}, above the tolerance 0")
    # Trained weights against one process, judged as check_trained judges them: the gap as a share of
    # how far one process moved the weights.
    marks, gaps = [], {}
    for what, one_process in (("shards simulated", simulated), ("full batch", full)):
        gap = gaps[what] = dp.max_abs_diff(params[0], dp.flat_params(one_process))
        marks.append(rep.mark_trained(f"HW5 on {w} ranks ({what}) against one process", gap, moved)[0])
    row = [f"{w} real ranks", len(xr) // w, "yes" if identical == "ok" else "NO", gaps["full batch"], "-",
           "ok" if all(m == "ok" for m in marks) else "FAILED"]
    return results, row


def average_gradients_checks(rep: Report, w: int, checks: list[dict]) -> None:
    """§4.1 on the real ranks: 'gloo has no AVG', 'SUM then ÷ world_size', 'skip grad None', against
    the mean taken here."""
    mean = [sum(values) / w for values in zip(*(c["local"] for c in checks))]
    rep.check_close(f"average_gradients on {w} ranks vs their mean gradient here",
                    max(abs(a - b) for c in checks for a, b in zip(c["averaged"], mean)), 0.0)
    if checks[0]["avg"] is not None:  # this gloo takes AVG: it must give the mean (1 + … + W) / W
        rep.check_close(f"all_reduce(op=ReduceOp.AVG) on {w} gloo ranks vs the mean",
                        max(abs(v - (w + 1) / 2) for c in checks for v in c["avg"]), 0.0)
    rep.value("gloo_rejects_avg", checks[0]["avg"] is None)
    rep.value("torch_version", torch.__version__)
    rep.value("avg_outcome",
              f"raised: {checks[0]['avg_error']}" if checks[0]["avg"] is None else "accepts AVG")
    rep.value("sum_then_divide_is_mean", all(c["averaged"] == mean for c in checks))
    rep.value("skips_none_grads", all(c["unused_none"] and c["averaged"] == mean for c in checks))


def part3_unequal_shards(rep: Report, args: argparse.Namespace) -> None:
    n, k = UNEQUAL_SAMPLES, UNEQUAL_RANKS
    shards = [dp.partition_indices(n, k, r, args.seed) for r in range(k)]
    counts = [len(s) for s in shards]
    weights = dp.sample_weights_naive(counts)
    weight_error = sum((w - 1 / n) ** 2 for w in weights) ** 0.5 / (n * (1 / n) ** 2) ** 0.5
    rep.line(f"  shards {counts}; each sample's weight in the naive mean of means 1/(K·n_r): "
             f"{', '.join(sorted({f'1/{k * c}' for c in counts}))} instead of 1/{n}")
    # Two data sets through the same code: one-hot inputs make the per-sample gradients orthogonal
    # and of equal length, so the gradient error is exactly the weight-vector error; the MLP is generic.
    onehot = nn.Linear(n, 1, bias=False).double()
    nn.init.zeros_(onehot.weight)
    cases = [("orthogonal: one-hot x, y = 1, linear at 0", onehot,
              torch.eye(n, dtype=torch.float64), torch.ones(n, 1, dtype=torch.float64)),
             (f"MLP regression as in Part 2, seed {args.seed}", dp.make_mlp(D_IN, HIDDEN, args.seed),
              *dp.make_regression_data(n, D_IN, args.seed))]
    rows, rel = [], {}
    for name, model, x, y in cases:
        full = dp.flat_grads(model, x, y)
        means = [dp.flat_grads(model, x[s], y[s]) for s in shards]
        sums = [dp.flat_grads(model, x[s], y[s], "sum") for s in shards]
        rel[name] = [((g - full).norm() / full.norm()).item() for g in (
            dp.combine_naive_mean(means, counts), dp.combine_weighted(means, counts),
            dp.combine_sum_then_divide(sums, counts))]
        rows.append([name, *rel[name]])
    rep.table(["data (gradients at initialisation)", "naive: mean of means", "weighted by n_r",
               "sum, then ÷ N"], rows, name="relative_error")
    rep.note("each column is the relative error ‖g − g_full‖₂ / ‖g_full‖₂ over all parameters.")
    seeds = 10 if args.quick else 50
    spread = sorted(dp.naive_error(s, shards, counts, D_IN, HIDDEN) for s in range(seeds))
    rep.line(f"  naive error on the MLP data over {seeds} data seeds: min {100 * spread[0]:.1f} %, "
             f"median {100 * spread[seeds // 2]:.1f} %, max {100 * spread[-1]:.1f} %")
    onehot, mlp = rel[cases[0][0]], rel[cases[1][0]]
    rep.value("unequal_shards", " ".join(map(str, counts)))
    rep.value("naive_error_orthogonal_pct", 100 * onehot[0])
    rep.value("naive_error_mlp_pct", 100 * mlp[0])
    rep.value("weight_vector_error_pct", 100 * weight_error)
    rep.value("sum_then_divide_error", mlp[2])
    rep.value("weighted_error", mlp[1])


def part4_accumulation(rep: Report, args: argparse.Namespace, part2: dict) -> None:
    model, x, y, steps, full = (part2[key] for key in ("model", "x", "y", "steps", "full"))
    parts = [dp.partition_indices(SAMPLES, MICRO_BATCHES, r, args.seed) for r in range(MICRO_BATCHES)]
    accumulated = dp.train_grad_accumulation(model, x, y, parts, steps, LR)
    parallel = part2["runs"][MICRO_BATCHES].replicas[0]  # Part 2's K = 4 run: these slices, these steps
    to_dp, to_full = dp.max_abs_diff(accumulated, parallel), dp.max_abs_diff(accumulated, full)
    rep.table(["comparison (same model, data and slices, " + f"{steps} steps)", "max |Δθ|"],
              [["accumulation vs simulated data parallel", to_dp],
               ["accumulation vs full batch", to_full]], name="accumulation")
    rep.value("accumulation_gap", to_dp)
    rep.value("micro_batches", MICRO_BATCHES)
    rep.note("split a batch in space (ranks) or in time (micro-batches): same gradient; combined, each rank "
             "accumulates and all-reduces after its last micro-batch only (DDP's no_sync, lecture 15)")


def part5_async(rep: Report, args: argparse.Namespace) -> None:
    k = args.ps_workers
    # How late a gradient lands on an asynchronous server (the notes: K − 1): the τ of the columns below.
    rows = async_sgd.staleness_rows(sorted({1, 2, 4, 8, 16, k}), GRAD_COMPUTATIONS, args.seed)
    rep.line(f"  how late a gradient arrives: K workers push to an asynchronous server, {GRAD_COMPUTATIONS} "
             f"gradients, counted after the first K; random speeds: each worker's time per gradient drawn "
             f"from 0.5 … 1.5 (seed {args.seed})")
    rep.table(["K", "K − 1", "equal speeds: mean", "equal: min", "equal: max", "random speeds: mean"], rows,
              name="staleness")
    rep.value("staleness_at_8", next(r[2] for r in rows if r[0] == 8))
    problem = dp.make_least_squares(PS_SAMPLES, PS_DIM, GRAD_COMPUTATIONS, PS_BATCH, args.seed)
    taus = sorted({t for t in (0, 1, (k - 1) // 2, k - 1) if t <= k - 1})
    sw = async_sgd.run_sweep(problem, k, PS_LRS, taus)
    curvature = problem.largest_curvature()
    rows = [[lr, lr * curvature, *[f"{v:.4g}" if not sw.diverged(v) else "diverged" for v in finals]]
            for lr, finals in zip(PS_LRS, sw.finals)]
    rep.table(["lr", "lr·λmax", f"sync ({GRAD_COMPUTATIONS // k} updates)",
               *[f"async τ={t}" for t in taus]], rows, name="final_loss")
    limits = ", ".join(f"τ={t}: {dp.delayed_gd_stable_limit(t):.3g}" for t in taus)
    rep.line(f"  full-batch gradient descent with τ-old gradients is stable for lr·λmax below {limits}")
    rep.note(f"least squares L(w) = |Aw − b|²/2n, A: {PS_SAMPLES}×{PS_DIM} N(0,1), b = A·w* + 0.1·noise, w₀ "
             f"= 0 (L = {sw.start:.3g}, optimum {sw.optimum:.3g}), seed {args.seed}; gradient j uses the "
             f"j-th of {GRAD_COMPUTATIONS} fixed mini-batches of {PS_BATCH}, the same in every column. sync: "
             f"each update averages {k} gradients at the current w; async τ: each gradient is one update, "
             "computed at w as it was τ updates earlier. 'diverged' = overflowed or ended above the starting "
             "loss.")
    # the notes' §4.3 statements, read off
    for name, value in async_sgd.findings(sw, problem, k, args.seed).items():
        rep.value(name, value)
    if rep.figure_dir():
        panels = async_sgd.curve_panels(problem, k, (PS_LRS[0], 0.2), taus)
        rep.save_figure(figures.async_curves(panels, k, sw.optimum, sw.start, f"seed {args.seed}, "
                                            f"{GRAD_COMPUTATIONS} mini-batches of {PS_BATCH}"),
                        "async_sgd_loss")


def part6_speedup(rep: Report, args: argparse.Namespace) -> None:
    link, t1 = link_from_args(args), args.step_ms * 1e-3
    rep.line(f"  T1 = {args.step_ms:g} ms, {link.describe()}, MB = 1e6 B")
    ks = sorted({1, 2, 4, 8, 16, 32, 64, args.world_size})
    comms = {k: [algorithm("ring all-reduce").time(k, mb * 1e6, link) for mb in GRAD_SIZES_MB] for k in ks}
    rows = [[k, fmt_time(t1 / k), *map(fmt_time, comm), *[data_parallel_speedup(t1, k, c) for c in comm]]
            for k, comm in comms.items()]
    rep.table(["K", "T1/K", *[f"T_comm {mb} MB" for mb in GRAD_SIZES_MB],
               *[f"speedup {mb} MB" for mb in GRAD_SIZES_MB]], rows, name="speedup")
    rep.note("compute shrinks as 1/K while the ring's time tends to 2N/β: the speedup saturates "
             "(and even falls once the 2(K − 1)·α latency grows).")
    for mb, k in ((10, 8), (100, 8), (400, 2)):  # the notes' three cases
        comm = algorithm("ring all-reduce").time(k, mb * 1e6, link)
        rep.value(f"speedup_{mb}mb_{k}gpus", data_parallel_speedup(t1, k, comm))
        rep.value(f"t_comm_{mb}mb_{k}gpus_ms", comm * 1e3)
    fraction = 1 / 1.4 - 1 / 2  # T1/K + T_comm ≤ T1/1.4 with K = 2
    comm_big = [algorithm("ring all-reduce").time(kk, 100e6, link) for kk in (8, 64)]
    big = [data_parallel_speedup(t1, kk, comm) for kk, comm in zip((8, 64), comm_big)]
    rep.value("step_ms", args.step_ms)
    rep.value("hw5_comm_budget", fraction)
    rep.value("speedup_100mb_64gpus", big[1])
    rep.value("speedup_gain_8_to_64", big[1] / big[0])
    rep.value("t_comm_100mb_64gpus_ms", comm_big[1] * 1e3)
    budget = fraction * t1  # ring on 2 devices: 2(α + N/(2β)) ≤ budget  ⇒  N ≤ (budget − 2α)·β
    largest = max(0.0, (budget - 2 * link.alpha_s) * link.beta_Bps)
    rep.line(f"  T_comm ≤ {budget * 1e3:.3g} ms: on this link, gradients up to {fmt_bytes(largest)} on 2 "
             "GPUs")
    rep.value("largest_gradient_bytes_for_1.4x", largest, compared=False)
    if rep.figure_dir():
        by_size = {f"{mb} MB": [r[2 + len(GRAD_SIZES_MB) + i] for r in rows]
                   for i, mb in enumerate(GRAD_SIZES_MB)}
        rep.save_figure(figures.speedup(ks, by_size, t1, link), "speedup")


if __name__ == "__main__":
    run_main(main)
