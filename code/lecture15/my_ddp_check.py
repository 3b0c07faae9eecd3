"""Handbook "数据并行与 DDP" (从零实现, ddp_check.py, 练习): the from-scratch MyDDP checked on real ranks.

    python code/lecture15/my_ddp_check.py [--world-size 2] [--bucket-cap-mb 64KiB] [--quick]

The handbook's ddp_check.py, extended, on lecture15/my_ddp.py: its buckets (Part 1), 3 steps equal to
one process and to PyTorch DDP (Part 2), the no_sync exercise (Part 3), MyDDP's step time against
PyTorch DDP's (Part 4). Where MyDDP follows DDP's rules (no_sync's placement, launch order, buffers):
my_ddp_vs_ddp.py; the chapter's practical details and its 7B question: handbook_details.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import re
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common.cli import make_parser
from common.error_types import UsageError
from common.launch import launch, preload_for_ddp, rank_device
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import MiB, fmt_bytes
from lecture15.handbook_model import (
    global_batch,
    handbook_model,
    max_diff,
    recording_allreduce,
    shard,
    share_of_loss,
)
from lecture15.my_ddp import MyDDP
from lecture15.timings import slowest_rank, spread_ms

# Parts 2 and 3 train twice: in float32, the handbook's ddp_check.py as written (its rows: buckets,
# launches, max |Δparam| < 1e-6), and in float64 for our self-checks, which judge the trained weights
# against how far they moved (Report.check_trained): there a right engine is off by round-off, ~1e-17,
# where float32's round-off alone (7e-9 here) is a share of the movement no check could tell from a
# wrong engine's.
HANDBOOK_DTYPE, CHECK_DTYPE = torch.float32, torch.float64
TARGET_RATIO = 1.2      # MyDDP's step may be this much slower than DDP's at most (bench/bench_my_ddp.py too)

# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up, then every part in one launch: the
# handbook's model trained and timed under MyDDP and PyTorch DDP on W ranks sharing 2 cores (W·steps
# doubled by hand for the float64 runs of the checks: refit it there). Memory: the global batch (64
# float32 features) a few times in every process.
COST = Cost([Term("1", 7.8, lambda a: 1), Term("W²", 0.1, lambda a: a.world_size**2),
             Term("W·repeats", 0.0093, lambda a: a.world_size * a.repeats),
             Term("W·steps", 0.086, lambda a: a.world_size * a.steps), Term("B", 0.0049, lambda a: a.batch)],
            memory=lambda a: (a.world_size + 1) * 4 * 64 * 4 * a.batch)


# ---- Parts 1 to 3: the handbook's check and its exercise, three trainers side by side -------------
def train_rank(rank: int, world: int, cfg: dict[str, Any], accumulate: bool,
               dtype: torch.dtype) -> dict[str, Any]:
    """`steps` SGD steps: one process on the whole batch, MyDDP and PyTorch DDP on this rank's shard;
    with `accumulate`, the shard as two micro-batches, the first under no_sync (the exercise)."""
    n, steps, dev = cfg["batch"], cfg["steps"], rank_device()
    X, Y = global_batch(n)
    X, Y = X.to(dev, dtype), Y.to(dev)
    x, y = X[shard(n, rank, world)], Y[shard(n, rank, world)]

    def model() -> torch.nn.Module:
        return handbook_model().to(dev, dtype)

    ref, mine = model(), MyDDP(model(), bucket_bytes=cfg["bucket_bytes"])
    start = [p.detach().clone() for p in ref.parameters()]
    official, seen = DistributedDataParallel(model()), []
    # Through a lambda: DDP rejects the string annotations that `from __future__` makes of ours.
    official.register_comm_hook(seen, lambda state, bucket: recording_allreduce(state, bucket))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, mine, official)]
    official_per_step = []
    for _ in range(steps):
        for opt in opts:
            opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(X), Y).backward()          # one process, whole batch
        before = len(seen)
        for model in (mine, official):
            if accumulate:
                first, second = shard(len(x), 0, 2), shard(len(x), 1, 2)
                with model.no_sync():   # forward AND backward inside: gradients stay local
                    share_of_loss(model, x[first], y[first], n, world).backward()
                share_of_loss(model, x[second], y[second], n, world).backward()   # syncs the sum
            else:
                share_of_loss(model, x, y, n, world).backward()   # averaged when backward returns
        official_per_step.append(len(seen) - before)
        for opt in opts:
            opt.step()
    flat = torch.cat([p.detach().flatten() for p in mine.parameters()])
    rank0 = flat.clone()
    dist.broadcast(rank0, src=0)
    out = {"mine_vs_ref": max_diff(ref, mine.module), "official_vs_ref": max_diff(ref, official.module),
           "mine_vs_official": max_diff(mine.module, official.module),
           "moved": max((p.detach() - p0).abs().max().item() for p, p0 in zip(ref.parameters(), start)),
           "ranks_diff": (flat - rank0).abs().max().item(),
           "launches_per_step": mine.allreduces_launched / steps, "official_per_step": official_per_step,
           "buckets": [(b.names, b.flat.numel() * b.flat.element_size()) for b in mine.buckets],
           "ddp_default_cap": official.bucket_bytes_cap, "ddp_first_cap": dist._DEFAULT_FIRST_BUCKET_BYTES}
    del official, mine   # DDP objects gone before the group is (teardown aborts otherwise)
    return out


def hook_sees_accumulated_grad() -> bool:
    """register_post_accumulate_grad_hook runs once the gradient is in .grad, accumulation included."""
    p, seen = torch.nn.Parameter(torch.ones(3)), []
    p.register_post_accumulate_grad_hook(lambda q: seen.append(q.grad.clone()))
    for _ in range(2):
        (2 * p).sum().backward()
    return torch.equal(seen[0], torch.full((3,), 2.0)) and torch.equal(seen[1], torch.full((3,), 4.0))


def part1_buckets(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    train = ranks[0]["train"]
    rows = [[i, ", ".join(names), size] for i, (names, size) in enumerate(train["buckets"])]
    rep.table(["bucket", "parameters (gradient-ready order)", "bytes"], rows, name="buckets")
    rep.note(f"cap {fmt_bytes(args.bucket_cap_bytes, binary=True)}; reverse registration order, a bucket is "
             "sealed after the tensor that brings it to >= the cap (PyTorch's rule)")
    cap = train["ddp_default_cap"]
    tensors = sum(len(names) for names, _ in train["buckets"])
    per_step = train["launches_per_step"]
    rep.value("check_buckets", len(rows))
    rep.value("bucket_bytes", str([r[2] for r in rows]))
    rep.value("tensors", tensors)
    rep.value("fewer_messages", per_step < tensors)
    rep.value("launches_per_step", per_step)
    rep.value("ddp_default_cap_mb", cap / 1e6)
    rep.value("ddp_default_cap_bytes", cap)
    rep.value("ddp_default_cap_mib", cap / MiB)
    rep.value("ddp_first_cap_mib", train["ddp_first_cap"] / MiB)


def part2_train(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    train = ranks[0]["train"]
    buckets, per_step = len(train["buckets"]), train["launches_per_step"]
    ours = iter([args.world_size, buckets, f"{per_step:g}"])   # the handbook's summary line, our numbers
    handbooks = rep.notes_text("HB-check-summary-line")
    rep.value("summary_line", re.sub(r"\d+", lambda _: str(next(ours)), handbooks))
    rep.compare_with_notes()   # a table of its own: two long lines side by side
    for who, key in (("MyDDP", "mine_vs_ref"), ("PyTorch DDP", "official_vs_ref")):   # float64
        rep.check_trained(f"{who}, {args.steps} steps on {args.world_size} ranks,",
                          max(r["train64"][key] for r in ranks), ranks[0]["train64"]["moved"])
    gaps = {key: max(r["train"][key] for r in ranks) for key in ("mine_vs_ref", "official_vs_ref",
                                                                  "mine_vs_official", "ranks_diff")}
    uneven = (f" {args.batch} samples on {args.world_size} ranks: unequal shards, so each rank's loss is its "
              "summed loss × W / batch, not its mean." if args.batch % args.world_size else "")
    # MyDDP against PyTorch DDP is no check of its own: it is within 2 × MOVED_SHARE of the movement
    # whenever both checks above pass.
    rep.note(f"checks in float64; the handbook's float32 run below: max |Δparam| over every rank, MyDDP "
             f"against PyTorch DDP {gaps['mine_vs_official']:g}, MyDDP's replicas against rank 0's "
             f"{gaps['ranks_diff']:g}. PyTorch DDP with its defaults launched {train['official_per_step']} "
             f"all-reduces in its steps (its step 1 always uses a single bucket).{uneven}")
    rep.value("mine_vs_ref", gaps["mine_vs_ref"])
    rep.value("official_vs_ref", gaps["official_vs_ref"])
    rep.value("replicas_identical", gaps["ranks_diff"] == 0.0)
    rep.value("replicas_diff", gaps["ranks_diff"])


def part3_no_sync(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    acc, plain = ranks[0]["no_sync"], ranks[0]["train"]
    for who, key in (("MyDDP", "mine_vs_ref"), ("PyTorch DDP", "official_vs_ref")):   # float64
        rep.check_trained(f"{who}'s no_sync accumulation, {args.steps} steps,",
                          max(r["no_sync64"][key] for r in ranks), ranks[0]["no_sync64"]["moved"])
    gap = max(r["no_sync"]["mine_vs_ref"] for r in ranks)   # the handbook's float32 run
    synced_both = 2 * len(acc["buckets"])
    rep.line(f"  all-reduces per step: MyDDP {acc['launches_per_step']:g} with no_sync ({synced_both} if "
             f"both micro-batches synced); PyTorch DDP {' '.join(map(str, acc['official_per_step']))}")
    rep.note("each micro-batch's loss is its share of the global mean (summed loss × W / batch): for equal "
             "halves, the handbook's 'divide each micro-step's loss by the step count'. Where the block must "
             "sit (the forward inside it): my_ddp_vs_ddp.py Part 1.")
    rep.value("no_sync_gap", gap)
    rep.value("synced_both", synced_both)
    rep.value("no_sync_comm_share", acc["launches_per_step"] / synced_both)
    rep.value("no_sync_launches", acc["launches_per_step"])
    rep.value("ddp_skips", acc["official_per_step"] == plain["official_per_step"])
    rep.value("ddp_per_step_no_sync", str(acc["official_per_step"]))
    rep.value("ddp_per_step", str(plain["official_per_step"]))
    rep.value("hook_after_accumulation", hook_sees_accumulated_grad())


# ---- Part 4: step time ----------------------------------------------------------------------------
def timing_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, list[float]]:
    dev = rank_device()
    X, Y = (t.to(dev) for t in global_batch(cfg["batch"]))
    x, y = X[shard(len(X), rank, world)], Y[shard(len(X), rank, world)]
    # Same buckets for both: PyTorch's bucket_cap_mb is MiB, and an explicit cap also caps bucket 0.
    hidden = cfg.get("hidden", 256)   # bench/bench_my_ddp.py also times a wider model
    models = {"MyDDP": MyDDP(handbook_model(hidden).to(dev), bucket_bytes=cfg["bucket_bytes"]),
              "PyTorch DDP": DistributedDataParallel(handbook_model(hidden).to(dev),
                                                     bucket_cap_mb=cfg["bucket_bytes"] / 2**20)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    for repeat in range(cfg["warmup"] + cfg["repeats"]):
        # Interleaved, and the order swapped every repeat: drift and "who goes second" hit both alike.
        for name in list(models)[::1 if repeat % 2 else -1]:
            model = models[name]
            dist.barrier()
            start = time.perf_counter()
            opts[name].zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opts[name].step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)   # the clock must see the kernels, not their launches
            if repeat >= cfg["warmup"]:
                times[name].append(time.perf_counter() - start)
    del models
    return times


def median_step(timings: list[dict[str, list[float]]], name: str) -> float:
    """Median over repeats of the slowest rank's step (bench/bench_my_ddp.py uses it)."""
    return statistics.median(slowest_rank([t[name] for t in timings]))


def part4_timing(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    mine, official = (slowest_rank([r["timing"][name] for r in ranks]) for name in ("MyDDP", "PyTorch DDP"))
    rep.table(["slowest rank's step", "median (min–max), ms"],
              [["MyDDP", spread_ms(mine)], ["PyTorch DDP", spread_ms(official)]], name="timing")
    ratio = statistics.median(mine) / statistics.median(official)
    paired = [a / b for a, b in zip(mine, official)]   # the two ran back to back in each repeat
    rep.line(f"  per-repeat ratios {min(paired):.2f}–{max(paired):.2f}×; target <= {TARGET_RATIO:g}×: "
             f"{'met' if ratio <= TARGET_RATIO else 'NOT met'} ({args.repeats} interleaved repeats, the same "
             "buckets)")
    rep.value("myddp_over_ddp", ratio)
    rep.value("steps_s", {"MyDDP": mine, "PyTorch DDP": official}, compared=False)


def check_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Every part's rank work in one launch (start-up paid once); plain data back to the parent."""
    runs = {f"{name}{suffix}": train_rank(rank, world, cfg, accumulate, dtype)
            for suffix, dtype in (("", HANDBOOK_DTYPE), ("64", CHECK_DTYPE))
            for name, accumulate in (("train", False), ("no_sync", True))}
    return {**runs, "timing": timing_rank(rank, world, cfg)}


def main() -> None:
    parser = make_parser(__doc__, world_size=2, bucket_cap_mb="64KiB", batch=32, steps=3, repeats=50,
                         real=True, cost=COST, quick={"repeats": 10},  # only Part 4's timing shortens
                         context={"bucket_cap_mb": "MyDDP's and DDP's; default: the handbook's 64 KiB",
                                  "steps": "SGD steps compared",
                                  "repeats": "timed steps per wrapper, Part 4"})
    args = parser.parse_args()
    if args.batch < 2 * args.world_size:
        raise UsageError(f"--batch {args.batch} is too small for {args.world_size} ranks: each rank "
                         "needs 2 samples (Part 3 splits its share into two micro-batches)")
    rep = Report(__file__, "from-scratch DDP (handbook) on real ranks", args)
    cfg = {"batch": args.batch, "steps": args.steps, "bucket_bytes": args.bucket_cap_bytes,
           "repeats": args.repeats, "warmup": 3 if args.quick else 10}
    preload_for_ddp(args.world_size)  # PyTorch DDP() imports torch._dynamo: see there
    ranks = launch(check_rank, args.world_size, cfg, backend="auto", timeout_s=args.timeout_s)
    args.world_size = len(ranks)      # under torchrun the group's size wins over the flag
    rep.part(1, "buckets of the handbook's model")   # PyTorch's rule on the handbook's model
    part1_buckets(rep, args, ranks)
    rep.part(2, f"{args.steps} steps: MyDDP = one process = PyTorch DDP (ddp_check.py)")
    part2_train(rep, args, ranks)
    rep.part(3, "exercise: gradient accumulation with no_sync")   # 2 half-batches under no_sync = a full one
    part3_no_sync(rep, args, ranks)
    rep.part(4, "step time: MyDDP vs PyTorch DDP")   # with its spread, the same buckets
    part4_timing(rep, args, ranks)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
