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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math

import numpy as np

from common.cli import link_from_args, make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.error_types import UsageError
from common.flags import positive_float, positive_int
from common.model_bounds import Bound, largest_fitting
from common.output import Report
from common.script_end import run_main
from common.text import bar
from common.units import MB, MiB, fmt_bytes
from lecture15.ddp_sim import ComputeModel, skip_sync_speedup, skip_sync_step_s, weak_scaling
from lecture15.figures import convergence_figure
from lecture15.least_squares import (
    CONV_DATA_SEED,
    CONV_DIM,
    CONV_ORDER_SEED,
    DIVERGING,
    QuadraticLoss,
    make_regression,
    mean_gradient,
    micro_batches,
)
from lecture15.models import ModelSpec, bert_large, resnet50
from lecture15.notes_calibration import notes_bert_compute, notes_resnet_compute

# Part 3's problem: a fixed linear-regression task (lecture15.least_squares). Feature scales from 0.5
# to 2 give a Hessian with eigenvalues from about 0.25 to 4, so plain SGD is stable for lr < 2/λ_max
# ≈ 0.5; the two learning rates sit well inside (small) and inside only until multiplied by n (large).


def main() -> None:
    parser = make_parser(__doc__, world_size=256, alpha_us=10.0, beta_gbs=10.0, bucket_cap_mb="25MB",
                         micro_batches=512, micro_batch_size=32, figs=True,
                         context={"bucket_cap_mb": "default: the notes' 25 MB", "micro_batches": "Part 3",
                                  "micro_batch_size": "Part 3"}, bounds=BOUNDS)
    parser.add_argument("--sync-every", type=positive_int, default=8,
                        help="synchronise gradients every n iterations")
    for size, default in (("small", 0.02), ("large", 0.1)):
        parser.add_argument(f"--lr-{size}", type=positive_float, default=default,
                            help=f"Part 3: the {size} learning rate")
    args = parser.parse_args()
    if args.sync_every > args.micro_batches:
        raise UsageError(f"--sync-every {args.sync_every} exceeds --micro-batches {args.micro_batches}")
    rep = Report(__file__, "scaling to hundreds of ranks (lecture 15 §5)", args)
    link = link_from_args(args, "the notes' fast interconnect")
    rep.part(1, f"weak scaling from 1 to {args.world_size} ranks")  # slowdown per iteration, throughput
    steps = part1_slowdown(rep, args, link)
    rep.part(2, f"skipping synchronisation: every {args.sync_every} iterations")  # the others run alone
    part2_skip_sync(rep, args, steps)
    rep.part(3, "convergence when synchronising every n micro-batches")  # n × the step, or lr/n
    part3_convergence(rep, args)
    rep.finish()


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


def ring_terms(rep: Report, ks: list[int], link: Link) -> None:
    """Why the step grows with K: the ring's bandwidth term is almost flat in K, its latency term is not."""
    resnet = resnet50()
    rows, terms = [], []
    for k in sorted({2, max(2, ks[-1])}):
        latency = algorithm("ring all-reduce").time(k, 0, link)          # an empty all-reduce: 2(K−1)α
        bandwidth = algorithm("ring all-reduce").time(k, resnet.nbytes, link) - latency
        rows.append([k, f"{latency * 1e3:.3f}", f"{bandwidth * 1e3:.2f}"])
        terms.append((latency, bandwidth))
    grow = [terms[-1][i] / terms[0][i] if terms[0][i] else None for i in (0, 1)]  # None: no term (α = 0)
    rep.table(["K", "latency term (ms)", "bandwidth term (ms)"], rows, name="ring_terms")
    latency = (f"grows {grow[0]:.0f}× (and is paid per bucket)" if grow[0]
               else "is zero at α = 0 (no latency term)")
    rep.line(f"  one all-reduce of ResNet-50's {resnet.nbytes / MB:.1f} MB from K = {rows[0][0]} to "
             f"{rows[-1][0]}: the 2(K−1)α term {latency}, the 2(K−1)/K·N/β term {grow[1]:.2f}× "
             "(it tends to 2N/β: the factor (K−1)/K is 1/2 at K = 2)")
    rep.value("ring_terms_linear", len(terms) == 2 and grow[0] is not None
               and math.isclose(grow[0], rows[-1][0] - 1) and grow[1] < 2)
    rep.value("latency_growth", f"×{grow[0]:.0f}" if grow[0] else "zero (α = 0)")
    rep.value("k_low", rows[0][0])
    rep.value("k_high", rows[-1][0])
    rep.value("bandwidth_growth", grow[1])


def part1_slowdown(rep: Report, args: argparse.Namespace, link: Link) -> dict[str, tuple[float, float]]:
    """Per-iteration slowdown at the top K against one rank, and throughput against K."""
    ks = powers_of_two_up_to(args.world_size)
    cap = args.bucket_cap_bytes
    rep.note(f"model: lecture 15 §3's timeline (lecture15.ddp_sim), {link.describe()}, buckets of "
             f"{fmt_bytes(cap)} (MB = 1e6 B; {cap / MiB:.4g} MiB; no smaller first bucket), per-rank batch "
             "fixed; step = forward + backward overlapped with the ring all-reduce of the buckets. Compute "
             f"from FLOPs, backward = {ComputeModel().backward_over_forward:g} × forward, calibrated as in "
             f"03_overlap.py (ResNet-50 × {notes_resnet_compute().calibration:.4f}, BERT-large × "
             f"{notes_bert_compute().calibration:.4f}, each fitted to one §3 figure); 'uncal.' = the plain "
             f"FLOP count at {ComputeModel().flops_per_s / 1e12:g} TFLOP/s.")
    points = {name: weak_scaling(model, ks, link, cap, compute=compute)
              for name, model, compute in scaling_models()}
    steps = {name: (p[0].step_s, p[-1].step_s) for name, p in points.items()}   # (1 rank, top K)
    for name, series in points.items():
        rep.value(f"weak_scaling_{name}", [vars(p) for p in series], compared=False)
    rep.table(["model", "1 rank (ms)", f"{ks[-1]} ranks (ms)", "slowdown"],
              [[name, f"{one * 1e3:.1f}", f"{top * 1e3:.1f}", f"{top / one:.2f}×"]
               for name, (one, top) in steps.items()],
              name="slowdown")
    paper = ", ".join(f"{what} {rep.notes_text(f'L15-5-paper-slowdown-{ref}')}" for what, ref in
                      (("ResNet-50 with NCCL", "resnet-nccl"), ("with gloo", "resnet-gloo"),
                       ("BERT", "bert-gloo")))
    rep.line(f"  the paper (Li et al. 2020 §5.3, 256 GPUs, measured, as the notes quote it): {paper}; our "
             "α-β ring has no stragglers, congestion or per-call costs")
    ring_terms(rep, ks, link)
    throughput_table(rep, points)
    rep.value("resnet_slowdown", steps["ResNet-50"][1] / steps["ResNet-50"][0])
    rep.value("bert_slowdown", steps["BERT-large"][1] / steps["BERT-large"][0])
    rep.value("bert_uncal_slowdown", steps["BERT-large, uncal."][1] / steps["BERT-large, uncal."][0])
    rep.value("throughput_grows", all(a.throughput_speedup < b.throughput_speedup
                                    for ps in points.values() for a, b in zip(ps, ps[1:])))
    rep.value("throughput_text", "; ".join(f"{n} " + ", ".join(f"{p.throughput_speedup:.1f}" for p in ps)
                                         for n, ps in points.items()))
    return steps


def throughput_table(rep: Report, points: dict[str, list]) -> None:
    """Part 1's second table: step, throughput and efficiency against K, one row per K."""
    rows = []
    for resnet, bert in zip(points["ResNet-50"], points["BERT-large"]):   # one row per K
        cells = [cell for p in (resnet, bert)
                 for cell in (f"{p.step_s * 1e3:.1f}", f"{p.throughput_speedup:.1f}", f"{p.efficiency:.0%}")]
        rows.append([resnet.world_size, *cells, bar(bert.efficiency, 1.0, 20)])
    rep.table(["K", "ResNet-50 step (ms)", "ResNet-50 speed-up", "ResNet-50 efficiency",
               "BERT-large step (ms)", "BERT-large speed-up", "BERT-large efficiency",
               "BERT-large efficiency as a bar"], rows, name="throughput")


def part2_skip_sync(rep: Report, args: argparse.Namespace, steps: dict[str, tuple[float, float]]) -> None:
    """Synchronise every n-th iteration: the others run at single-rank speed."""
    n, k = args.sync_every, args.world_size
    rows, gains = [], {}
    for name, (local, synced) in steps.items():
        gains[name] = skip_sync_speedup(synced, local, n) - 1
        rows.append([name, f"{synced * 1e3:.1f}", f"{local * 1e3:.1f}",
                     f"{skip_sync_step_s(synced, local, n) * 1e3:.1f}", f"+{gains[name]:.0%}"])
    rep.note(f"at {k} ranks, one iteration in {n} pays the all-reduce and the others run at the 1-rank step: "
             "average = ((n − 1)·local + synced)/n; gain = synced / average − 1.")
    rep.table(["model", "synced step (ms)", "local step (ms)", f"average, n = {n} (ms)", "faster by"], rows,
              name="skip_sync")
    rep.line(f"  the paper (Li et al. 2020 fig. 10, measured, as the notes quote it): ResNet-50 on 256 GPUs, "
             f"synchronising every 8 iterations: +{rep.notes_text('L15-5-paper-skip-sync-nccl')} with NCCL, "
             f"+{rep.notes_text('L15-5-paper-skip-sync-gloo')} with gloo")
    rep.value("resnet_skip_sync_pct", 100 * gains["ResNet-50"])
    rep.value("bert_skip_sync_pct", 100 * gains["BERT-large"])
    rep.value("bert_uncal_skip_sync_pct", 100 * gains["BERT-large, uncal."])


# ---- Part 3: accumulating n micro-batch gradients per update -----------------------------------
@DIVERGING
def train_accumulating(batches: list[tuple[np.ndarray, np.ndarray]], lr: float, sync_every: int,
                       loss: QuadraticLoss, eval_every: int = 1) -> tuple[np.ndarray, list[float]]:
    """SGD that adds up `sync_every` micro-batch gradients before each update, as no_sync does.

    The sum is not divided by n (DDP's no_sync accumulates into .grad): the update is lr·Σg, so the
    step is n times a single micro-batch's. A trailing group shorter than n is applied as it is.
    Returns the final weights and the full-data loss after every `eval_every` micro-batches.
    """
    w = np.zeros(loss.h.shape[0])
    accumulated = np.zeros_like(w)
    curve = [loss(w)]
    for i, (xb, yb) in enumerate(batches, start=1):
        accumulated += mean_gradient(w, xb, yb)
        if i % sync_every == 0 or i == len(batches):
            w = w - lr * accumulated
            accumulated[:] = 0.0
        if i % eval_every == 0:
            curve.append(loss(w))
    return w, curve


@DIVERGING
def train_large_batch(batches: list[tuple[np.ndarray, np.ndarray]], lr: float, group: int,
                      loss: QuadraticLoss) -> np.ndarray:
    """Plain large-batch SGD: the mean gradient over `group` micro-batches joined into one batch."""
    w = np.zeros(loss.h.shape[0])
    for start in range(0, len(batches), group):
        joined = batches[start:start + group]
        xb, yb = joined[0] if len(joined) == 1 else (np.concatenate(part) for part in zip(*joined))
        w = w - lr * mean_gradient(w, xb, yb)
    return w


def part3_convergence(rep: Report, args: argparse.Namespace) -> None:
    # --quick keeps Part 3 whole: it takes about 0.1 s, and fewer micro-batches change the answer.
    count, size = args.micro_batches, args.micro_batch_size
    x, y = make_regression(count * size)
    loss = QuadraticLoss(x, y)
    batches = micro_batches(x, y, count, size)
    del x, y                  # the micro-batches hold their own copy: one copy of the data, not two
    intervals = powers_of_two_up_to(args.sync_every)
    eval_every = max(1, count // 64)
    rep.note(f"model: {count} micro-batches of {size} samples, least squares in {CONV_DIM} features "
             f"(float64, seeds {CONV_DATA_SEED}/{CONV_ORDER_SEED}); one micro-batch stands for one "
             "iteration's global batch (averaging over ranks changes nothing here). Synchronising "
             "every n = one update with the SUM of n micro-batch gradients, as no_sync accumulates.")
    rep.line(f"  best reachable loss {loss(loss.w_opt):.5f}; start {loss(np.zeros(CONV_DIM)):.4f}; "
             f"SGD diverges for a step size above 2/λ_max = {loss.stability_lr():.3f}")
    settings = {"small lr": lambda n: args.lr_small, "large lr": lambda n: args.lr_large,
                "large lr / n": lambda n: args.lr_large / n}
    curves = {name: {n: train_accumulating(batches, lr_of(n), n, loss, eval_every)[1] for n in intervals}
              for name, lr_of in settings.items()}
    small, large, by_n = ([curves[name][n][-1] for n in intervals] for name in settings)
    rep.table(["n", "updates", "n·lr small", "final loss", "n·lr large", "final loss", "final loss, lr/n"],
              [[n, -(-count // n), f"{n * args.lr_small:.3g}", loss_text(small[i], loss),
                f"{n * args.lr_large:.3g}", loss_text(large[i], loss), loss_text(by_n[i], loss)]
               for i, n in enumerate(intervals)],
              name="final_losses")
    rep.value("curves",
              {name: {str(n): c for n, c in by_n.items()} for name, by_n in curves.items()}, compared=False)
    rep.value("eval_every_micro_batches", eval_every, compared=False)
    if rep.figure_dir():
        titles = {"small lr": f"small lr = {args.lr_small:g}", "large lr": f"large lr = {args.lr_large:g}",
                  "large lr / n": f"large lr / n = {args.lr_large:g} / n"}
        rep.save_figure(convergence_figure(curves, eval_every, titles), "convergence")
    rep.value("small_lr_harmless", bool(max(abs(v / small[0] - 1) for v in small) < 0.01))
    rep.value("small_lr_change_pct", 100 * max(abs(v / small[0] - 1) for v in small))
    rep.value("large_lr_hurts", bool(large[-1] > large[0] * 1.01))
    rep.value("large_n_lr", intervals[-1] * args.lr_large)
    rep.value("stability_lr", loss.stability_lr())
    lr_over_n_is_large_batch(rep, args, batches, loss, intervals[-1])
    rep.note("with lr/n a larger n averages out more gradient noise but makes n times fewer updates; "
             "which wins depends on how far from converged the run is. Skipping synchronisation is the old "
             "question of batch size and learning rate: the summed gradient is n times larger.")


def lr_over_n_is_large_batch(rep: Report, args: argparse.Namespace, batches: list, loss: QuadraticLoss,
                             n: int) -> None:
    """Accumulating n gradients at lr/n against large-batch SGD over the same samples at lr."""
    w_acc, _ = train_accumulating(batches, args.lr_large / n, n, loss, len(batches))
    w_big = train_large_batch(batches, args.lr_large, n, loss)
    if not (np.all(np.isfinite(w_acc)) and np.all(np.isfinite(w_big))):
        rep.line(f"  lr/n with n = {n} against large-batch SGD (lr {args.lr_large:g}): both diverge past "
                 "float64's range, so their weights cannot be compared")
        rep.value("lr_over_n_large_batch", None)
        rep.value("lr_over_n_gap", "none (both overflow float64)")
        return
    gap = float(np.max(np.abs(w_acc - w_big)))
    same = bool(gap <= 1e-9 * max(1.0, float(np.max(np.abs(w_big)))))     # rounding, relative to |w|
    rep.line(f"  lr/n with n = {n} against large-batch SGD (mean gradient of {n}×{args.micro_batch_size} "
             f"samples, lr {args.lr_large:g}): max |Δw| = {gap:.1e}"
             + (" (the same, up to rounding)" if same else ""))
    rep.value("lr_over_n_large_batch", same)
    rep.value("lr_over_n_gap", f"{gap:.1e}")


# Part 3 trains three learning rates over every micro-batch for each n = 1, 2, 4 … --sync-every, on
# data it holds whole (16 float64 features a sample, 136 B; two copies while it is cut into
# micro-batches). Measured here, a step costs about 15 µs and 16 samples of a micro-batch about as
# much; the data's set-up and the large-batch check cost about one n more. 2^18 such steps: about 4 s
# of CPU. The samples stop at 2^20 (0.3 GB at the peak): faulting in more pages cost a loaded 2-core
# machine more system time than the training itself. The other flags cost the same at any value
# (closed forms, --world-size's log2 K points).
MAX_PART3_STEPS = 2**18
MAX_PART3_SAMPLES = 2**20


def part3_steps(args: argparse.Namespace) -> float:
    """Part 3's work in micro-batch steps: (n's + 1) × (M + M·size/16)."""
    intervals = len(powers_of_two_up_to(args.sync_every))
    return (intervals + 1) * args.micro_batches * (1 + args.micro_batch_size / 16)


def part3_fits(args: argparse.Namespace) -> bool:
    return (part3_steps(args) <= MAX_PART3_STEPS
            and args.micro_batches * args.micro_batch_size <= MAX_PART3_SAMPLES)


def _part3_bound(dest: str) -> Bound:
    others = tuple(d for d in ("micro_batches", "micro_batch_size", "sync_every") if d != dest)
    return Bound(lambda a: largest_fitting(a, dest, part3_fits, 10**9),
                 f"Part 3 trains (n's + 1) × (M + M·size/16) micro-batch steps, at most {MAX_PART3_STEPS:,} "
                 f"(about 15 µs each here), on at most {MAX_PART3_SAMPLES:,} samples (M × size)", others)


BOUNDS = {dest: _part3_bound(dest) for dest in ("micro_batches", "micro_batch_size", "sync_every")}


def loss_text(value: float, loss: QuadraticLoss) -> str:
    return "diverged" if not np.isfinite(value) or value > 10 * loss(np.zeros(CONV_DIM)) else f"{value:.5f}"


if __name__ == "__main__":
    run_main(main)
