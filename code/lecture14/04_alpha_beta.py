"""Lecture 14 §3.4 (α-β 模型): ring vs tree vs naive all-reduce in the α-β model, a real gloo
all-reduce on this machine fitted with a straight line, and communication's share of a training step.

    python code/lecture14/04_alpha_beta.py
    python code/lecture14/04_alpha_beta.py --world-size 16 --alpha-us 2 --beta-gbs 50 --save-figs figs

Part 1 is the model (K, α, β from the flags); Part 2 starts 2 and then 4 real processes (gloo) and
times all-reduce from 1 KiB to 16 MiB; Part 3 puts the model back into data-parallel training.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math
import os
import statistics
import time
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from common.cli import UsageError, link_from_args, make_parser, positive_float, positive_int, run_main
from common.costmodel import (
    ALLREDUCE_TIMES,
    ETHERNET,
    INFINIBAND,
    NOTES_LINK,
    NVLINK,
    Link,
    fit_line_relative,
    ring_allreduce_time,
    ring_alpha_beta_from_line,
    ring_naive_crossover_bytes,
    ring_tree_crossover_bytes,
)
from common.launcher import launch
from common.output import ASSUMPTION, EXACT, MEASURED, Report, fmt_bytes, fmt_time, new_figure

NOTES_K = 8
MODEL_SIZES = [10**e for e in range(3, 10)]  # 1 KB … 1 GB, MB = 1e6 B as in the notes
REAL_PROCS = (2, 4)                           # the notes' two process counts
REAL_SIZES = [2**10 * 4**i for i in range(8)]  # 1 KiB … 16 MiB by factors of 4
QUICK_SIZES = [2**10, 2**14, 2**18, 2**20]      # 1 KiB, 16 KiB, 256 KiB, 1 MiB
PEAK_TFLOPS, MFU, TOKENS_PER_GPU = 989.0, 0.40, 2048  # the notes' compute assumptions (Part 3)
GRAD_BYTES_PER_PARAM = 2                      # bf16 gradients


def allreduce_times(k: int, nbytes: float, link: Link) -> dict[str, float]:
    return {name: fn(k, nbytes, link) for name, fn in ALLREDUCE_TIMES.items()}


def winner(times: dict[str, float]) -> str:
    """The fastest algorithm; exact ties (e.g. tree = naive at K = 2) are named together."""
    best = min(times.values())
    return " = ".join(n for n, t in times.items() if math.isclose(t, best, rel_tol=1e-12))


def numeric_crossover(f: Callable[[float], float], g: Callable[[float], float],
                      lo: float, hi: float) -> float | None:
    """Where f - g changes sign between lo and hi bytes: a log-spaced scan, then bisection.

    An independent check of the closed forms: it only evaluates the two time functions.
    """
    grid = np.geomspace(lo, hi, 600)
    diff = [f(n) - g(n) for n in grid]
    for i in range(len(grid) - 1):
        if diff[i] * diff[i + 1] < 0:
            a, b = float(grid[i]), float(grid[i + 1])
            for _ in range(200):
                mid = 0.5 * (a + b)
                if (f(a) - g(a)) * (f(mid) - g(mid)) <= 0:
                    b = mid
                else:
                    a = mid
            return 0.5 * (a + b)
    return None


def search_range(link: Link) -> tuple[float, float]:
    """Crossovers sit at a multiple of α·β bytes (about 1/K up to about K/log2 K of it)."""
    scale = max(link.alpha_s * link.beta_Bps, 1.0)
    return scale * 1e-9, scale * 1e9


def winner_ranges(k: int, link: Link) -> list[tuple[float, str]]:
    """(from bytes, fastest algorithm) for each range of sizes, found by scanning and bisection."""
    def fastest(n: float) -> str:
        times = allreduce_times(k, n, link)
        return min(times, key=times.__getitem__)  # exact ties only at K = 2 (tree = naive, ring faster)

    grid = np.geomspace(*search_range(link), 1200)
    ranges = [(float(grid[0]), fastest(grid[0]))]
    for lo, hi in zip(grid[:-1], grid[1:]):
        if fastest(hi) == ranges[-1][1]:
            continue
        for _ in range(100):  # the change lies in (lo, hi]
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if fastest(mid) == ranges[-1][1] else (lo, mid)
        ranges.append((float(hi), fastest(hi)))
    return ranges


def comm_share(k: int, params: float, link: Link, tokens: int, flops_per_s: float) -> float:
    """All-reduce time / (all-reduce + forward/backward), no overlap; P cancels when α = 0."""
    compute = 6 * params * tokens / flops_per_s
    comm = ring_allreduce_time(k, GRAD_BYTES_PER_PARAM * params, link)
    return comm / (comm + compute)


def main() -> None:
    parser = make_parser(__doc__, world_size=NOTES_K, alpha_us=5.0, beta_gbs=25.0, repeats=7, peak_tflops=PEAK_TFLOPS,
                         real=True, figs=True, context={"repeats": "Part 2, per size", "peak_tflops": "Part 3"})
    parser.add_argument("--tokens-per-gpu", type=positive_int, default=TOKENS_PER_GPU,
                        help="Part 3: tokens per GPU per step")
    parser.add_argument("--mfu", type=positive_float, default=MFU, help="Part 3: fraction of peak")
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be at least 2: one device has nothing to all-reduce")
    if args.mfu > 1:
        raise UsageError(f"--mfu is a fraction of peak, at most 1, got {args.mfu:g}")
    rep = Report(__file__, "the α-β model: which all-reduce wins, a real fit, communication's share", args)
    part1_model(rep, args)        # ring / tree / naive times by message size, and the crossovers
    part2_measure_gloo(rep, args)  # real all-reduce on 2 and 4 processes, fitted t = a + b·N
    part3_share_of_step(rep, args)  # all-reduce vs compute in K-GPU data parallelism (notes: 8)
    rep.finish()


def part1_model(rep: Report, args: argparse.Namespace) -> None:
    rep.part(1, "ring vs binary tree vs naive (all to rank 0) all-reduce in the α-β model")
    k, link = args.world_size, link_from_args(args)
    at_notes = (k == NOTES_K and math.isclose(link.alpha_s, NOTES_LINK.alpha_s)
                and math.isclose(link.beta_Bps, NOTES_LINK.beta_Bps))  # 5 × 1e-6 is not 5e-6 exactly
    rep.note(f"K = {k}, {link.describe()}; N = bytes per device (MB = 1e6 B)")
    rows, winners = [], {}
    for n in MODEL_SIZES:
        times = allreduce_times(k, n, link)
        winners[n] = winner(times)
        rows.append([fmt_bytes(n)] + [fmt_time(times[name]) for name in ALLREDUCE_TIMES] + [winners[n]])
    rep.table(["N", "ring", "tree", "naive", "fastest"], rows, name="times")
    claimed = {1e3: "naive", 1e4: "naive", 1e5: "tree", 1e6: "ring", 1e8: "ring"}
    for n, notes in claimed.items():
        rep.claim(f"fastest at {fmt_bytes(n)}", winners[int(n)], notes if at_notes else None, kind=EXACT)

    ring = lambda n: ring_allreduce_time(k, n, link)  # noqa: E731 - small closures for the search
    others = {"tree": (ring_tree_crossover_bytes(k, link), 235),
              "naive": (ring_naive_crossover_bytes(k, link), 122)}
    for name, (closed, notes_kb) in others.items():
        other = lambda n, name=name: ALLREDUCE_TIMES[name](k, n, link)  # noqa: E731
        searched = numeric_crossover(ring, other, *search_range(link))
        if closed is None:
            assert searched is None, f"no closed-form crossover but the search found {searched}"
            rep.line(f"  ring vs {name}: no crossover at K = {k}, α = {link.alpha_s * 1e6:g} µs — "
                     f"{'the ring is never slower' if ring(1e6) <= other(1e6) else 'the ring is never faster'}")
            continue
        # The closed form must land on the equal-time point the search finds.
        assert searched is not None and math.isclose(closed, searched, rel_tol=1e-6), (closed, searched)
        rep.claim(f"ring = {name} crossover, closed form (numeric search: {fmt_bytes(searched)})", closed / 1e3,
                  notes_kb if at_notes else None, "KB", EXACT, rtol=0.01)
    ranges = winner_ranges(k, link)
    if len(ranges) == 1:
        text = f"{ranges[0][1]} at every size"
    else:  # the first range starts at the scan's lower end: name where it stops instead
        text = " · ".join([f"{ranges[0][1]} below {fmt_bytes(ranges[1][0])}"] +
                          [f"{name} from {fmt_bytes(start)}" for start, name in ranges[1:]])
    rep.line(f"  fastest by size (numeric scan): {text}")
    crossovers = [c for c, _ in others.values() if c is not None]
    ring_from = f"from {fmt_bytes(max(crossovers))} up" if crossovers else "at every size"
    rep.note(f"few rounds win small (latency-bound) messages; the ring is fastest {ring_from}\n"
             "(bandwidth-bound). NCCL likewise picks ring or tree by message size and device count.")


def _time_allreduce(rank: int, world_size: int, sizes: list[int], warmup: int, repeats: int) -> dict:
    """Rank code: per size, `repeats` timings of one all-reduce, each after a barrier."""
    times, correct = [], []
    for nbytes in sizes:
        x = torch.empty(max(1, nbytes // 4), dtype=torch.float32)
        x.fill_(rank + 1.0)
        dist.all_reduce(x)  # checked once, and it doubles as the first warm-up call
        correct.append(bool(torch.all(x == world_size * (world_size + 1) / 2)))
        for _ in range(warmup):
            dist.all_reduce(x)
        per_size = []
        for _ in range(repeats):
            dist.barrier()  # start together, so one rank's late arrival is not counted as transfer
            start = time.perf_counter()
            dist.all_reduce(x)
            per_size.append(time.perf_counter() - start)
        times.append(per_size)
    return {"times": times, "correct": correct}


def part2_measure_gloo(rep: Report, args: argparse.Namespace) -> None:
    rep.part(2, "a real all-reduce (gloo, processes on this machine) and a straight-line fit")
    sizes = QUICK_SIZES if args.quick else REAL_SIZES
    repeats, warmup = (min(3, args.repeats), 0) if args.quick else (args.repeats, 1)
    cores = os.cpu_count() or 1
    rep.note(f"float32 all-reduce, 1 checked + {warmup} warm-up + {repeats} timed calls per size; a call's time is the\n"
             "slowest rank's, after a barrier; the median over repeats is shown. The fit minimises the\n"
             f"relative error (a + b·N − t)/t. This machine has {cores} CPU cores: more processes than\n"
             "cores take turns on them.")
    medians: dict[int, list[float]] = {}
    correct: dict[int, list[bool]] = {}
    for asked in REAL_PROCS:  # one launch per process count: start-up is paid once each
        result = launch(_time_allreduce, asked, sizes, warmup, repeats, timeout_s=args.timeout_s)
        k = len(result)  # under torchrun the group has torchrun's size, whatever was asked
        if k in medians:
            continue
        correct[k] = [all(r["correct"][i] for r in result) for i in range(len(sizes))]
        medians[k] = [statistics.median(max(r["times"][i][j] for r in result) for j in range(repeats))
                      for i in range(len(sizes))]
    procs = list(medians)
    rep.table(["size"] + [f"{k} processes" for k in procs] + ["correct"],
              [[fmt_bytes(n, binary=True)] + [fmt_time(medians[k][i]) for k in procs]
               + ["yes" if all(correct[k][i] for k in procs) else "NO: wrong sum"]
               for i, n in enumerate(sizes)], name="measured")
    rows, fits = [], {}
    for k in procs:
        a, b = fit_line_relative(sizes, medians[k])
        alpha, beta = ring_alpha_beta_from_line(k, a, b)
        fits[k] = (a, b)
        small = medians[k][sizes.index(16 * 2**10)] / medians[k][0] if 16 * 2**10 in sizes else float("nan")
        physical = a > 0 and b > 0  # noise can tilt a line through a few points below zero
        rows.append([k, fmt_time(a), f"{b * 1e9:.4g} ns/B", fmt_time(alpha) if physical else "- (fit < 0)",
                     f"{beta / 1e9:.3g} GB/s" if physical else "- (fit < 0)", small])
        rep.record(f"fit_{k}", {"intercept_s": a, "slope_s_per_byte": b, "alpha_s": alpha, "beta_Bps": beta})
    rep.table(["processes", "a (intercept)", "b (slope)", "α per round = a/2(K-1)", "β = 2(K-1)/(K·b)",
               "t(16 KiB)/t(1 KiB)"], rows, name="fit")
    alpha4, beta4 = ring_alpha_beta_from_line(procs[-1], *fits[procs[-1]])
    notes = procs[-1] == 4  # the notes fitted 4 processes
    why = "measured on this machine (processes over the loopback, possibly more processes than cores)"
    physical = alpha4 > 0 and beta4 > 0
    if not physical:
        why = ("the fitted line has a negative intercept or slope: the timings were too noisy for a line "
               "(a loaded machine?); rerun, without --quick or with more --repeats")
    rep.claim(f"{procs[-1]} processes: α per round", alpha4 * 1e6 if physical else None, 130 if notes else None,
              "µs", MEASURED, rtol=0.5, why=why)
    rep.claim(f"{procs[-1]} processes: effective bandwidth β", beta4 / 1e9 if physical else None,
              4 if notes else None, "GB/s", MEASURED, rtol=0.5, why=why)
    rep.note("the shape is the point: a fixed cost per call plus a cost per byte, on any interconnect")
    if rep.figure_dir():
        fig, ax = new_figure(figsize=(6, 4))
        grid = np.geomspace(sizes[0], sizes[-1], 100)
        for k in procs:
            (dots,) = ax.loglog(sizes, medians[k], "o", label=f"{k} processes (median)")
            ax.loglog(grid, fits[k][0] + fits[k][1] * grid, "-", color=dots.get_color(), label=f"fit, K = {k}")
        ax.set_xlabel("bytes per process")
        ax.set_ylabel("all-reduce time (s)")
        ax.set_title("gloo all-reduce on this machine")
        ax.legend()
        rep.save_figure(fig, "l14_04_gloo_allreduce")


def part3_share_of_step(rep: Report, args: argparse.Namespace) -> None:
    rep.part(3, "all-reduce vs compute in data parallelism: the share does not depend on model size")
    k, tokens = args.world_size, args.tokens_per_gpu
    flops_per_s = args.mfu * args.peak_tflops * 1e12
    rep.note(f"K = {k} GPUs, {tokens} tokens per GPU per step; compute = 6·P·tokens at "
             f"{args.mfu:g} × {args.peak_tflops:g} TFLOP/s;\n"
             f"ring all-reduce of bf16 gradients ({GRAD_BYTES_PER_PARAM} B/param), latency neglected (α = 0);\n"
             "share = comm / (comm + compute), nothing overlapped")
    links = [Link(0.0, preset.beta_Bps, preset.name) for preset in (NVLINK, INFINIBAND, ETHERNET)]
    params = [125e6, 1.3e9, 7e9, 70e9, 405e9]
    rows = [[f"{p / 1e9:g}B"] + [f"{100 * comm_share(k, p, link, tokens, flops_per_s):.1f} %" for link in links]
            for p in params]
    rep.table(["parameters P"] + [f"{link.name} ({link.beta_Bps / 1e9:g} GB/s)" for link in links], rows,
              name="share")
    at_notes = (k, tokens, args.mfu, args.peak_tflops) == (NOTES_K, TOKENS_PER_GPU, MFU, PEAK_TFLOPS)
    for link, notes in zip(links, (43, 82, 97)):
        shares = [comm_share(k, p, link, tokens, flops_per_s) for p in params]
        spread = max(shares) - min(shares)
        assert spread < 1e-12, f"the share should not depend on P: spread {spread}"
        rep.claim(f"{link.name}: all-reduce share of a step", 100 * shares[0], notes if at_notes else None, "%",
                  ASSUMPTION, rtol=0.01, why="under the stated compute and gradient assumptions")
    # The presets' 5 µs latency adds 2(K-1)·α per step: how much that moves the share for the smallest P.
    with_alpha = [comm_share(k, params[0], preset, tokens, flops_per_s) for preset in (NVLINK, INFINIBAND, ETHERNET)]
    without = [comm_share(k, params[0], link, tokens, flops_per_s) for link in links]
    moved = 100 * max(abs(x - y) for x, y in zip(with_alpha, without))
    verdict = "latency is negligible" if moved < 1 else "latency is not negligible at this K"
    rep.line(f"  with α = 5 µs the share for {params[0] / 1e6:g}M parameters moves by at most "
             f"{moved:.2f} points: {verdict}")
    rep.record("alpha_moves_share_points", moved)


if __name__ == "__main__":
    run_main(main)
