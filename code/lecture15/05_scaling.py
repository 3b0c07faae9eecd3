"""Lecture 15 §5 (扩展到几百块卡): weak scaling to 256 ranks, skipping synchronisation, convergence.

    python code/lecture15/05_scaling.py [--world-size 256] [--alpha-us 10] [--beta-gbs 10]
                                        [--bucket-cap-mb 25MB] [--sync-every 8] [--save-figs DIR]

Parts 1 and 2 use lecture15.ddp_sim's timeline (the model of §3: backward on one stream, buckets
all-reduced in index order on another, ring α-β cost). Part 3 trains a small least-squares problem
in this process (numpy, float64, seeded) to show what accumulating n micro-batch gradients per
update does to convergence. No processes, no torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math

import numpy as np

from common.cli import UsageError, link_from_args, make_parser, positive_float, positive_int, run_main
from common.costmodel import Link, ring_allreduce_time
from common.output import ASSUMPTION, EXACT, Report, bar, fmt_bytes
from lecture15.ddp_sim import (
    MB,
    ComputeModel,
    MiB,
    ModelSpec,
    bert_large,
    notes_bert_compute,
    notes_resnet_compute,
    resnet50,
    skip_sync_speedup,
    skip_sync_step_s,
    weak_scaling,
)
from lecture15.sync_every import (  # noqa: F401  (tests use them from here)
    CONV_DATA_SEED,
    CONV_DIM,
    CONV_NOISE,
    CONV_ORDER_SEED,
    QuadraticLoss,
    make_regression,
    micro_batches,
    plot_curves,
    train_accumulating,
    train_large_batch,
)

SCALING = ("world_size", "alpha_us", "beta_gbs", "bucket_cap_bytes")   # what Parts 1 and 2 depend on

# Part 3's problem: a fixed linear-regression task. Feature scales from 0.5 to 2 give a Hessian with
# eigenvalues from about 0.25 to 4, so plain SGD is stable for lr < 2/λ_max ≈ 0.5; the two learning
# rates below sit well inside (small) and inside only until it is multiplied by n (large).


# ---- Parts 1 and 2: the §3 timeline under weak scaling ------------------------------------------

def scaling_models() -> list[tuple[str, ModelSpec, ComputeModel]]:
    """ResNet-50 (batch 32) and BERT-large (4 × 512 tokens) with §3's calibrated compute, and BERT-large
    from its plain FLOP count at 16 TFLOP/s (uncalibrated)."""
    bert = bert_large()
    return [("ResNet-50", resnet50(), notes_resnet_compute()), ("BERT-large", bert, notes_bert_compute()),
            ("BERT-large, uncal.", bert, ComputeModel())]


def powers_of_two_up_to(top: int) -> list[int]:
    """1, 2, 4, … up to `top`, and `top` itself when it is not a power of two (world sizes, n)."""
    values = [2**i for i in range(top.bit_length())]
    return values if values[-1] == top else values + [top]


def part1_slowdown(rep: Report, args: argparse.Namespace, link: Link) -> dict[str, tuple[float, float]]:
    """Per-iteration slowdown at the top K against one rank, and throughput against K."""
    ks = powers_of_two_up_to(args.world_size)
    cap = args.bucket_cap_bytes
    rep.note(f"model: lecture 15 §3's timeline (lecture15.ddp_sim), {link.describe()}, buckets of "
             f"{fmt_bytes(cap)} (MB = 1e6 B; {cap / MiB:.4g} MiB; no smaller first bucket), per-rank batch fixed; "
             "step = forward + backward overlapped with the ring all-reduce of the buckets. Compute from "
             f"FLOPs, backward = {ComputeModel().backward_over_forward:g} × forward, calibrated as in 03_overlap.py "
             f"(ResNet-50 × {notes_resnet_compute().calibration:.4f}, BERT-large × "
             f"{notes_bert_compute().calibration:.4f}, each fitted to one §3 figure); 'uncal.' = the plain FLOP "
             f"count at {ComputeModel().flops_per_s / 1e12:g} TFLOP/s.")
    points = {name: weak_scaling(model, ks, link, cap, compute=compute) for name, model, compute in scaling_models()}
    steps = {name: (p[0].step_s, p[-1].step_s) for name, p in points.items()}   # (1 rank, top K)
    rows = [[name, f"{one * 1e3:.1f}", f"{top * 1e3:.1f}", f"{top / one:.2f}×"] for name, (one, top) in steps.items()]
    for name, series in points.items():
        rep.record(f"weak_scaling_{name}", [vars(p) for p in series])
    rep.table(["model", "1 rank (ms)", f"{ks[-1]} ranks (ms)", "slowdown"], rows, name="slowdown")
    uncal = steps["BERT-large, uncal."][1] / steps["BERT-large, uncal."][0]
    for name, notes, ref in (("ResNet-50", 1.20, "L15-5-resnet-slowdown"), ("BERT-large", 2.26, "L15-5-bert-slowdown")):
        rep.claim(f"{name} slowdown at 256 ranks", steps[name][1] / steps[name][0], notes, "×", ASSUMPTION,
                  places=2, setting=SCALING, ref=ref,
                  why="step(256) / step(1) of §3's model with the calibrated compute" +
                      (f"; from the plain FLOP count {uncal:.2f}× (less compute hides less)" if name != "ResNet-50" else ""))
    rep.line("  paper (Li et al. 2020 §5.3, measured on real clusters, as the notes quote it): ResNet-50 "
             "about 2× slower per iteration at 256 GPUs with NCCL; with gloo about 3× (ResNet-50) and 6× (BERT)")
    rep.note("the paper's numbers are larger: stragglers, congestion, slower links between machines and "
             "per-call overheads are not in an α-β ring with perfect overlap.")
    # Why the step grows with K: the ring's bandwidth term is almost flat in K, its latency term is not.
    resnet = resnet50()
    rows, terms = [], []
    for k in sorted({2, max(2, ks[-1])}):
        latency = ring_allreduce_time(k, 0, link)          # an empty all-reduce: 2(K−1)α
        bandwidth = ring_allreduce_time(k, resnet.nbytes, link) - latency
        rows.append([k, f"{latency * 1e3:.3f}", f"{bandwidth * 1e3:.2f}"])
        terms.append((latency, bandwidth))
    grow = [terms[-1][i] / terms[0][i] if terms[0][i] else None for i in (0, 1)]  # None: no such term (α = 0)
    rep.table(["K", "latency term (ms)", "bandwidth term (ms)"], rows, name="ring_terms")
    latency_grows = f"grows {grow[0]:.0f}× (and is paid per bucket)" if grow[0] else "is zero at α = 0 (no latency term)"
    rep.line(f"  one all-reduce of ResNet-50's {resnet.nbytes / MB:.1f} MB from K = {rows[0][0]} to {rows[-1][0]}: the "
             f"2(K−1)α term {latency_grows}, the 2(K−1)/K·N/β term {grow[1]:.2f}× "
             "(it tends to 2N/β: the factor (K−1)/K is 1/2 at K = 2)")
    linear = len(terms) == 2 and grow[0] is not None and math.isclose(grow[0], rows[-1][0] - 1) and grow[1] < 2
    rep.claim("the ring's latency term grows as K−1, its bandwidth term less than 2×", linear, True, kind=EXACT,
              setting=SCALING, ref="L15-5-ring-terms",
              why=f"2(K−1)α: {f'×{grow[0]:.0f}' if grow[0] else 'zero (α = 0)'} from K = {rows[0][0]} to "
                  f"{rows[-1][0]}; 2(K−1)/K·N/β: ×{grow[1]:.2f}")
    # Total throughput still grows with K, only less than K-fold.
    rows = []
    for name in ("ResNet-50", "BERT-large"):
        for p in points[name]:
            rows.append([name, p.world_size, f"{p.step_s * 1e3:.1f}", f"{p.throughput_speedup:.1f}",
                         f"{p.efficiency:.0%}", bar(p.efficiency, 1.0, 30)])
    rep.table(["model", "K", "step (ms)", "throughput ×", "efficiency", ""], rows, name="throughput")
    grows = all(a.throughput_speedup < b.throughput_speedup for ps in points.values() for a, b in zip(ps, ps[1:]))
    rep.claim("total throughput still grows with K (both models)", grows, True, kind=ASSUMPTION,
              setting=SCALING, ref="L15-5-throughput-grows",
              why="throughput × at each K above rises: " + "; ".join(
                  f"{n} " + ", ".join(f"{p.throughput_speedup:.1f}" for p in ps) for n, ps in points.items()))
    return steps


def part2_skip_sync(rep: Report, args: argparse.Namespace, steps: dict[str, tuple[float, float]]) -> None:
    """Synchronise every n-th iteration: the others run at single-rank speed."""
    n, k = args.sync_every, args.world_size
    rows = []
    gains = {}
    for name, (local, synced) in steps.items():
        averaged = skip_sync_step_s(synced, local, n)
        gains[name] = skip_sync_speedup(synced, local, n) - 1
        rows.append([name, f"{synced * 1e3:.1f}", f"{local * 1e3:.1f}", f"{averaged * 1e3:.1f}", f"+{gains[name]:.0%}"])
    rep.note(f"at {k} ranks, one iteration in {n} pays the all-reduce and the others run at the 1-rank step: "
             "average = ((n − 1)·local + synced)/n; gain = synced / average − 1.")
    rep.table(["model", "synced step (ms)", "local step (ms)", f"average, n = {n} (ms)", "faster by"], rows,
              name="skip_sync")
    for name, notes, ref in (("ResNet-50", 17, "L15-5-resnet-skip-sync"), ("BERT-large", 95, "L15-5-bert-skip-sync")):
        rep.claim(f"{name}, sync every {n}, {k} ranks", 100 * gains[name], notes, "%", ASSUMPTION, places=0,
                  setting=SCALING + ("sync_every",), ref=ref,
                  why="((n − 1)·local + synced)/n from Part 1's steps" +
                      (f"; plain FLOP count: {100 * gains['BERT-large, uncal.']:.0f} %" if name != "ResNet-50" else ""))
    rep.line("  paper (Li et al. 2020 fig. 10, measured, as the notes quote it): ResNet-50 on 256 GPUs, "
             "synchronising every 8 iterations: +38 % with NCCL, +57 % with gloo")


# ---- Part 3: the model of accumulating n micro-batch gradients ---------------------------------


def part3_convergence(rep: Report, args: argparse.Namespace) -> None:
    # --quick keeps Part 3 whole: it takes about 0.1 s, and fewer micro-batches change the answer.
    count, size = args.micro_batches, args.micro_batch_size
    x, y = make_regression(count * size)
    loss = QuadraticLoss(x, y)
    batches = micro_batches(x, y, count, size)
    intervals = powers_of_two_up_to(args.sync_every)
    eval_every = max(1, count // 64)
    rep.note(f"model: {count} micro-batches of {size} samples, least squares in {CONV_DIM} features "
             f"(float64, seeds {CONV_DATA_SEED}/{CONV_ORDER_SEED}); one micro-batch stands for one "
             "iteration's global batch (averaging over ranks changes nothing here). Synchronising "
             "every n = one update with the SUM of n micro-batch gradients, as no_sync accumulates.")
    rep.line(f"  best reachable loss {loss(loss.w_opt):.5f}; start {loss(np.zeros(CONV_DIM)):.4f}; "
             f"SGD diverges for a step size above 2/λ_max = {loss.stability_lr():.3f}")
    settings = [("small lr", lambda n: args.lr_small), ("large lr", lambda n: args.lr_large),
                ("large lr / n", lambda n: args.lr_large / n)]
    finals: dict[str, list[float]] = {name: [] for name, _ in settings}
    curves: dict[str, dict[int, list[float]]] = {name: {} for name, _ in settings}
    for name, lr_of in settings:
        for n in intervals:
            _, curve = train_accumulating(batches, lr_of(n), n, loss, eval_every)
            finals[name].append(curve[-1])
            curves[name][n] = curve
    rows = []
    for i, n in enumerate(intervals):
        rows.append([n, -(-count // n), f"{n * args.lr_small:.3g}", _loss_text(finals["small lr"][i], loss),
                     f"{n * args.lr_large:.3g}", _loss_text(finals["large lr"][i], loss),
                     _loss_text(finals["large lr / n"][i], loss)])
    rep.table(["n", "updates", "n·lr small", "final loss", "n·lr large", "final loss", "final loss, lr/n"],
              rows, name="final_losses")
    rep.record("curves", {name: {str(n): c for n, c in by_n.items()} for name, by_n in curves.items()})
    rep.record("eval_every_micro_batches", eval_every)
    plot_curves(rep, curves, eval_every, {"small lr": f"small lr = {args.lr_small:g}",
                                           "large lr": f"large lr = {args.lr_large:g}",
                                           "large lr / n": f"large lr / n = {args.lr_large:g} / n"})

    if len(intervals) == 1:
        return                              # n = 1 only: nothing to compare
    # The notes' three statements, each decided from the numbers above (no numbers in the notes).
    small, large = finals["small lr"], finals["large lr"]
    problem = ("micro_batches", "micro_batch_size", "sync_every")
    rep.claim("small lr: final loss for every n within 1 % of n = 1",
              bool(max(abs(v / small[0] - 1) for v in small) < 0.01), notes=True, kind=ASSUMPTION,
              setting=problem + ("lr_small",), ref="L15-5-small-lr-harmless",
              why=f"largest change {100 * max(abs(v / small[0] - 1) for v in small):.2f} %: n·lr stays under "
                  f"2/λ_max = {loss.stability_lr():.3f} for every n")
    rep.claim(f"large lr: n = {intervals[-1]} ends with a worse loss than n = 1", bool(large[-1] > large[0] * 1.01),
              notes=True, kind=ASSUMPTION, setting=problem + ("lr_large",), ref="L15-5-large-lr-hurts",
              why=f"n·lr = {intervals[-1] * args.lr_large:g} against 2/λ_max = {loss.stability_lr():.3f}: "
                  "worse only when it crosses that limit")
    w_acc, _ = train_accumulating(batches, args.lr_large / intervals[-1], intervals[-1], loss, count)
    w_big = train_large_batch(batches, args.lr_large, intervals[-1], loss)
    if not (np.all(np.isfinite(w_acc)) and np.all(np.isfinite(w_big))):
        _both_overflowed(rep, args, intervals[-1])
        return
    gap = float(np.max(np.abs(w_acc - w_big)))
    same = bool(gap <= 1e-9 * max(1.0, float(np.max(np.abs(w_big)))))     # rounding, relative to |w|
    rep.line(f"  lr/n with n = {intervals[-1]} against large-batch SGD (mean gradient of {intervals[-1]}×{size} "
             f"samples, lr {args.lr_large:g}): max |Δw| = {gap:.1e}"
             + (" (the same training, up to rounding)" if same else ""))
    rep.claim("lr/n: accumulation is large-batch training with 1/n the updates", same, notes=True, setting=(),
              ref="L15-5-lr-over-n", why=f"max |Δw| = {gap:.1e}: Σ of n mean gradients / n = the mean over n·size "
              "samples (equal micro-batches)")
    rep.note("with lr/n a larger n averages out more gradient noise but makes n times fewer updates; "
             "which wins depends on how far from converged the run is. Skipping synchronisation is the old "
             "question of batch size and learning rate: the summed gradient is n times larger.")


def _both_overflowed(rep: Report, args: argparse.Namespace, n: int) -> None:
    """lr/n against large-batch SGD when the weights left float64: there is nothing to compare."""
    rep.line(f"  lr/n with n = {n} against large-batch SGD (lr {args.lr_large:g}): both diverge past float64's "
             "range, so their weights cannot be compared")
    rep.claim("lr/n: accumulation is large-batch training with 1/n the updates", None, notes=True, setting=(),
              ref="L15-5-lr-over-n", why=f"not compared: at lr {args.lr_large:g} the weights overflow float64")
    rep.note("with lr/n a larger n averages out more gradient noise but makes n times fewer updates; "
             "which wins depends on how far from converged the run is.")


# Part 3 holds every sample (16 float64 features: 128 B each) and trains over every micro-batch for
# each n and each learning rate: 32,768 micro-batches take about 5 s of CPU here, 2^21 samples 256 MiB.
MAX_MICRO_BATCHES, MAX_SAMPLES = 2**15, 2**21


def check_part3_size(args: argparse.Namespace) -> None:
    """Part 3's data fits in memory and its training in seconds, or a usage error that says so."""
    if args.micro_batches > MAX_MICRO_BATCHES:
        raise UsageError(f"--micro-batches {args.micro_batches:,}: Part 3 trains over every micro-batch for each n "
                         f"and learning rate (about 0.15 ms of CPU each here); at most {MAX_MICRO_BATCHES:,}")
    samples = args.micro_batches * args.micro_batch_size
    if samples > MAX_SAMPLES:
        raise UsageError(f"--micro-batches × --micro-batch-size = {samples:,} samples: Part 3 holds them all "
                         f"({samples * 128 / 2**30:,.1f} GiB of float64 features); at most {MAX_SAMPLES:,}")


def _loss_text(value: float, loss: QuadraticLoss) -> str:
    return "diverged" if not np.isfinite(value) or value > 10 * loss(np.zeros(CONV_DIM)) else f"{value:.5f}"


def main() -> None:
    parser = make_parser(__doc__, world_size=256, alpha_us=10.0, beta_gbs=10.0, bucket_cap_mb="25MB", micro_batches=512, micro_batch_size=32,
                         figs=True, context={"bucket_cap_mb": "default: the notes' 25 MB", "micro_batches": "Part 3",
                                             "micro_batch_size": "Part 3"})
    parser.add_argument("--sync-every", type=positive_int, default=8,
                        help="synchronise gradients every n iterations")
    parser.add_argument("--lr-small", type=positive_float, default=0.02, help="Part 3: the small learning rate")
    parser.add_argument("--lr-large", type=positive_float, default=0.1, help="Part 3: the large learning rate")
    args = parser.parse_args()
    if args.sync_every > args.micro_batches:
        raise UsageError(f"--sync-every {args.sync_every} exceeds --micro-batches {args.micro_batches}")
    check_part3_size(args)
    rep = Report(__file__, "scaling to hundreds of ranks (lecture 15 §5)", args)
    link = link_from_args(args, "the notes' fast interconnect")
    # Part 1: weak scaling, per-iteration slowdown and total throughput against K
    rep.part(1, f"weak scaling from 1 to {args.world_size} ranks")
    steps = part1_slowdown(rep, args, link)
    # Part 2: synchronise only every n-th iteration
    rep.part(2, f"skipping synchronisation: every {args.sync_every} iterations")
    part2_skip_sync(rep, args, steps)
    # Part 3: what accumulating n micro-batch gradients per update does to convergence
    rep.part(3, "convergence when synchronising every n micro-batches")
    part3_convergence(rep, args)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
