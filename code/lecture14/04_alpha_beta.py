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

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math
import os
import time

import torch
import torch.distributed as dist

from common import checker
from common.cli import link_from_args, make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import ETHERNET, INFINIBAND, NVLINK, Link
from common.error_types import UsageError
from common.flags import positive_float, positive_int
from common.launch import launch
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import fmt_bytes, fmt_time
from lecture14 import alpha_beta_numerics as num
from lecture14 import figures
from lecture14.costmodel import COMPARED_ALLREDUCES, ring_naive_crossover_bytes, ring_tree_crossover_bytes

NOTES_K = 8
MODEL_SIZES = [10**e for e in range(3, 10)]  # 1 KB … 1 GB, MB = 1e6 B as in the notes
NOTES_FASTEST = {  # N: (the recorded value's suffix, the notes' row naming the fastest there)
    10**3: ("1kb", "L14-3.4-fastest-by-size"), 10**4: ("10kb", "L14-3.4-fastest-by-size-10kb"),
    10**5: ("100kb", "L14-3.4-fastest-by-size-100kb"), 10**6: ("1mb", "L14-3.4-fastest-by-size-1mb"),
    10**8: ("100mb", "L14-3.4-fastest-by-size-100mb")}
REAL_PROCS = (2, 4)                           # the notes' two process counts
REAL_SIZES = [2**10 * 4**i for i in range(8)]  # 1 KiB … 16 MiB by factors of 4
QUICK_SIZES = [2**10, 2**14, 2**18, 2**20]      # 1 KiB, 16 KiB, 256 KiB, 1 MiB
CROSSOVER_KB = {"tree": "ring_tree_crossover_kb", "naive": "ring_naive_crossover_kb"}  # recorded values
GLOO_ALPHA_ROW = "L14-3.4-gloo-fit"      # the notes' fitted gloo α, 4 processes (Part 2)
# Part 3: the notes give 2048 tokens per GPU but no compute rate: an H100's dense bf16 peak at 40 %
# MFU is our assumption, printed beside the shares it decides.
PEAK_TFLOPS, MFU, TOKENS_PER_GPU = 989.0, 0.40, 2048
GRAD_BYTES_PER_PARAM = 2                      # bf16 gradients
# The ranks Part 2 starts are REAL_PROCS, whatever --world-size (the model's K, up to 4,096 devices)
# says. CPU time here (bench/bench_costs.py): start-up and the models, then about 0.25 s per sweep of
# the sizes on 2 and 4 ranks.
COST = Cost([Term("1", 2.7, lambda a: 1), Term("repeats", 0.25, lambda a: a.repeats)],
            ranks=lambda a: max(REAL_PROCS))


def main() -> None:
    parser = make_parser(__doc__, world_size=NOTES_K, alpha_us=5.0, beta_gbs=25.0, repeats=7,
                         peak_tflops=PEAK_TFLOPS, real=True, figs=True, quick={"repeats": 3}, cost=COST,
                         context={"repeats": "Part 2, per size", "peak_tflops": "Part 3"})
    parser.add_argument("--tokens-per-gpu", type=positive_int, default=TOKENS_PER_GPU,
                        help="Part 3: tokens per GPU per step")
    parser.add_argument("--mfu", type=positive_float, default=MFU, metavar="FRACTION",
                        help="Part 3: fraction of peak")
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be at least 2: one device has nothing to all-reduce")
    if args.mfu > 1:
        raise UsageError(f"--mfu is a fraction of peak, at most 1, got {args.mfu:g}")
    rep = Report(__file__, "the α-β model: which all-reduce wins, a real fit, communication's share", args)
    rep.part(1, "ring vs binary tree vs naive (all to rank 0) all-reduce in the α-β model")
    part1_model(rep, args)        # ring / tree / naive times by message size, and the crossovers
    rep.part(2, "a real all-reduce (gloo, processes on this machine) and a straight-line fit")
    part2_measure_gloo(rep, args)  # real all-reduce on 2 and 4 processes, fitted t = a + b·N
    rep.part(3, "all-reduce vs compute in data parallelism: the share does not depend on model size")
    part3_share_of_step(rep, args)  # all-reduce vs compute in K-GPU data parallelism (notes: 8)
    rep.finish()


def winner(times: dict[str, float]) -> str:
    """The fastest algorithm; exact ties (e.g. tree = naive at K = 2) are named together."""
    best = min(times.values())
    return " = ".join(n for n, t in times.items() if math.isclose(t, best, rel_tol=1e-12))


def comm_share(k: int, params: float, link: Link, tokens: int, flops_per_s: float) -> float:
    """All-reduce time / (all-reduce + forward/backward), no overlap; P cancels when α = 0."""
    compute = 6 * params * tokens / flops_per_s
    comm = algorithm("ring all-reduce").time(k, GRAD_BYTES_PER_PARAM * params, link)
    return comm / (comm + compute)


def part1_model(rep: Report, args: argparse.Namespace) -> None:
    k, link = args.world_size, link_from_args(args)
    rep.note(f"K = {k}, {link.describe()}; N = bytes per device (MB = 1e6 B)")
    model_times_table(rep, k, link)
    crossovers = ring_crossovers(rep, k, link)
    ranges = num.winner_ranges(k, link)
    if len(ranges) == 1:
        text = f"{ranges[0][1]} at every size"
    else:  # the first range starts at the scan's lower end: name where it stops instead
        text = " · ".join([f"{ranges[0][1]} below {fmt_bytes(ranges[1][0])}"] +
                          [f"{name} from {fmt_bytes(start)}" for start, name in ranges[1:]])
    rep.line(f"  fastest by size (numeric scan): {text}")
    found = [c for c in crossovers.values() if c is not None]
    ring_from = max(found) if found else None
    rep.note("few rounds win small (latency-bound) messages, the ring large ones; NCCL picks likewise")
    rep.value("ring_from", fmt_bytes(ring_from) if ring_from else "no size")
    rep.value("ring_from_kb", ring_from / 1e3 if ring_from else None)
    if rep.figure_dir():
        rep.save_figure(figures.alpha_beta_sizes(k, link, [1e2, 1e9], crossovers), "allreduce_by_size")


def model_times_table(rep: Report, k: int, link: Link) -> None:
    """Part 1's table: each all-reduce's α-β time at every size, and the fastest."""
    rows, winners, times = [], {}, {}
    for n in MODEL_SIZES:  # keyed by the table's column ("ring", "tree", "naive")
        times[n] = {name.removesuffix(" all-reduce"): algorithm(name).time(k, n, link)
                    for name in COMPARED_ALLREDUCES}
        winners[n] = winner(times[n])
        rows.append([fmt_bytes(n)] + [fmt_time(t) for t in times[n].values()] + [winners[n]])
    # The notes name the fastest at five of these sizes: their word beside ours, decided just below.
    for row, n in zip(rows, MODEL_SIZES):
        row.append(rep.notes_text(NOTES_FASTEST[n][1]) if n in NOTES_FASTEST else "-")
    rep.table(["N", "ring", "tree", "naive", "fastest", "the notes' fastest"], rows, name="times")
    for n, (size, _) in NOTES_FASTEST.items():   # the rows' parameter list: value = "fastest_{size}"
        rep.value(f"fastest_{size}", winners[n])
        rep.value(f"times_{size}", ", ".join(f"{algo} {fmt_time(t)}" for algo, t in times[n].items()))
    rep.compare_with_notes(in_table=True)


def ring_crossovers(rep: Report, k: int, link: Link) -> dict[str, float | None]:
    """Where the ring's time meets the tree's and the naive one's: the closed form, checked against
    a numeric search (None where they never cross at a size of a byte or more)."""
    ring = lambda n: algorithm("ring all-reduce").time(k, n, link)  # noqa: E731 - small closures for the search
    others = {"tree": ring_tree_crossover_bytes(k, link), "naive": ring_naive_crossover_bytes(k, link)}
    crossovers: dict[str, float | None] = {}
    for name, closed in others.items():
        other = lambda n, name=name: algorithm(f"{name} all-reduce").time(k, n, link)  # noqa: E731
        searched = num.numeric_crossover(ring, other, *num.search_range(link))
        below_a_byte = closed is not None and closed < 1  # a tiny α: they cross where no message is
        crossovers[name] = None if below_a_byte else closed
        rep.value(f"ring_{name}_searched", fmt_bytes(searched) if searched else "no size")
        if closed is None or below_a_byte:
            assert below_a_byte or searched is None, \
                f"no closed-form crossover but the search found {searched}"
            where = f" (the formulas meet at {closed:.2g} B, below one byte)" if below_a_byte else ""
            faster = "the ring is never slower" if ring(1e6) <= other(1e6) else "the ring is never faster"
            rep.line(f"  ring vs {name}: no crossover at K = {k}, α = {link.alpha_s * 1e6:g} µs{where} — "
                     f"{faster}")
            rep.value(CROSSOVER_KB[name], None)
            continue
        # The closed form must land on the equal-time point the search finds.
        assert searched is not None and math.isclose(closed, searched, rel_tol=1e-6), (closed, searched)
        rep.value(CROSSOVER_KB[name], closed / 1e3)
    return crossovers


def time_allreduce_worker(rank: int, world_size: int, sizes: list[int], sweeps: int) -> dict:
    """Per size one checked call; one warm-up sweep; then `sweeps` sweeps that time one all-reduce
    of every size each, after a barrier (so a late rank is not counted as transfer). Sweep after
    sweep rather than size after size: a slow spell of the machine hits all sizes of one sweep."""
    buffers = [torch.full((max(1, n // 4),), rank + 1.0, dtype=torch.float32) for n in sizes]
    correct = []
    for x in buffers:
        dist.all_reduce(x)
        correct.append(bool(torch.all(x == world_size * (world_size + 1) / 2)))
    times = []
    for sweep in range(sweeps + 1):  # sweep 0 warms up and is dropped
        row = []
        for x in buffers:
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            row.append(time.perf_counter() - start)
        if sweep:
            times.append(row)
    return {"times": times, "correct": correct}


def part2_measure_gloo(rep: Report, args: argparse.Namespace) -> None:
    sizes = QUICK_SIZES if args.quick else REAL_SIZES
    rep.note("float32 all-reduce; one launch per process count: a checked call per size, a warm-up sweep, "
             f"then {args.repeats} sweeps timing one call of every size; a call takes the slowest rank's "
             "time after a barrier. Each sweep's line t = a + b·N (least relative error) read as a ring: α = "
             "a/2(K-1), β = 2(K-1)/(K·b); median [least … most] over the fits that succeeded. "
             f"{os.cpu_count() or 1} CPU cores here: more processes than cores take turns.")
    runs: dict[int, dict] = {}
    for asked in REAL_PROCS:  # one launch per process count: start-up is paid once each
        result = launch(time_allreduce_worker, asked, sizes, args.repeats, timeout_s=args.timeout_s)
        k = len(result)  # under torchrun the group has torchrun's size, whatever was asked
        if k not in runs:
            slowest = [[max(r["times"][s][i] for r in result) for i in range(len(sizes))]
                       for s in range(args.repeats)]  # [sweep][size]: each call is the slowest rank's
            runs[k] = num.summarize_run(k, sizes, slowest, [all(r["correct"][i] for r in result)
                                                          for i in range(len(sizes))])
            rep.value(f"sweeps_{k}", runs[k]["sweeps"], compared=False)
    rep.table(["size"] + [f"{k} processes: median [range]" for k in runs] + ["correct"],
              [[fmt_bytes(n, binary=True)]
               + [f"{fmt_time(r['median'][i])} [{fmt_time(r['low'][i])} … {fmt_time(r['high'][i])}]"
                  for r in runs.values()]
               + ["yes" if all(r["correct"][i] for r in runs.values()) else "NO: wrong sum"]
               for i, n in enumerate(sizes)], name="measured")
    fit_rows = []
    for k, run in runs.items():
        fit_rows.append([k, f"{run['alpha'].used} of {run['alpha'].total}",
                         num.spread_text(run["alpha"], fmt_time),
                         num.spread_text(run["beta"], lambda v: f"{v / 1e9:.3g}"),
                         num.spread_text(run["ratio"], lambda v: f"{v:.2f}")])
        for f in run["fits"]:
            if f.failed:
                rep.line(f"  {k} processes, a sweep's fit failed: {f.failed}")
    rep.table(["processes", "fits ok", "α per round", "β (GB/s)", "t(16 KiB) / t(1 KiB)"], fit_rows,
              name="fit")
    record_fit(rep, runs)
    if rep.figure_dir():
        rep.save_figure(figures.gloo_fit(sizes, runs, args.repeats), "gloo_allreduce")


def record_fit(rep: Report, runs: dict[int, dict]) -> None:
    """The 4-process fit (the notes': about 130 µs, about 4 GB/s), 1 KiB against 16 KiB, and the
    fitted α over a fast link's (the notes' model's 5 µs): None where the fits failed."""
    run = runs.get(4)  # under torchrun another K: the notes' figures are for 4 processes
    alpha, beta, ratio = (run[key] if run else num.spread([None]) for key in ("alpha", "beta", "ratio"))
    link_alpha = min(NVLINK.alpha_s, INFINIBAND.alpha_s)
    rep.value("gloo_alpha_us", alpha.median * 1e6 if alpha.measured else None)
    rep.value("gloo_beta_gbs", beta.median / 1e9 if beta.measured else None)
    rep.value("gloo_fits_ok", alpha.used)
    rep.value("gloo_fits", alpha.total)
    rep.value("gloo_alpha_range", f"{alpha.low * 1e6:.3g} … {alpha.high * 1e6:.3g} µs" if alpha.used
               else "none")
    rep.value("gloo_beta_range",
              f"{beta.low / 1e9:.3g} … {beta.high / 1e9:.3g} GB/s" if beta.used else "none")
    rep.value("link_alpha_us", link_alpha * 1e6)
    rep.value("gloo_alpha_over_link", alpha.median / link_alpha if alpha.measured else None)
    rep.value("notes_alpha_over_link", notes_gloo_alpha_s() / link_alpha)
    rep.value("notes_alpha_orders", math.log10(notes_gloo_alpha_s() / link_alpha))
    rep.value("small_sizes_ratio", ratio.median if ratio.used else float("nan"))
    rep.value("small_sizes_sweeps", ratio.used)
    rep.value("small_sizes_low", ratio.low)
    rep.value("small_sizes_high", ratio.high)
    rep.value("small_sizes_median", ratio.median if ratio.used else None)


def notes_gloo_alpha_s() -> float:
    """The notes' fitted gloo α (4 processes), read from their table: the script retypes no figure."""
    row = checker.row(GLOO_ALPHA_ROW)
    assert row.unit == "µs", row
    return float(row.notes) * 1e-6


def part3_share_of_step(rep: Report, args: argparse.Namespace) -> None:
    k, tokens = args.world_size, args.tokens_per_gpu
    flops_per_s = args.mfu * args.peak_tflops * 1e12
    rep.note(f"K = {k} GPUs, {tokens} tokens per GPU per step; compute = 6·P·tokens at {args.mfu:g} × "
             f"{args.peak_tflops:g} TFLOP/s;\nring all-reduce of bf16 gradients ({GRAD_BYTES_PER_PARAM} "
             "B/param), latency neglected (α = 0), nothing overlapped")
    links = [Link(0.0, preset.beta_Bps, preset.name) for preset in (NVLINK, INFINIBAND, ETHERNET)]
    params = [125e6, 1.3e9, 7e9, 70e9, 405e9]
    rows = [[f"{p / 1e9:g}B"] + [f"{100 * comm_share(k, p, link, tokens, flops_per_s):.1f} %"
                                 for link in links]
            for p in params]
    rep.table(["parameters P"] + [f"{link.name.split(' (')[0]} ({link.beta_Bps / 1e9:g} GB/s)"
                                  for link in links],
              rows, name="share")
    shares = {link.name: [comm_share(k, p, link, tokens, flops_per_s) for p in params] for link in links}
    rep.value("mfu", args.mfu)
    rep.value("peak_tflops", args.peak_tflops)
    rep.value("share_nvlink_pct", 100 * shares[NVLINK.name][0])
    rep.value("share_infiniband_pct", 100 * shares[INFINIBAND.name][0])
    rep.value("share_ethernet_pct", 100 * shares[ETHERNET.name][0])
    rep.value("share_spread", max(max(v) - min(v) for v in shares.values()))
    # A latency α (this run's --alpha-us) adds 2(K-1)·α per step: how much it moves the share for the
    # smallest P.
    latent = [Link(args.alpha_us * 1e-6, link.beta_Bps) for link in links]
    moved = 100 * max(abs(comm_share(k, params[0], a, tokens, flops_per_s) - shares[b.name][0])
                      for a, b in zip(latent, links))
    verdict = "latency is negligible" if moved < 1 else "latency is not negligible at this K"
    rep.line(f"  with α = {args.alpha_us:g} µs the share for {params[0] / 1e6:g}M parameters moves by at "
             f"most {moved:.2f} points: {verdict}")
    rep.value("alpha_moves_share_points", moved, compared=False)


if __name__ == "__main__":
    run_main(main)
