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
from typing import Callable

import numpy as np

from common.budget import Cost, Term
from common.cli import UsageError, link_from_args, make_parser, positive_float, positive_int, run_main
from common.costmodel import (
    ALLREDUCE_TIMES,
    ETHERNET,
    INFINIBAND,
    NVLINK,
    Link,
    ring_allreduce_time,
    ring_naive_crossover_bytes,
    ring_tree_crossover_bytes,
)
from common.launcher import launch
from common.output import ASSUMPTION, EXACT, Report, fmt_bytes, fmt_time
from lecture14 import figures
from lecture14 import gloo_timing as gt

NOTES_K = 8
MODEL_SIZES = [10**e for e in range(3, 10)]  # 1 KB … 1 GB, MB = 1e6 B as in the notes
REAL_PROCS = (2, 4)                           # the notes' two process counts
REAL_SIZES = [2**10 * 4**i for i in range(8)]  # 1 KiB … 16 MiB by factors of 4
QUICK_SIZES = [2**10, 2**14, 2**18, 2**20]      # 1 KiB, 16 KiB, 256 KiB, 1 MiB
NOTES_GLOO_ALPHA_S = 130e-6                   # the notes' fitted gloo α, 4 processes (Part 2)
PEAK_TFLOPS, MFU, TOKENS_PER_GPU = 989.0, 0.40, 2048  # the notes' compute assumptions (Part 3)
GRAD_BYTES_PER_PARAM = 2                      # bf16 gradients
# The ranks Part 2 starts are REAL_PROCS, whatever --world-size (the model's K, up to 4,096 devices)
# says. CPU time here (bench/bench_costs.py): start-up and the models, then about 0.25 s per sweep of
# the sizes on 2 and 4 ranks.
COST = Cost([Term("1", 2.7, lambda a: 1), Term("repeats", 0.25, lambda a: a.repeats)],
            ranks=lambda a: max(REAL_PROCS))


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
    """Crossovers sit at a multiple of α·β bytes (about 1/K up to about K/log2 K of it); no message
    is smaller than a byte, so the search starts there at the lowest."""
    scale = max(link.alpha_s * link.beta_Bps, 1.0)
    return max(scale * 1e-9, 1.0), scale * 1e9


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
                         real=True, figs=True, quick={"repeats": 3}, cost=COST,
                         context={"repeats": "Part 2, per size", "peak_tflops": "Part 3"})
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
    rep.note(f"K = {k}, {link.describe()}; N = bytes per device (MB = 1e6 B)")
    rows, winners = [], {}
    for n in MODEL_SIZES:
        times = allreduce_times(k, n, link)
        winners[n] = winner(times)
        rows.append([fmt_bytes(n)] + [fmt_time(times[name]) for name in ALLREDUCE_TIMES] + [winners[n]])
    rep.table(["N", "ring", "tree", "naive", "fastest"], rows, name="times")
    setting = ("world_size", "alpha_us", "beta_gbs")  # the notes' K = 8, 5 µs, 25 GB/s
    claimed = {1e3: "naive", 1e4: "naive", 1e5: "tree", 1e6: "ring", 1e8: "ring"}
    for n, notes in claimed.items():
        times = allreduce_times(k, n, link)
        rep.claim(f"fastest at {fmt_bytes(n)}", winners[int(n)], notes, kind=EXACT, setting=setting,
                  ref="L14-3.4-fastest-by-size", why="the least of the three closed forms: "
                  + ", ".join(f"{name} {fmt_time(t)}" for name, t in times.items()))

    ring = lambda n: ring_allreduce_time(k, n, link)  # noqa: E731 - small closures for the search
    others = {"tree": (ring_tree_crossover_bytes(k, link), 235, "L14-3.4-ring-tree-crossover"),
              "naive": (ring_naive_crossover_bytes(k, link), 122, "L14-ex7-ring-naive-crossover")}
    crossovers: dict[str, float | None] = {}
    for name, (closed, notes_kb, ref) in others.items():
        other = lambda n, name=name: ALLREDUCE_TIMES[name](k, n, link)  # noqa: E731
        searched = numeric_crossover(ring, other, *search_range(link))
        below_a_byte = closed is not None and closed < 1  # a tiny α: they cross where no message is
        crossovers[name] = None if below_a_byte else closed
        if closed is None or below_a_byte:
            assert below_a_byte or searched is None, f"no closed-form crossover but the search found {searched}"
            where = f" (the formulas meet at {closed:.2g} B, below one byte)" if below_a_byte else ""
            rep.line(f"  ring vs {name}: no crossover at K = {k}, α = {link.alpha_s * 1e6:g} µs{where} — "
                     f"{'the ring is never slower' if ring(1e6) <= other(1e6) else 'the ring is never faster'}")
            rep.claim(f"ring = {name} crossover", None, notes_kb, "KB", EXACT, setting=setting, ref=ref,
                      why=f"no size where the two are equal at K = {k} (see the line above)")
            continue
        # The closed form must land on the equal-time point the search finds.
        assert searched is not None and math.isclose(closed, searched, rel_tol=1e-6), (closed, searched)
        rep.claim(f"ring = {name} crossover, closed form (numeric search: {fmt_bytes(searched)})", closed / 1e3,
                  notes_kb, "KB", EXACT, places=0, setting=setting, ref=ref,
                  why="where the two closed forms are equal, solved for N (a bisection on the times agrees)")
    ranges = winner_ranges(k, link)
    if len(ranges) == 1:
        text = f"{ranges[0][1]} at every size"
    else:  # the first range starts at the scan's lower end: name where it stops instead
        text = " · ".join([f"{ranges[0][1]} below {fmt_bytes(ranges[1][0])}"] +
                          [f"{name} from {fmt_bytes(start)}" for start, name in ranges[1:]])
    rep.line(f"  fastest by size (numeric scan): {text}")
    found = [c for c in crossovers.values() if c is not None]
    ring_from = max(found) if found else None
    rep.note(f"few rounds win small (latency-bound) messages; the ring is fastest "
             f"{f'from {fmt_bytes(ring_from)} up' if ring_from else 'at no size or every size'}\n"
             "(bandwidth-bound). NCCL likewise picks ring or tree by message size and device count.")
    rep.claim("the ring takes over at a few hundred KB (100 KB … 1 MB)",
              ring_from is not None and 1e5 <= ring_from < 1e6, True, kind=EXACT, setting=setting,
              ref="L14-5-crossover-hundreds-kb",
              why=f"the larger crossover is at {fmt_bytes(ring_from) if ring_from else 'no size'}")
    if rep.figure_dir():
        rep.save_figure(figures.alpha_beta_sizes(k, link, [1e2, 1e9], crossovers), "allreduce_by_size")


def part2_measure_gloo(rep: Report, args: argparse.Namespace) -> None:
    rep.part(2, "a real all-reduce (gloo, processes on this machine) and a straight-line fit")
    sizes = QUICK_SIZES if args.quick else REAL_SIZES
    sweeps = args.repeats
    rep.note(f"float32 all-reduce; per process count one launch: a checked call per size, one warm-up sweep,\n"
             f"then {sweeps} sweeps timing one call of every size each. A call's time is the slowest rank's,\n"
             "after a barrier. Each sweep is fitted with a line t = a + b·N (least relative error) and read\n"
             "as a ring: α = a/2(K-1) per round, β = 2(K-1)/(K·b); shown: median [least … most] over the\n"
             f"sweeps whose fit succeeded. This machine has {os.cpu_count() or 1} CPU cores: more processes "
             "than cores take turns.")
    runs: dict[int, dict] = {}
    for asked in REAL_PROCS:  # one launch per process count: start-up is paid once each
        result = launch(gt.time_allreduce_worker, asked, sizes, sweeps, timeout_s=args.timeout_s)
        k = len(result)  # under torchrun the group has torchrun's size, whatever was asked
        if k not in runs:
            runs[k] = gt.summarize_run(k, sizes, gt.slowest_rank(result),
                                       [all(r["correct"][i] for r in result) for i in range(len(sizes))])
            rep.record(f"sweeps_{k}", runs[k]["sweeps"])
    rep.table(["size"] + [f"{k} processes: median [range]" for k in runs] + ["correct"],
              [[fmt_bytes(n, binary=True)]
               + [f"{fmt_time(r['median'][i])} [{fmt_time(r['low'][i])} … {fmt_time(r['high'][i])}]"
                  for r in runs.values()]
               + ["yes" if all(r["correct"][i] for r in runs.values()) else "NO: wrong sum"]
               for i, n in enumerate(sizes)], name="measured")
    fit_rows = []
    for k, run in runs.items():
        fit_rows.append([k, f"{run['alpha'].used} of {run['alpha'].total}", gt.spread_text(run["alpha"], fmt_time),
                         gt.spread_text(run["beta"], lambda v: f"{v / 1e9:.3g}"),
                         gt.spread_text(run["ratio"], lambda v: f"{v:.2f}")])
        for f in run["fits"]:
            if f.failed:
                rep.line(f"  {k} processes, a sweep's fit failed: {f.failed}")
    rep.table(["processes", "fits ok", "α per round", "β (GB/s)", "t(16 KiB) / t(1 KiB)"], fit_rows, name="fit")
    gt.claims(rep, runs, NOTES_GLOO_ALPHA_S)  # the notes' α, β, 1 KiB ≈ 16 KiB, loopback vs NVLink
    rep.note("the shape is the point: a fixed cost per call plus a cost per byte, on any interconnect")
    if rep.figure_dir():
        rep.save_figure(figures.gloo_fit(sizes, runs, sweeps), "gloo_allreduce")


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
    setting = ("world_size", "tokens_per_gpu", "mfu", "peak_tflops")
    spreads = []
    for link, notes, ref in zip(links, (43, 82, 97), ("L14-3.4-share-nvlink", "L14-3.4-share-infiniband",
                                                       "L14-3.4-share-ethernet")):
        shares = [comm_share(k, p, link, tokens, flops_per_s) for p in params]
        spreads.append(max(shares) - min(shares))
        rep.claim(f"{link.name}: all-reduce share of a step", 100 * shares[0], notes, "%", ASSUMPTION, places=0,
                  setting=setting, ref=ref, why=f"comm / (comm + compute) at {link.beta_Bps / 1e9:g} GB/s, with "
                  f"the compute assumptions in the note above (MFU {args.mfu:g} of {args.peak_tflops:g} TFLOP/s)")
    rep.claim("the share does not depend on the model size (α = 0)", max(spreads) < 1e-12, True, kind=EXACT,
              setting=(), ref="L14-3.4-share-independent-of-p",
              why=f"largest spread over P = 125M … 405B: {max(spreads):.1e} (both terms are proportional to P)")
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
