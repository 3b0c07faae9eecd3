"""Lecture 15 §4 (三个细节): no_sync and gradient accumulation, unused parameters, BatchNorm buffers.

    python code/lecture15/04_details.py                # 2 gloo ranks on the CPU
    python code/lecture15/04_details.py --micro-batches 8 --steps 5

Each part is one launch of real DDP ranks; the ranks return what they saw, the parent prints it.
A comm hook counts the all-reduces DDP launches (one per bucket; these models fit in one bucket).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import re
import statistics

import numpy as np

from common.budget import Cost, Term
from common.cli import UsageError, make_parser, run_main
from common.launcher import launch, preload_for_ddp
from common.output import MEASURED, Report, fmt_time
from lecture15.details_ranks import (  # noqa: F401  (tests use them from here)
    DATA_SEED,
    LR,
    MICRO_BATCH,
    MODES,
    Branchy,
    accumulation_data,
    buffers_worker,
    mlp,
    no_sync_worker,
    reference_accumulation,
    unused_worker,
)

# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up, Part 1's steps of M micro-batches,
# Part 2's timed steps of an L-layer MLP (16 wide) in two DDPs, on W ranks sharing 2 cores. Memory:
# Part 2's two models, about 1 KiB a layer four times over, in every rank.
COST = Cost([Term("1", 8.8, lambda a: 1), Term("W²", 0.032, lambda a: a.world_size**2),
             Term("W·steps·M", 0.027, lambda a: a.world_size * a.steps * a.micro_batches),
             Term("timing-steps·L·W", 0.00043, lambda a: a.timing_steps * a.layers * a.world_size)],
            memory=lambda a: (a.world_size + 1) * 8 * 1100 * a.layers)


def part1_no_sync(rep: Report, args) -> None:
    steps, micro = args.steps, args.micro_batches
    results = launch(no_sync_worker, args.world_size, steps, micro, timeout_s=args.timeout_s)
    reference = reference_accumulation(steps, micro, args.world_size)
    rows = []
    for mode, label in MODES.items():
        ranks_equal = all(np.array_equal(r[mode]["params"], results[0][mode]["params"]) for r in results)
        rows.append([label, " ".join(map(str, results[0][mode]["counts"])), ranks_equal,
                     float(np.abs(results[0][mode]["params"] - results[0]["sync"]["params"]).max()),
                     float(np.abs(results[0][mode]["params"] - reference).max())])
    rep.table(["how", "all-reduces per step", "ranks identical", "max |p - p_sync|", "max |p - 1 process|"],
              rows, name="no_sync")
    per_step = [results[0][mode]["counts"][0] for mode in MODES]
    expected = [micro, micro, 1]
    rep.line(f"  all-reduces per step (sync, backward-only no_sync, forward no_sync): "
             f"{' '.join(map(str, per_step))}; one bucket, {micro} micro-batches: expected {' '.join(map(str, expected))}")
    rep.claim("only no_sync around the forward saves all-reduces", per_step == expected, True, kind=MEASURED,
              setting=(), ref="L15-4.1-only-forward-saves",
              why="no_sync() sets a flag DDP reads at the end of forward; a backward alone inside it still syncs")
    rep.claim("the three ways give the same parameters on every rank, equal to one process (float64, "
              "max diff < 1e-12)", all(r[2] for r in rows) and max(max(r[3], r[4]) for r in rows) < 1e-12,
              notes=True, kind=MEASURED, setting=(), ref="L15-4.1-same-result",
              why="all-reduce is linear: averaging each micro-batch or only their sum gives one gradient")
    rep.note(f"{args.world_size} ranks, {micro} micro-batches of {MICRO_BATCH} samples per step, {steps} steps, "
             "loss / micro-batches, float64.\nno_sync() only sets a flag that DDP reads in forward: a forward "
             "outside it arms the gradient hooks, so the backward inside still synchronises.\n"
             "All-reduce is linear, so syncing each micro-batch or only the sum gives the same gradient;\n"
             "the last column compares with one process running every rank's micro-batches.")


def first_sentence(message: str | None) -> str:
    return "no error" if not message else message.split(". ")[0].strip() + "."


def show(values: np.ndarray | None) -> str:
    return "None" if values is None else np.array2string(values.reshape(-1)[:3], precision=3)


def part2_unused_parameters(rep: Report, args) -> None:
    layers, steps = args.layers, args.timing_steps
    results = launch(unused_worker, args.world_size, layers, steps, timeout_s=args.timeout_s)
    rep.line("find_unused_parameters=False, branch b unused, then the next forward, on each rank:")
    names = [n for n, _ in Branchy().named_parameters()]
    for rank, res in enumerate(results):
        rep.line(f"  rank {rank}: {first_sentence(res['error'])}")
        indices = re.search(r"did not receive grad for rank \d+: ([\d ]+)", res["error"] or "")
        if indices:
            unused = [names[int(i)] for i in indices.group(1).split()]
            rep.line(f"          parameters without a gradient (from the message): {', '.join(unused)}")
    rep.claim("the next forward raises 'Expected to have finished reduction ...' on every rank",
              all(r["error"] and "Expected to have finished reduction" in r["error"] for r in results),
              notes=True, kind=MEASURED, setting=(), ref="L15-4.2-error",
              why="b's bucket never fills, so the reduction of that iteration is still pending at the next forward")
    rep.line("\nfind_unused_parameters=True, b used on rank 0 only, `never` used nowhere (first 3 entries of .weight.grad):")
    w = args.world_size
    rows = []
    for name in results[0]["ddp"]:
        locals_ = [r["local"][name] for r in results]
        present = [g for g in locals_ if g is not None]
        expected = None if not present else sum(present) / w  # unused ranks contribute zeros
        for rank, res in enumerate(results):
            got = res["ddp"][name]
            match = (got is None) if expected is None else (got is not None and np.allclose(got, expected, atol=1e-7))
            rows.append([name, rank, show(locals_[rank]), show(expected), show(got), match])
    rep.table(["parameter", "rank", "local grad g_r", "expected sum(g_r)/W", "grad after DDP", "match"], rows,
              name="unused")
    b_rows = [r for r in rows if r[0] == "b.weight"]
    rep.claim(f"b (used on rank 0 only) gets g0/{w} on every rank", all(r[5] for r in b_rows), notes=True,
              kind=MEASURED, setting=(), ref="L15-4.2-partial-use",
              why="ranks that did not use b contribute zeros to its all-reduce")
    rep.claim("`never` (unused everywhere) keeps grad None", all(r["ddp"]["never.weight"] is None for r in results),
              notes=True, kind=MEASURED, setting=(), ref="L15-4.2-grad-none",
              why="the global usage bitmap says no rank used it, so DDP leaves .grad alone")
    t_off = statistics.median(t for r in results for t in r["time_default"])
    t_on = statistics.median(t for r in results for t in r["time_find_unused"])

    def spread(key: str) -> str:
        values = [t for r in results for t in r[key]]
        return f"{fmt_time(min(values))} – {fmt_time(max(values))}"

    rep.table(["find_unused_parameters", "median forward+backward", "range (all steps, all ranks)"],
              [["False", fmt_time(t_off), spread("time_default")], ["True", fmt_time(t_on), spread("time_find_unused")]],
              name="cost")
    rep.claim("extra time per iteration with find_unused_parameters=True (all parameters used)",
              (t_on - t_off) * 1e3, unit="ms", kind=MEASURED)
    rep.claim("find_unused_parameters=True is slower even when every parameter is used", t_on > t_off,
              notes=True, kind=MEASURED, setting=("world_size", "layers", "timing_steps", "quick"),
              ref="L15-4.2-find-unused-cost",
              why=f"medians {fmt_time(t_on)} against {fmt_time(t_off)}: a small difference on a loaded 2-core "
                  "machine, where noise can flip it (--quick times a smaller model)")
    rep.note(f"Timing model: {layers} x (Linear(16, 16), Tanh), batch 16, {steps} steps taken in turn with\n"
             "and without the option, medians over ranks. The option costs a walk over the autograd graph\n"
             "after every forward and one more all-reduce (of the 'used' bitmap); the gradients are the same.")
    warned = [rank for rank, r in enumerate(results) if "find_unused_parameters=True" in r["torch_warned"]]
    if warned:
        rep.note(f"PyTorch says so itself: ranks {', '.join(map(str, warned))} printed the warning "
                 "'find_unused_parameters=True was specified in DDP constructor, but did not find any unused "
                 "parameters in the forward pass' (captured from their stderr, shown here instead)")


def part3_buffers(rep: Report, args) -> None:
    results = launch(buffers_worker, args.world_size, timeout_s=args.timeout_s)
    keys = list(results[0])
    rep.table(["rank"] + [f"running_mean, {k}" for k in keys],
              [[rank] + [show(res[k]) for k in keys] for rank, res in enumerate(results)], name="buffers")
    differ = not all(np.array_equal(r["after forward 1"], results[0]["after forward 1"]) for r in results[1:])
    replaced = all(np.array_equal(r["start of forward 2"], results[0]["after forward 1"]) for r in results)
    rep.claim("running_mean differs between ranks after a forward", differ, notes=True, kind=MEASURED,
              setting=(), ref="L15-4.3-buffers-differ", why="each rank updates BatchNorm with its own data")
    rep.claim("at the next forward every rank's running_mean is rank 0's", replaced, notes=True, kind=MEASURED,
              setting=(), ref="L15-4.3-rank0-wins", why="broadcast_buffers: rank 0's buffers at the start of forward")
    rep.note("Rank r's data is centred at 10 r, BatchNorm momentum 0.1. DDP broadcasts rank 0's buffers at\n"
             "the start of each forward (broadcast_buffers / forward_sync_buffers); in between they differ,\n"
             "and the statistics kept are rank 0's alone. SyncBatchNorm computes them across ranks.")


def main() -> None:
    parser = make_parser(__doc__, world_size=2, steps=3, micro_batches=4, layers=64, timing_steps=30, real=True, cost=COST,
                         quick={"steps": 2, "layers": 4, "timing_steps": 5},
                         context={"steps": "Part 1's optimiser steps", "micro_batches": "Part 1",
                                  "layers": "Part 2's timing model", "timing_steps": "Part 2"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError(f"--world-size {args.world_size}: these parts compare ranks, use at least 2")
    preload_for_ddp(args.world_size)  # DDP() imports torch._dynamo: see there
    rep = Report(__file__, "no_sync, unused parameters and buffers in real DDP", args)
    rep.part(1, "no_sync and gradient accumulation")  # where no_sync must go, counted by a comm hook
    part1_no_sync(rep, args)
    rep.part(2, "unused parameters")  # the default's error, find_unused_parameters' grads and cost
    part2_unused_parameters(rep, args)
    rep.part(3, "buffers: rank 0's BatchNorm statistics win")  # broadcast at the start of each forward
    part3_buffers(rep, args)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
