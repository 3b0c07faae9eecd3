"""Lecture 15 §3 (通信与反向重叠) in the ecosystem's viewer: a real DDP step and ddp_sim's, as Chrome traces.

    python code/lecture15/07_traces.py [--world-size 4] [--layers 6] [--width 256] [--bucket-cap-mb 0.25]
                                       [--trace DIR] [--save-figs DIR]

One launch (gloo, CPU): each rank measures its gloo all-reduce at a few sizes (fitted to the ring α-β
model, Part 1) and when each gradient is ready in a plain backward, then records one DDP step with
torch.profiler (Part 2): DDP launches each bucket's all-reduce from its autograd hook while the
backward is still running, and gloo runs it on its own threads (which usually start at once; on
busy cores they may wait) while the backward computes the next layers' gradients: Part 2 measures
that compute, and with one bucket (--bucket-cap-mb 100) finds none. Part 3 feeds the same model,
bucket cap and fitted link to lecture15/ddp_sim.py and writes its step as a trace too, one track
per stream. --trace DIR writes both (every rank's real one) for Perfetto or chrome://tracing;
--save-figs DIR draws them one above the other. The default run is short already: --quick runs the
same.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.error_types import UsageError
from common.launch import capture_stderr, launch, preload_for_ddp
from common.leftovers import owned_folder
from common.output import Report
from common.output_files import make_output_dir, write_json
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.timeline import Span
from common.units import MiB, fmt_bytes
from lecture15.ddp_sim import COMM, COMPUTE, Timeline, assign_buckets, gantt_figure, simulate_backward
from lecture15.model_vs_real import fit_ring, make_mlp

RING_ALLREDUCE = algorithm("ring all-reduce")

# reproduce.py passes --quick to every script; here it changes nothing, and says so
QUICK_HELP = "accepted, and the run is the same: the default run is already short (one profiled step)"
SWEEP_BYTES = [2**14, 2**16, 2**18, 2**20]   # 16 KiB … 1 MiB: around this model's buckets
WARMUP = 2                                   # DDP rebuilds its buckets after its first step
BACKWARD_OP = "autograd::engine::evaluate_function: "   # the profiler's name for one backward node
ALLREDUCE_OP = "gloo:all_reduce"                        # gloo's own span, on its worker threads
LAUNCH_OP = "c10d::allreduce_"      # DDP's call into the process group, on the thread running the backward
# CPU time here (measured at W = 4 on 2 loaded cores: about 8 s, 5 of them importing torch, dynamo and
# the profiler): the sweep, the timed backwards and the profiled step of L Linear(w, w) layers.
COST = Cost([Term("1", 7.0, lambda a: 1), Term("W²", 0.05, lambda a: a.world_size**2),
             Term("W·repeats", 0.05, lambda a: a.world_size * a.repeats),
             Term("repeats·L·(w/1024)²·(B/256)", 0.2,
                  lambda a: a.repeats * a.layers * (a.width / 1024) ** 2 * a.batch / 256)],
            memory=lambda a: (a.world_size + 1) * (300 * 2**20 + 16 * a.layers * a.width**2
                                                   + 12 * a.batch * a.width * a.layers))


def main() -> None:
    parser = make_parser(__doc__, world_size=4, layers=6, width=256, batch=256, bucket_cap_mb=0.25, repeats=3,
                         real=True, figs=True, cost=COST, trace=None, help_for={"quick": QUICK_HELP},
                         context={"layers": "Linear layers", "repeats": "timed all-reduces and backwards",
                                  "bucket_cap_mb": "the default: one layer per bucket"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be at least 2: one rank has nothing to all-reduce")
    if args.batch < args.world_size:
        raise UsageError(f"--batch {args.batch} < --world-size {args.world_size}: every rank needs a sample")
    rep = Report(__file__, "a real DDP step and ddp_sim's, as Chrome traces (Perfetto, chrome://tracing)",
                 args)
    preload_for_ddp(args.world_size)   # DDP() imports torch._dynamo: once here, not on every rank
    cfg = {"layers": args.layers, "width": args.width, "batch": args.batch, "repeats": args.repeats,
           "cap_bytes": args.bucket_cap_bytes}
    ranks = launch(traces_worker, args.world_size, cfg, timeout_s=args.timeout_s)
    args.world_size = len(ranks)                     # under torchrun the group's size wins over the flag
    rep.part(1, f"this machine's gloo all-reduce on {args.world_size} ranks, fitted to the ring α-β model")
    link = part1_link(rep, args, ranks)              # α and β of gloo here
    rep.part(2, "a real DDP step under torch.profiler (rank 0): gloo's all-reduces beside the backward")
    real = part2_real(rep, args, ranks)              # the profiled step: all-reduces during the backward
    rep.part(3, "ddp_sim's step for the same model, bucket cap and fitted link; both traces written")
    part3_simulated(rep, args, ranks, link, real)    # ddp_sim's step; both written as traces and drawn
    rep.finish()


# ---- rank code ------------------------------------------------------------------------------------
def timed(fn: Any, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        dist.barrier()                      # every rank starts the call together
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def ready_times(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, repeats: int) -> list[float]:
    """Median seconds from the start of a plain backward to each parameter's gradient (model order)."""
    params, stamps = list(model.parameters()), {}
    handles = [p.register_post_accumulate_grad_hook(lambda p, i=i: stamps.__setitem__(i, time.perf_counter()))
               for i, p in enumerate(params)]
    runs = []
    for _ in range(WARMUP + repeats):
        model.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        start = time.perf_counter()
        loss.backward()
        runs.append([stamps[i] - start for i in range(len(params))])
    for handle in handles:
        handle.remove()
    return [statistics.median(col) for col in zip(*runs[WARMUP:])]


def profiled_step(ddp: DDP, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """One DDP step (after the rebuild) under torch.profiler, its Chrome trace read back as data."""
    from torch.profiler import ProfilerActivity, profile

    def step() -> None:
        ddp.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x), y).backward()    # returns once every bucket is all-reduced

    for _ in range(WARMUP):
        step()
    with capture_stderr():                  # the profiler's start/stop lines from C++, not for the reader
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        with owned_folder("course-run-") as folder:
            path = os.path.join(folder, "trace.json")
            prof.export_chrome_trace(path)
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)


def traces_worker(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(0)                                     # the same model on every rank
    model = make_mlp(cfg["layers"], cfg["width"])
    gen = torch.Generator().manual_seed(1 + rank)            # each rank its own data
    x, y = (torch.randn(cfg["batch"] // world, cfg["width"], generator=gen) for _ in range(2))
    buffers = [torch.ones(n // 4) for n in SWEEP_BYTES]
    sweep = [timed(lambda b=b: dist.all_reduce(b), cfg["repeats"]) for b in buffers]
    ready = ready_times(model, x, y, cfg["repeats"])
    ddp = DDP(model, bucket_cap_mb=cfg["cap_bytes"] / MiB)   # an explicit cap caps the first bucket too
    trace = profiled_step(ddp, x, y)
    del ddp                                 # before the group ends (a live DDP object aborted ranks here)
    return {"sweep": sweep, "ready": ready, "trace": trace,
            "param_bytes": [p.numel() * p.element_size() for p in model.parameters()],
            "param_names": [n for n, _ in model.named_parameters()]}


# ---- traces as data: read the real one, write the simulated one -----------------------------------
def spans(trace: dict[str, Any], test: Any) -> list[dict[str, Any]]:
    return sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and test(e.get("name", ""))),
                  key=lambda e: e["ts"])


def found(trace: dict[str, Any], name: str, prefix: bool = False) -> list[dict[str, Any]]:
    """The spans named `name` (or starting with it), of which the profiled DDP step has some."""
    got = spans(trace, (lambda n: n.startswith(name)) if prefix else (lambda n: n == name))
    if not got:
        raise RuntimeError(f"the profiled DDP step has no '{name}' spans: this torch names them otherwise")
    return got


def real_timeline(trace: dict[str, Any]) -> Timeline:
    """The profiled step as ddp_sim's Timeline: the backward's nodes (main thread) and gloo's
    all-reduces (its threads), in seconds since the first backward node began."""
    backward, comm = found(trace, BACKWARD_OP, prefix=True), found(trace, ALLREDUCE_OP)
    t0 = backward[0]["ts"]
    def start_end(e: dict[str, Any]) -> tuple[float, float]:
        return (e["ts"] - t0) / 1e6, (e["ts"] + e["dur"] - t0) / 1e6

    events = [Span(0, COMPUTE, *start_end(e), label=e["name"][len(BACKWARD_OP):]) for e in backward]
    events += [Span(1, COMM, *start_end(e), index=i, label=f"all-reduce {i}") for i, e in enumerate(comm)]
    end = max(e.end_s for e in events if e.kind == COMPUTE)
    return Timeline(events, [[] for _ in comm], [], [], end, True)


ACCUMULATE = "torch::autograd::AccumulateGrad"   # a node that stores a gradient and runs DDP's hook


def compute_overlap(trace: dict[str, Any]) -> dict[str, Any]:
    """How much backward COMPUTE runs while a gloo all-reduce runs: the 'gloo:all_reduce' spans (gloo's
    threads) against the backward's gradient-computing nodes (the *Backward ones on the thread running
    the backward). AccumulateGrad nodes are left out: they store a gradient and run DDP's hook, which
    copies it into its bucket and launches the bucket's all-reduce, so the last bucket's all-reduce
    always starts inside one. With one bucket nothing computes after it: no overlap, whatever the load.
    Returns the overlapped and the whole compute time (s), and per all-reduce its overlapped compute."""
    backward, comm = found(trace, BACKWARD_OP, prefix=True), found(trace, ALLREDUCE_OP)
    main = backward[0]["tid"]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in backward
               if e["tid"] == main and e["name"][len(BACKWARD_OP):] != ACCUMULATE]
    if not compute:
        raise RuntimeError("the profiled DDP step has no backward compute nodes: this torch names them "
                           "otherwise")

    def overlapped(start: float, end: float) -> float:
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in compute)
    # the union of the all-reduce spans (gloo's two threads may run two at once), then its overlap
    merged: list[list[float]] = []
    for e in comm:
        start, end = e["ts"], e["ts"] + e["dur"]
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return {"overlap_s": sum(overlapped(a, b) for a, b in merged) / 1e6,
            "compute_s": sum(b - a for a, b in compute) / 1e6,
            "per_allreduce_s": [overlapped(e["ts"], e["ts"] + e["dur"]) / 1e6 for e in comm]}


def chrome_trace(timeline: Timeline, title: str) -> dict[str, Any]:
    """A Timeline as Chrome-trace JSON: one process, one track (thread) per stream, µs."""
    tracks = {"compute": (1, "backward (gradients ready)"), "comm": (2, "all-reduce (ring α-β)")}
    meta = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": title}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}
             for tid, name in tracks.values()]
    spans_ = [{"name": e.label, "cat": e.kind, "ph": "X", "ts": e.start_s * 1e6,
               "dur": (e.end_s - e.start_s) * 1e6, "pid": 1, "tid": tracks[e.kind][0],
               "args": {} if e.index is None else {"bucket": e.index}} for e in timeline.events]
    return {"traceEvents": meta + spans_, "displayTimeUnit": "ms"}


def trace_problems(trace: Any) -> list[str]:
    """What a viewer would trip on: no traceEvents list, or a complete event ("X") without a number
    in ts and dur or without a pid and tid. A name is accepted as pid or tid: torch's own export
    has one (the profiling window: pid "Spans", tid "PyTorch Profiler"), and viewers take names."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["no traceEvents list"]
    bad = [e.get("name", "?") for e in trace["traceEvents"] if e.get("ph") == "X" and not (
        all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur"))
        and all(isinstance(e.get(k), (int, float, str)) for k in ("pid", "tid")))]
    return [f"{len(bad)} complete events lack ts, dur, pid or tid (first: {bad[0]})"] if bad else []


# ---- the parts ------------------------------------------------------------------------------------
def part1_link(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> Link:
    k = args.world_size
    medians = [statistics.median(max(r["sweep"][i][j] for r in ranks)      # the slowest rank, each repeat
                                 for j in range(len(ranks[0]["sweep"][i]))) for i in range(len(SWEEP_BYTES))]
    rep.table(["size", "slowest rank, median (ms)"], [[fmt_bytes(n, binary=True), f"{t * 1e3:.3f}"]
                                                      for n, t in zip(SWEEP_BYTES, medians)], name="sweep")
    link, failed = fit_ring(k, SWEEP_BYTES, medians)
    if link is None:   # a loaded machine: the largest size alone still gives a bandwidth (α taken as 0)
        t, n = medians[-1], SWEEP_BYTES[-1]
        link = Link(0.0, RING_ALLREDUCE.time(k, n, Link(0.0, 1.0)) / t, "the 1 MiB all-reduce alone")
        rep.line(f"  {failed}; using {link.describe()}")
    else:
        rep.line(f"  least-squares fit: {link.describe()}")
    return link


def part2_real(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> Timeline:
    real = real_timeline(ranks[0]["trace"])
    comm = real.comm_events()
    overlaps = [compute_overlap(r["trace"]) for r in ranks]
    rows = [[e.index, f"{e.start_s * 1e3:.2f}", f"{e.end_s * 1e3:.2f}", f"{during * 1e3:.2f}"]
            for e, during in zip(comm, overlaps[0]["per_allreduce_s"])]
    rep.table(["all-reduce", "starts (ms)", "ends (ms)", "backward compute meanwhile (ms)"], rows,
              name="allreduces")
    buckets = assign_buckets(ranks[0]["param_bytes"], args.bucket_cap_bytes, args.bucket_cap_bytes)
    nodes = sum(e.kind == COMPUTE for e in real.events)
    rep.line(f"  backward: {real.backward_s * 1e3:.2f} ms of {nodes} nodes; the first all-reduce starts at "
             f"{comm[0].start_s * 1e3:.2f} ms, the last ends at {comm[-1].end_s * 1e3:.2f} ms; the "
             f"simulator's rule gives {len(buckets)} bucket{'s' if len(buckets) != 1 else ''} at a "
             f"{args.bucket_cap_bytes / MiB:g} MiB cap (expected: as many all-reduces)")
    rep.note(f"times from the start of the first backward node; all-reduces are the '{ALLREDUCE_OP}' spans "
             f"on gloo's worker threads (the main thread only launches them: '{LAUNCH_OP}'). Their "
             "length is waiting as much as sending: on shared cores a rank's all-reduce waits for the "
             "others.")
    overlapped = [o["overlap_s"] > 0 for o in overlaps]
    rep.table(["rank", "backward compute (ms)", "of it while an all-reduce ran (ms)"],
              [[rank, f"{o['compute_s'] * 1e3:.2f}", f"{o['overlap_s'] * 1e3:.2f}"]
               for rank, o in enumerate(overlaps)], name="overlap")
    # Several all-reduces (buckets): the first is launched with layers still to compute, so some rank's
    # gloo thread runs it during that compute (a rank whose cores are busy may start its gloo thread
    # only after its backward, as happened with 24 ranks on 2 cores). One: no rank can, whatever the
    # load. (Whether the count is ddp_sim's is a row's business: EN-L15-trace-allreduces-buckets.)
    expected = len(comm) > 1
    none = "no overlap: every all-reduce ran after the backward's last compute node"
    verdict = "overlap: gloo all-reduced earlier buckets while the backward still computed" \
        if any(overlapped) else none
    rep.line(f"  {verdict} (on {sum(overlapped)} of {len(ranks)} ranks)")
    rep.note("backward compute = the nodes that compute gradients (*Backward0); AccumulateGrad nodes are "
             "left out: they store a gradient and run DDP's hook, which copies it into its bucket and "
             "launches the bucket's all-reduce, so the last bucket always starts inside one. With one "
             "bucket nothing computes after it: no overlap, whatever the load (try --bucket-cap-mb 100). "
             "On busy cores a rank's gloo thread may start only after its backward: that rank shows none.")
    rep.value("real_overlap", any(overlapped))
    rep.value("real_ranks", len(ranks))
    rep.value("real_allreduces", len(comm))
    rep.value("sim_buckets", len(buckets))
    # load decides how many: a timing, not a count
    rep.value("real_overlap_ranks", sum(overlapped), timed=True)
    rep.value("real_first_allreduce_ms", comm[0].start_s * 1e3, timed=True)
    rep.value("real_backward_ms", real.backward_s * 1e3, timed=True)
    rep.value("real_overlap_ms", max(o["overlap_s"] for o in overlaps) * 1e3, timed=True)
    rep.value("real_compute_ms", overlaps[0]["compute_s"] * 1e3, timed=True)
    rep.compare_with_notes(in_table=True)   # the overlap and the all-reduces counted above
    if not expected:   # one all-reduce after the last gradient: overlap found would be a measuring bug
        rep.check_close("overlap found vs 1 all-reduce (none expected)", float(any(overlapped)), 0)
    # With several buckets overlap is an observation (its row differs without it), not a run-ending
    # check: on cores busy with other work every rank's gloo thread may start after its backward.
    # So is the count against ddp_sim's buckets: torch's bucketing beside ours, a row.
    return real


def part3_simulated(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]], link: Link,
                    real: Timeline) -> None:
    sizes, cap = ranks[0]["param_bytes"], args.bucket_cap_bytes
    ready = [statistics.fmean(r["ready"][i] for r in ranks) for i in range(len(sizes))]
    sim = simulate_backward(ready, sizes, assign_buckets(sizes, cap, cap),
                            lambda n: RING_ALLREDUCE.time(args.world_size, n, link), overlap=True,
                            names=ranks[0]["param_names"])
    rep.table(["step", "backward + exposed all-reduce (ms)", "first all-reduce starts (ms)"],
              [[name, f"{t.step_s * 1e3:.2f}", f"{t.first_comm_start_s * 1e3:.2f}"]
               for name, t in (("real DDP, profiled (rank 0)", real), ("ddp_sim", sim))], name="steps")
    rep.note("the simulated step takes each gradient's ready time from a plain backward (mean of ranks) and "
             "each bucket's all-reduce from the fitted ring; the profiled step runs with the profiler on and "
             "the ranks sharing the machine's cores: model_vs_real.py compares the two numbers properly, "
             "here they are pictures.")
    traces = {"ddp_sim": chrome_trace(sim, f"ddp_sim: {args.layers} × Linear({args.width}), cap "
                                           f"{cap / MiB:g} MiB, {link.describe()}")}
    traces |= {f"real_rank{rank}": r["trace"] for rank, r in enumerate(ranks)}
    problems = [f"{name}: {p}" for name, t in traces.items() for p in trace_problems(t)]
    rep.value("sim_overlap", sim.first_comm_start_s < sim.backward_s)
    rep.value("traces_valid", not problems)
    rep.value("trace_problems", "; ".join(problems) or "none")
    if args.trace:
        make_output_dir(args.trace)
        for name, trace in traces.items():
            path = os.path.join(args.trace, f"{rep.figure_name(name)}.json")
            write_json(path, trace)
            rep.value(f"trace_{name}", os.path.basename(path), compared=False)
        rep.line(f"  traces written to {args.trace}: {len(traces)} files (open them in ui.perfetto.dev or "
                 "chrome://tracing)")
    if rep.figure_dir() is not None:   # matplotlib (1-2 s to import) only when a figure was asked for
        rep.save_figure(gantt_figure([("real DDP (torch.profiler)", real), ("ddp_sim", sim)],
                                     f"one DDP step, {args.world_size} gloo ranks, {args.layers} × "
                                     f"Linear({args.width}), cap {cap / MiB:g} MiB"), "timelines")


if __name__ == "__main__":
    run_main(main)
