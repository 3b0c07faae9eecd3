"""Lecture 15 §3's timeline model against a real PyTorch DDP step on this machine.

    python code/lecture15/model_vs_real.py [--world-size 2] [--layers 8] [--width 1024] [--rank-batch 64]
                                           [--bucket-cap-mb 4] [--repeats 7]

Part 1 measures gloo all-reduce at a few sizes and fits the ring α-β model to it. Part 2 measures
when each parameter's gradient is ready in a plain backward (hooks, one thread per rank). Part 3
feeds both into lecture15.ddp_sim's two-stream timeline with DDP's buckets, and compares the
prediction with a real DDP step (forward + backward) on the same ranks. Every measured time is
shown as its median with the range (min–max) of the repeats; a fit that gives a negative or absurd
α or β is reported as failed, and a measured step above even the no-overlap prediction is called
what it is: this machine contradicting the model.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link, fit_line_relative, ring_alpha_beta_from_line
from common.error_types import UsageError
from common.flags import positive_int
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import MiB, fmt_bytes
from lecture15.ddp_sim import ascii_timeline, assign_buckets, simulate_backward
from lecture15.timings import slowest_rank, spread_ms

ALLREDUCE_BYTES = [2**14, 2**16, 2**18, 2**20, 2**22, 2**24]   # 16 KiB … 16 MiB, factor 4
WARMUP = 2   # DDP rebuilds its buckets after iteration 1; allocator and gloo buffers settle too
# Beyond these the fitted link is not a gloo ring on one machine: the fit failed, it is not shown.
ALPHA_LIMITS_S, BETA_LIMITS_BPS = (0.0, 10e-3), (1e6, 1e12)


# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up, the all-reduce sweep and the timed DDP
# steps of L Linear(w, w) layers, repeated; W ranks on 2 cores. Memory: the model (float32) about
# four times over in every process, each rank's activations, and the sweep's 16 MiB buffers.
COST = Cost([Term("1", 6.3, lambda a: 1), Term("W²", 0.1, lambda a: a.world_size**2),
             Term("W·repeats", 0.056, lambda a: a.world_size * a.repeats),
             Term("W·repeats·L·(w/1024)²", 0.026,
                  lambda a: a.world_size * a.repeats * a.layers * (a.width / 1024) ** 2),
             Term("repeats·L·(w/1024)·(B/64)", 0.031,
                  lambda a: a.repeats * a.layers * a.width / 1024 * a.rank_batch / 64)],
            memory=lambda a: (a.world_size + 1) * (16 * a.layers * a.width**2
                                                   + 12 * a.rank_batch * a.width * a.layers + 4 * 2**24))


def make_mlp(layers: int, width: int) -> Any:
    """layers × (Linear(width, width), ReLU): equal-sized layers make the buckets easy to read."""
    import torch.nn as nn

    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def _times(fn: Any, repeats: int) -> list[float]:
    import torch.distributed as dist

    times = []
    for _ in range(repeats):
        dist.barrier()                      # every rank starts the timed call together
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def measure_worker(rank: int, world_size: int, layers: int, width: int, batch: int, cap_mib: float,
                   sizes: list[int], repeats: int) -> dict[str, Any]:
    """On every rank: all-reduce times, per-parameter gradient-ready times, real DDP step times."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)                                     # the same model on every rank
    model = make_mlp(layers, width)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(1 + rank)            # each rank its own data
    x = torch.randn(batch, width, generator=gen)
    target = torch.randn(batch, width, generator=gen)

    # Part 1: all-reduce alone (no compute running); buffers allocated outside the timed call.
    buffers = [torch.ones(n // 4) for n in sizes]
    # Small gloo messages are noisy and cheap, so they get twice the repeats (the fit leans on them for α).
    allreduce = [_times(lambda b=b: dist.all_reduce(b), 2 * repeats + 1) for b in buffers]

    # Part 2: a plain backward, both ranks computing at once (the load they share in the DDP step).
    forward_s, ready_runs = _backward_ready_times(model, x, target, repeats)
    # Part 3: the real thing.
    step_s, real_buckets = _ddp_step_times(model, x, target, cap_mib, repeats)
    return {"allreduce_s": allreduce, "forward_runs": forward_s,
            "backward_runs": [max(r) for r in ready_runs],
            "ready_s": np.median(np.array(ready_runs), axis=0).tolist(), "ddp_step_s": step_s,
            "real_buckets": real_buckets, "param_bytes": [p.numel() * p.element_size() for p in params],
            "param_names": [n for n, _ in model.named_parameters()]}


def _backward_ready_times(model: Any, x: Any, target: Any, repeats: int
                          ) -> tuple[list[float], list[list[float]]]:
    """Forward times, and each parameter's gradient-ready time after the backward starts, per run."""
    import torch
    import torch.distributed as dist

    params = list(model.parameters())
    stamps: dict[int, float] = {}
    handles = [p.register_post_accumulate_grad_hook(lambda p, i=i: stamps.__setitem__(i, time.perf_counter()))
               for i, p in enumerate(params)]
    forward_s, ready_runs = [], []
    for it in range(WARMUP + repeats):
        model.zero_grad(set_to_none=True)
        dist.barrier()
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), target)
        backward_start = time.perf_counter()
        loss.backward()
        if it >= WARMUP:
            forward_s.append(backward_start - start)
            ready_runs.append([stamps[i] - backward_start for i in range(len(params))])
    for handle in handles:
        handle.remove()
    return forward_s, ready_runs


def _ddp_step_times(model: Any, x: Any, target: Any, cap_mib: float, repeats: int
                    ) -> tuple[list[float], list[list[int]]]:
    """Real DDP step times, and DDP's buckets after its rebuild. An explicit bucket_cap_mb is also
    the first bucket's cap (torch 2.13)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, bucket_cap_mb=cap_mib)

    def ddp_step() -> None:
        ddp.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), target).backward()   # returns once every bucket is reduced

    for _ in range(WARMUP):
        ddp_step()
    step_s = _times(ddp_step, repeats)
    # DDP's own log of its rebuilt buckets (private, but a comm hook to record them would change the
    # very step being timed: DDP skips its division by the world size and runs Python per bucket).
    logged = ddp._get_ddp_logging_data()
    rebuilt = str(logged.get("rebuilt_per_bucket_param_indices", ""))
    return step_s, [[int(i) for i in b.split()] for b in rebuilt.split(",") if b.strip()]


def combine_ranks(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Timings as the slowest rank saw them, per repeat (`*_runs`) and their median; compute
    (forward, gradient-ready times) per repeat averaged over ranks."""
    result = dict(ranks[0])
    result["allreduce_runs"] = [slowest_rank([r["allreduce_s"][i] for r in ranks])
                                for i in range(len(ranks[0]["allreduce_s"]))]
    result["allreduce_s"] = [statistics.median(runs) for runs in result["allreduce_runs"]]
    result["ddp_step_runs"] = slowest_rank([r["ddp_step_s"] for r in ranks])
    result["ddp_step_s"] = statistics.median(result["ddp_step_runs"])
    for key in ("forward", "backward"):
        result[f"{key}_runs"] = [statistics.fmean(run) for run in zip(*(r[f"{key}_runs"] for r in ranks))]
    result["forward_s"] = statistics.median(result["forward_runs"])
    result["ready_s"] = np.mean([r["ready_s"] for r in ranks], axis=0).tolist()
    result["same_buckets_on_every_rank"] = all(r["real_buckets"] == ranks[0]["real_buckets"] for r in ranks)
    return result


def fit_ring(world_size: int, sizes: list[int], times: list[float]) -> tuple[Link | None, str]:
    """The ring α-β link that best explains the measured times (costmodel's relative least squares),
    or None and why when the fit failed: a negative or absurd α or β (ALPHA_LIMITS_S,
    BETA_LIMITS_BPS) describes no link, so it is reported, never used."""
    a, b = fit_line_relative(sizes, times)
    if b <= 0:
        return None, (f"the fit failed: all-reduce time did not grow with size (slope {b:.3g} s/B), so there "
                      "is no β (a loaded machine? try more --repeats)")
    alpha, beta = ring_alpha_beta_from_line(world_size, a, b)
    bad = []
    if not ALPHA_LIMITS_S[0] <= alpha <= ALPHA_LIMITS_S[1]:
        low, high = (a * 1e6 for a in ALPHA_LIMITS_S)
        bad.append(f"α = {alpha * 1e6:.3g} µs (outside {low:g}–{high:g} µs)")
    if not BETA_LIMITS_BPS[0] <= beta <= BETA_LIMITS_BPS[1]:
        low, high = (b / 1e9 for b in BETA_LIMITS_BPS)
        bad.append(f"β = {beta / 1e9:.3g} GB/s (outside {low:g}–{high:g} GB/s)")
    if bad:
        return None, f"the fit failed: {' and '.join(bad)}; noise in the small sizes (try more --repeats)"
    return Link(alpha, beta, "fitted gloo ring"), ""


def part1_allreduce(rep: Report, args: argparse.Namespace, result: dict[str, Any]) -> Link | None:
    sizes, times = result["sizes"], result["allreduce_s"]
    link, failed = fit_ring(args.world_size, sizes, times)
    rows = [[fmt_bytes(n, binary=True), spread_ms(runs, 3),
             f"{algorithm('ring all-reduce').time(args.world_size, n, link) * 1e3:.3f}" if link else "-",
             f"{n / t / 1e9:.2f}"] for n, t, runs in zip(sizes, times, result["allreduce_runs"])]
    rep.table(["size", "measured, ms: median (min–max)", "fitted ring (ms)", "algbw (GB/s, median)"], rows,
              name="allreduce")
    rep.line(f"  fit: {link.describe() if link else failed}; to the medians of t = 2(K−1)α + "
             f"2(K−1)/K·n/β, K = {args.world_size}, least squares in relative error "
             f"({len(result['allreduce_runs'][0])} repeats per size, slowest rank)")
    if link:   # our figures, which the notes give none of: recorded, not compared
        rep.value("alpha_s", link.alpha_s, compared=False)
        rep.value("beta_Bps", link.beta_Bps, compared=False)
    return link


def part2_backward(rep: Report, args: argparse.Namespace, result: dict[str, Any]) -> None:
    ready, names = result["ready_s"], result["param_names"]
    rows, previous = [], 0.0
    for i in sorted(range(len(ready)), key=lambda i: ready[i]):
        rows.append([names[i], f"{ready[i] * 1e3:.2f}", f"{(ready[i] - previous) * 1e3:.2f}"])
        previous = ready[i]
    rep.table(["parameter (in backward order)", "grad ready at (ms, median)", "since previous (ms)"], rows,
              name="ready")
    rep.line(f"  forward {spread_ms(result['forward_runs'], 1)} ms, backward "
             f"{spread_ms(result['backward_runs'], 1)} ms: median (min–max) of {args.repeats} repeats, "
             "each averaged over ranks; all ranks computing, one thread each")


def verdict(measured: list[float], serial_s: float, overlap_s: float) -> str:
    """What the measured steps say about the model's two predictions, in plain words."""
    median = statistics.median(measured)
    if median > serial_s:
        fastest = "even the fastest repeat is" if min(measured) > serial_s else "the fastest repeat is not"
        return (f"the measured step ({median * 1e3:.1f} ms, median) is above even the no-overlap "
                f"prediction ({serial_s * 1e3:.1f} ms; {fastest}): this machine contradicts the model, whose "
                "two streams never slow each other down")
    if median > overlap_s:
        return (f"the measured step ({median * 1e3:.1f} ms) lies between the overlap "
                f"({overlap_s * 1e3:.1f} ms) and no-overlap ({serial_s * 1e3:.1f} ms) predictions: less "
                "overlap than the model assumes")
    return (f"the measured step ({median * 1e3:.1f} ms) is at or below the overlap prediction "
            f"({overlap_s * 1e3:.1f} ms): the model is pessimistic here (the fitted all-reduce, measured "
            "alone, costs more than it does inside the step)")


def rule_buckets(rep: Report, args: argparse.Namespace, result: dict[str, Any]) -> list[list[int]]:
    """DDP's bucket rule applied to the measured parameters, printed beside the real DDP's buckets."""
    cap = args.bucket_cap_bytes
    buckets = assign_buckets(result["param_bytes"], cap, first_cap_bytes=cap)
    real = result["real_buckets"]
    rep.line(f"  buckets by DDP's rule (gradient-ready order, sealed at >= the cap {cap / MiB:g} MiB): "
             f"{buckets}")
    rep.line(f"  the real DDP's after its rebuild: {'the same' if real == buckets else real} (the same on "
             f"every rank: {result['same_buckets_on_every_rank']})")
    rep.value("rule_equals_real_buckets", buckets == real)
    return buckets


def part3_predict(rep: Report, args: argparse.Namespace, result: dict[str, Any], link: Link | None) -> None:
    sizes = result["param_bytes"]
    buckets = rule_buckets(rep, args, result)
    measured, runs = result["ddp_step_s"], result["ddp_step_runs"]
    if link is None:
        rep.line(f"  measured DDP step (slowest rank): {spread_ms(runs, 1)} ms, median (min–max)")
        rep.line("  no prediction: the α-β fit failed (Part 1), so there is no link to feed the timeline")
        return

    def comm(nbytes: int) -> float:
        return algorithm("ring all-reduce").time(args.world_size, nbytes, link)

    overlapped = simulate_backward(result["ready_s"], sizes, buckets, comm, overlap=True,
                                   names=result["param_names"], forward_s=result["forward_s"])
    serial = simulate_backward(result["ready_s"], sizes, buckets, comm, overlap=False,
                               names=result["param_names"], forward_s=result["forward_s"])
    for row in ascii_timeline(overlapped, width=60, full_scale_s=serial.step_s):
        rep.line("  " + row)
    rows = [[label, f"{t.step_with_forward_s * 1e3:.1f}", f"{t.step_with_forward_s / measured:.2f}"]
            for label, t in (("model, no overlap", serial), ("model, overlap (DDP)", overlapped))]
    rows.append([f"measured DDP step, median (min–max) of {len(runs)}", spread_ms(runs, 1), "1.00"])
    rep.table(["forward + backward", "ms", "÷ measured median"], rows, name="predicted_vs_measured")
    said = verdict(runs, serial.step_with_forward_s, overlapped.step_with_forward_s)
    rep.line("  " + said)
    for key, value in (("verdict", said), ("predicted_overlap_s", overlapped.step_with_forward_s),
                       ("predicted_serial_s", serial.step_with_forward_s), ("measured_s", measured),
                       ("measured_runs_s", runs)):
        rep.value(key, value, compared=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rep.note(f"limits: {args.world_size} ranks share this machine's {cores} cores, so gloo's threads and the "
             "backward compete for them (the model lets the two streams run side by side for free); the "
             "all-reduce was fitted with no compute running; DDP copies gradients into buckets and back; and "
             "other programs on the machine add noise. Predictions use the medians of Parts 1 and 2.")


def main() -> None:
    # --quick: smaller layers, a cap that still gives one layer per bucket, sizes up to 4 MiB
    parser = make_parser(__doc__, world_size=2, layers=8, width=1024, bucket_cap_mb=4.0, repeats=7, real=True,
                         cost=COST, quick={"layers": 4, "width": 512, "repeats": 3, "bucket_cap_mb": 1.0},
                         context={"layers": "Linear layers",
                                  "bucket_cap_mb": "the default: one layer per bucket"})
    parser.add_argument("--rank-batch", type=positive_int, default=64, help="samples per rank")
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be at least 2: one rank has nothing to all-reduce")
    sizes = ALLREDUCE_BYTES[:-1] if args.quick else ALLREDUCE_BYTES
    rep = Report(__file__, "the §3 timeline model against a real DDP step on this machine", args)
    from common.launch import launch, preload_for_ddp  # torch loads only once the flags are good
    preload_for_ddp(args.world_size)  # DDP() imports torch._dynamo: see there
    ranks = launch(measure_worker, args.world_size, args.layers, args.width, args.rank_batch,
                   args.bucket_cap_bytes / MiB, sizes, args.repeats, timeout_s=args.timeout_s)
    args.world_size = len(ranks)            # under torchrun the group's size wins over the flag
    result = combine_ranks(ranks)
    result["sizes"] = sizes
    # Part 1: α and β of this machine's gloo all-reduce
    rep.part(1, f"gloo all-reduce on {args.world_size} ranks, fitted to the ring model")
    link = part1_allreduce(rep, args, result)
    # Part 2: when each gradient is ready in a plain backward
    rep.part(2, f"per-parameter backward times, {args.layers} × Linear({args.width}, {args.width}), "
                f"batch {args.rank_batch} per rank")
    part2_backward(rep, args, result)
    # Part 3: the timeline's prediction against the real DDP step
    rep.part(3, "predicted against measured DDP step")
    part3_predict(rep, args, result, link)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
