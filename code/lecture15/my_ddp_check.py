"""Handbook "数据并行与 DDP": the from-scratch MyDDP (lecture15/my_ddp.py) checked on real ranks.

    python code/lecture15/my_ddp_check.py [--world-size 2] [--bucket-cap-mb 64KiB] [--quick]

The handbook's ddp_check.py, extended: its buckets (Part 1), 3 steps equal to single-process
training and to PyTorch DDP (Part 2), the no_sync exercise (Part 3), launch order when gradients
arrive out of order (Part 4, lecture 15 §2.3), MyDDP's step time against PyTorch DDP's (Part 5),
the handbook's 7B question on the α-β model (Part 6), MyDDP's limits against DDP's (Part 7) and
the handbook's practical details (Part 8: comm hooks, bucket views, scaling, DistributedSampler;
Parts 6 and 8 live in lecture15/handbook_details.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import statistics
from typing import Any

import torch

from common.budget import Cost, Term
from common.cli import UsageError, make_parser, run_main
from common.launcher import launch, preload_for_ddp
from common.output import EXACT, MEASURED, Report, fmt_bytes
from lecture15.ddp_sim import MiB
from lecture15.handbook_details import check_and_details_rank, part6_question, part8_details

# handbook_model and timing_rank: bench/bench_my_ddp.py imports them from here
from lecture15.my_ddp_ranks import (  # noqa: F401
    FORWARD_KINDS,
    NO_SYNC_PLACEMENTS,
    handbook_model,
    timing_rank,
)

MATCH_TOL = 1e-6                # the handbook's "equal" in float32
HANDBOOK_LINE = "{} 个 rank，{} 个梯度桶，每步在反向过程中发起 {} 次 all-reduce"   # its print format
TARGET_RATIO = 1.2              # MyDDP's step may be at most this much slower than PyTorch DDP's



# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up, then every part in one launch: the
# handbook's model trained and timed under MyDDP and PyTorch DDP on W ranks sharing 2 cores. Memory:
# the global batch (64 float32 features) a few times in every process.
COST = Cost([Term("1", 7.8, lambda a: 1), Term("W²", 0.1, lambda a: a.world_size**2),
             Term("W·repeats", 0.0093, lambda a: a.world_size * a.repeats),
             Term("W·steps", 0.043, lambda a: a.world_size * a.steps), Term("B", 0.0049, lambda a: a.batch)],
            memory=lambda a: (a.world_size + 1) * 4 * 64 * 4 * a.batch)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# ---- the parent prints -----------------------------------------------------------------------------
def slowest_steps(timings: list[dict[str, list[float]]], name: str) -> list[float]:
    """Each repeat's step as the slowest rank saw it (a step ends when its last rank does);
    `timings` holds timing_rank's result for every rank."""
    return [max(ts) for ts in zip(*(t[name] for t in timings))]


def median_step(timings: list[dict[str, list[float]]], name: str) -> float:
    """Median over repeats of the slowest rank's step (bench/bench_my_ddp.py uses it)."""
    return statistics.median(slowest_steps(timings, name))


def spread_ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1e3:.2f} ({min(times) * 1e3:.2f}–{max(times) * 1e3:.2f})"


def part1_buckets(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(1, "buckets of the handbook's model")
    train = ranks[0]["train"]
    rows = [[i, ", ".join(names), size] for i, (names, size) in enumerate(train["buckets"])]
    rep.table(["bucket", "parameters (gradient-ready order)", "bytes"], rows, name="buckets")
    rep.note(f"cap {fmt_bytes(args.bucket_cap_bytes, binary=True)}; reverse registration order, a bucket is "
             "sealed after the tensor that brings it to >= the cap (PyTorch's rule)")
    rep.claim(f"gradient buckets at {fmt_bytes(args.bucket_cap_bytes, binary=True)}", len(rows), notes=2, kind=EXACT,
              setting=("bucket_cap_bytes",), ref="HB-check-buckets",
              why=f"reverse registration order, each sealed once >= the cap: bucket bytes {[r[2] for r in rows]}")
    tensors = sum(len(names) for names, _ in train["buckets"])
    rep.claim(f"bucketing cuts all-reduces per step below one per tensor ({tensors} tensors)",
              train["launches_per_step"] < tensors, notes=True, kind=EXACT, setting=("bucket_cap_bytes",),
              ref="HB-buckets-fewer-messages",
              why=f"{train['launches_per_step']:g} bucket all-reduces per step against {tensors} "
                  "per-tensor ones (a cap so small that every tensor is its own bucket gives no saving)")
    cap, first = train["ddp_default_cap"], train["ddp_first_cap"]
    rep.claim("PyTorch DDP's default bucket cap (bucket_cap_mb=None)", cap / 1e6, notes=25, unit="MB", kind=EXACT,
              places=0, setting=(), ref="HB-default-bucket-25MB", erratum=True,
              why=f"DDP's default is {cap:,} bytes = {cap / MiB:g} MiB = {cap / 1e6:.1f} MB (bucket_cap_mb "
                  f"counts MiB), and its first bucket is capped at {first / MiB:g} MiB; read from "
                  "DistributedDataParallel.bucket_bytes_cap and dist._DEFAULT_FIRST_BUCKET_BYTES")


def part2_train(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(2, f"{args.steps} steps: MyDDP = single process = PyTorch DDP (ddp_check.py)")
    train = ranks[0]["train"]
    buckets, per_step = len(train["buckets"]), train["launches_per_step"]
    launches = f"{per_step:g} all-reduce{'' if per_step == 1 else 's'}"
    rep.line(f"  {plural(args.world_size, 'rank')}, {plural(buckets, 'gradient bucket')}, {launches} launched "
             "during each backward")
    rep.claim("the handbook's summary line, from our numbers",
              HANDBOOK_LINE.format(args.world_size, buckets, f"{per_step:g}"),
              notes=HANDBOOK_LINE.format(2, 2, 2), kind=EXACT, setting=("world_size", "bucket_cap_bytes"),
              ref="HB-check-summary-line",
              why="counted: ranks in the group, MyDDP's buckets, its all-reduce launches per step")
    rows = [["MyDDP vs single process (whole batch)", max(r["train"]["mine_vs_ref"] for r in ranks)],
            ["PyTorch DDP vs single process", max(r["train"]["official_vs_ref"] for r in ranks)],
            ["MyDDP vs PyTorch DDP", max(r["train"]["mine_vs_official"] for r in ranks)],
            ["MyDDP, any rank vs rank 0", max(r["train"]["ranks_diff"] for r in ranks)]]
    rep.table([f"after {args.steps} SGD steps (float32)", "max |Δparam|"], rows, name="diffs")
    # Correctness checks: they hold for any flags, so they compare with the handbook's True always.
    rep.claim(f"MyDDP equals single-process training (max diff < {MATCH_TOL:g})", rows[0][1] < MATCH_TOL,
              notes=True, kind=EXACT, setting=(), ref="HB-ddp-equals-single-process",
              why=f"max |Δparam| {rows[0][1]:.3g} after {args.steps} steps, every rank")
    rep.claim(f"PyTorch DDP equals single-process training (max diff < {MATCH_TOL:g})", rows[1][1] < MATCH_TOL,
              notes=True, kind=EXACT, setting=(), ref="HB-official-equals-single-process",
              why=f"max |Δparam| {rows[1][1]:.3g} after {args.steps} steps, every rank")
    rep.claim("replicas stay bit-identical (rank 0's start, the same averaged gradient)", rows[3][1] == 0.0,
              notes=True, kind=EXACT, setting=(), ref="HB-replicas-identical",
              why=f"max |Δparam| between any rank and rank 0: {rows[3][1]:g}")
    rep.note(f"PyTorch DDP with its defaults (25 MiB cap, first bucket 1 MiB) launched "
             f"{train['official_per_step']} all-reduces in its steps (its step 1 always uses a single bucket)")
    if args.batch % args.world_size:
        rep.note(f"{args.batch} samples on {args.world_size} ranks: unequal shards, so each rank's loss is "
                 "its summed loss × W / batch, not its mean (the mean would weight samples unequally)")


def hook_sees_accumulated_grad() -> bool:
    """register_post_accumulate_grad_hook runs once the gradient is in .grad, accumulation included."""
    p, seen = torch.nn.Parameter(torch.ones(3)), []
    p.register_post_accumulate_grad_hook(lambda q: seen.append(q.grad.clone()))
    for _ in range(2):
        (2 * p).sum().backward()
    return torch.equal(seen[0], torch.full((3,), 2.0)) and torch.equal(seen[1], torch.full((3,), 4.0))


def part3_no_sync(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(3, "exercise: gradient accumulation with no_sync")
    acc, plain = ranks[0]["no_sync"], ranks[0]["train"]
    rows = [["MyDDP, 2 micro-batches, first under no_sync", max(r["no_sync"]["mine_vs_ref"] for r in ranks)],
            ["PyTorch DDP, the same", max(r["no_sync"]["official_vs_ref"] for r in ranks)]]
    rep.table([f"vs one full batch, after {args.steps} steps", "max |Δparam|"], rows, name="no_sync")
    rep.claim(f"accumulating 2 half-batches equals 1 full batch (max diff < {MATCH_TOL:g})",
              rows[0][1] < MATCH_TOL, notes=True, kind=EXACT, setting=(), ref="HB-no-sync-equals-full-batch",
              why=f"max |Δparam| {rows[0][1]:.3g}; each micro-batch's loss is its share of the global mean")
    synced_both = 2 * len(acc["buckets"])
    rep.line(f"  all-reduces per step: MyDDP {acc['launches_per_step']:g} with no_sync "
             f"({synced_both} if both micro-batches synchronised); PyTorch DDP {acc['official_per_step']}")
    rep.claim("communication per step with no_sync, as a share of syncing every micro-batch",
              acc["launches_per_step"] / synced_both, notes=0.5, kind=EXACT, setting=(), ref="HB-no-sync-comm-share",
              why=f"{acc['launches_per_step']:g} of {synced_both} bucket all-reduces: 1 / (2 micro-batches)")
    rep.claim("PyTorch DDP launches no all-reduce in a backward under no_sync",
              acc["official_per_step"] == plain["official_per_step"], notes=True, kind=EXACT, setting=(),
              ref="HB-no-sync-ddp-skips",
              why=f"its all-reduces per step with a no_sync micro-batch {acc['official_per_step']}, "
                  f"without {plain['official_per_step']} (counted by a comm hook)")
    rep.claim("the post-accumulate-grad hook sees .grad after accumulation", hook_sees_accumulated_grad(),
              notes=True, kind=EXACT, setting=(), ref="HB-hook-after-accumulation",
              why="two backwards of 2·p: the hook saw .grad = 2, then 4")
    rep.note("each micro-batch's loss is its share of the global mean (summed loss × W / batch): for "
             "equal halves that is the handbook's 'divide each micro-step's loss by the step count'")
    placement = ranks[0]["placement"]
    rows = [[where, *("synchronises" if placement[k][i] else "local only" for k in ("MyDDP", "PyTorch DDP"))]
            for i, where in enumerate(NO_SYNC_PLACEMENTS)]
    rep.table(["inside `with no_sync():`", "MyDDP", "PyTorch DDP"], rows, name="no_sync_placement")
    same = placement["MyDDP"] == placement["PyTorch DDP"]
    rep.claim("MyDDP's no_sync acts where PyTorch DDP's does", same, kind=EXACT, setting=(),
              why="both read the flag in the forward")
    rep.note("why MyDDP reads the no_sync flag in forward(), not in the gradient hook as the handbook's hint "
             "has it: that is DDP's contract (the table). A flag read in the hook would synchronise the "
             "'forward only' step and skip the 'backward only' one, the opposite of DDP, so a loop written "
             "for DDP that calls backward after the block would silently sync every micro-step. DDP decides "
             "in the forward because that is where it prepares its buckets for the backward.")


def part4_order(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(4, "launch order when gradients arrive out of order (lecture 15 §2.3)")
    order = ranks[0]["order"]
    ready, launched = order["stack_ready"], order["stack_launch"]
    position = {b: i + 1 for i, b in enumerate(ready)}   # the k-th bucket to become complete
    rows = [[b, ", ".join(order["stack_buckets"][b]), position[b],
             max(position[c] for c in range(b + 1)), position[b]] for b in range(len(ready))]
    rep.line("  (a) ReversedStack: 4 Linear(32, 32) registered in the reverse of their use, one per bucket")
    rep.table(["bucket", "parameters", "complete as #", "launched at # (index order)",
               "naive launch at #"], rows, name="reversed_registration")
    rep.line(f"  recorded: ready order {ready}, launch order {launched}")
    rep.note("bucket 0 holds the first layer used, so it is complete last and every launch waits for it: "
             "no overlap at all (lecture 15 §3, bucket order). PyTorch rebuilds its buckets in the "
             "observed order after step 1; MyDDP, like PyTorch 1.5, keeps the construction-time buckets")
    rep.line("  (b) RankOrderedBranches: even ranks finish bucket 0 first, odd ranks bucket 1")
    rows = []
    for kind, label in (("index", "bucket-index order (MyDDP)"), ("naive", "ready order (handbook, WRONG)")):
        launches = " | ".join(f"r{r}: {ranks[r]['order'][kind]['launch']}" for r in range(len(ranks)))
        rows.append([label, launches, max(r["order"][kind]["grad_vs_ref"] for r in ranks)])
    rep.table(["launch rule", "launch order per rank", "max |Δgrad| vs 1 process"], rows, name="rank_order")
    naive_orders = {tuple(r["order"]["naive"]["launch"]) for r in ranks}
    if len(naive_orders) > 1:
        rep.note("ready order pairs rank 0's bucket 0 with rank 1's bucket 1: same size, so gloo sums "
                 "unrelated gradients without any error (lecture 15 §2.3, exercise 6)")
    else:
        rep.note("every rank completed its buckets in the same order, so ready order could not mismatch "
                 "here (with one rank it never can: try --world-size 2)")
    rep.record("rank_order", {k: [r["order"][k] for r in ranks] for k in ("index", "naive")})


def part5_timing(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]], repeats: int) -> None:
    rep.part(5, "step time: MyDDP vs PyTorch DDP")
    timings = [r["timing"] for r in ranks]
    mine, official = slowest_steps(timings, "MyDDP"), slowest_steps(timings, "PyTorch DDP")
    rep.table(["slowest rank's step", "median (min–max), ms"], [["MyDDP", spread_ms(mine)],
                                                                 ["PyTorch DDP", spread_ms(official)]], name="timing")
    ratio = statistics.median(mine) / statistics.median(official)
    paired = [a / b for a, b in zip(mine, official)]   # the two ran back to back in each repeat
    rep.claim("MyDDP step / PyTorch DDP step (ratio of medians)", ratio, unit="×", kind=MEASURED)
    rep.line(f"  per-repeat ratios {min(paired):.2f}–{max(paired):.2f}×; target <= {TARGET_RATIO:g}×: "
             f"{'met' if ratio <= TARGET_RATIO else 'NOT met'} ({repeats} interleaved repeats, same buckets, "
             f"{plural(args.world_size, 'rank')})")
    rep.record("steps_s", {"MyDDP": mine, "PyTorch DDP": official})


def part7_limits(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(7, "MyDDP's limits: buffers and sparse gradients, against PyTorch DDP")
    if len(ranks) < 2:
        rep.line("  one rank: a broadcast cannot change a buffer, so this part needs --world-size 2 or more")
    else:
        seen = ranks[1]["buffers"]   # rank 1's buffer is rank 0's after a forward that broadcast
        rows = [[i + 1, what, *("broadcast" if seen[k][i] else "-" for k in ("MyDDP", "PyTorch DDP"))]
                for i, what in enumerate(FORWARD_KINDS)]
        rep.table(["forward", "kind", "MyDDP", "PyTorch DDP"], rows, name="buffer_sync")
        rep.claim("MyDDP broadcasts buffers before the same forwards as PyTorch DDP",
                  seen["MyDDP"] == seen["PyTorch DDP"], kind=EXACT, setting=(),
                  why="DDP (torch 2.13) syncs in _pre_forward when the previous forward could synchronise "
                      "gradients (grad enabled, not under no_sync); MyDDP copies that rule")
        rep.note("DDP syncs buffers at the first forward and after every forward whose backward "
                 "synchronises: so in an accumulation window only at its first forward, in a no_grad "
                 "evaluation loop only at its first forward and not at the next training one; eval() "
                 "mode by itself changes nothing")
    rep.line(f"  sparse gradients: {ranks[0]['buffers']['sparse']}")


def main() -> None:
    parser = make_parser(__doc__, world_size=2, bucket_cap_mb="64KiB", batch=32, steps=3, repeats=50, real=True, cost=COST,
                         quick={"repeats": 10},  # only Part 5's timing shortens
                         context={"bucket_cap_mb": "MyDDP's and DDP's; default: the handbook's 64 KiB",
                                  "steps": "SGD steps compared", "repeats": "timed steps per wrapper, Part 5"})
    args = parser.parse_args()
    if args.batch < 2 * args.world_size:
        raise UsageError(f"--batch {args.batch} is too small for {args.world_size} ranks: each rank "
                         "needs 2 samples (Part 3 splits its share into two micro-batches)")
    repeats = args.repeats
    rep = Report(__file__, "from-scratch DDP (handbook) on real ranks", args)
    cfg = {"batch": args.batch, "steps": args.steps, "bucket_bytes": args.bucket_cap_bytes,
           "repeats": repeats, "warmup": 3 if args.quick else 10}
    # The ranks do every part's work in one launch (start-up paid once) and return plain data.
    preload_for_ddp(args.world_size)  # PyTorch DDP() imports torch._dynamo: see there
    ranks = launch(check_and_details_rank, args.world_size, cfg, backend="auto", timeout_s=args.timeout_s)
    part1_buckets(rep, args, ranks)     # our rule on the handbook's model: how many buckets
    part2_train(rep, args, ranks)       # ddp_check.py: MyDDP = one process = PyTorch DDP
    part3_no_sync(rep, args, ranks)     # the exercise: 2 half-batches under no_sync = 1 full batch
    part4_order(rep, args, ranks)       # lecture 15 §2.3: launches in bucket-index order
    part5_timing(rep, args, ranks, repeats)   # MyDDP's step against PyTorch DDP's, with its spread
    part6_question(rep)                 # the handbook's 7B question, on the α-β model
    part7_limits(rep, args, ranks)      # buffers and sparse gradients: what MyDDP does, and DDP
    part8_details(rep, args, ranks)     # the handbook's details: comm hooks, bucket views, scaling, sampler
    rep.finish()


if __name__ == "__main__":
    run_main(main)
