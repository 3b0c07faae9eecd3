"""Handbook "数据并行与 DDP": the from-scratch MyDDP (lecture15/my_ddp.py) checked on real ranks.

    python code/lecture15/my_ddp_check.py [--world-size 2] [--bucket-size 64KiB] [--quick]

The handbook's ddp_check.py, extended: its buckets (Part 1), 3 steps equal to single-process
training and to PyTorch DDP (Part 2), the no_sync exercise (Part 3), launch order when gradients
arrive out of order (Part 4, lecture 15 §2.3) and MyDDP's step time against PyTorch DDP's (Part 5).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common.cli import UsageError, make_parser, run_main
from common.launcher import launch, preload_for_ddp, rank_device
from common.output import EXACT, MEASURED, Report, fmt_bytes
from lecture15.my_ddp import MyDDP

MATCH_TOL = 1e-6                # the handbook's "equal" in float32
HANDBOOK_LINE = "{} 个 rank，{} 个梯度桶，每步在反向过程中发起 {} 次 all-reduce"   # its print format
TARGET_RATIO = 1.2              # MyDDP's step may be at most this much slower than PyTorch DDP's


# ---- models and data (built the same way on every rank) ------------------------------------------
def handbook_model(hidden: int = 256) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.GELU(), torch.nn.Linear(hidden, 10))


class ReversedStack(torch.nn.Module):
    """Layers registered in the reverse of their use: bucket 0 (first layer used) is ready last."""

    def __init__(self, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in reversed(self.layers):
            x = torch.tanh(layer(x))
        return x


class RankOrderedBranches(torch.nn.Module):
    """Two equal branches; odd ranks run them in the other order, so their gradients come in the
    other order too (autograd runs the most recently created node first)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(width, width), torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if dist.get_rank() % 2 == 0:
            ya, yb = self.a(x), self.b(x)
        else:
            yb, ya = self.b(x), self.a(x)
        return torch.tanh(ya) * yb


def global_batch(n: int, features: int = 64, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(123)
    return torch.randn(n, features), torch.randint(0, classes, (n,))


def shard(n: int, part: int, parts: int) -> slice:
    return slice(part * n // parts, (part + 1) * n // parts)   # sizes differ by one when W ∤ n


def share_of_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, n_global: int, world: int) -> torch.Tensor:
    """This shard's part of the global mean loss, scaled by W because DDP divides the sum by W.
    Equals the local mean when shards are equal; stays exact when they are not (W ∤ batch)."""
    return torch.nn.functional.cross_entropy(model(x), y, reduction="sum") * world / n_global


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def diff_from_rank0(module: torch.nn.Module) -> float:
    flat = torch.cat([p.detach().flatten() for p in module.parameters()])
    theirs = flat.clone()
    dist.broadcast(theirs, src=0)
    return (flat - theirs).abs().max().item()


# ---- what each rank runs (one launch for all parts; ranks return data, the parent prints) --------
def check_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    return {"train": train_rank(rank, world, cfg, accumulate=False),
            "no_sync": train_rank(rank, world, cfg, accumulate=True),
            "order": order_rank(rank, world, cfg), "timing": timing_rank(rank, world, cfg)}


def train_rank(rank: int, world: int, cfg: dict[str, Any], accumulate: bool) -> dict[str, Any]:
    """`steps` SGD steps: one process on the whole batch, MyDDP and PyTorch DDP on this rank's shard;
    with `accumulate`, the shard as two micro-batches, the first under no_sync (the exercise)."""
    n, steps, dev = cfg["batch"], cfg["steps"], rank_device()
    X, Y = (t.to(dev) for t in global_batch(n))
    x, y = X[shard(n, rank, world)], Y[shard(n, rank, world)]
    ref, mine = handbook_model().to(dev), MyDDP(handbook_model().to(dev), bucket_bytes=cfg["bucket_bytes"])
    official = DistributedDataParallel(handbook_model().to(dev))
    seen: list[int] = []    # PyTorch DDP's bucket indices, via a comm hook that averages as DDP does
    # Through a lambda: DDP rejects the string annotations that `from __future__` makes of ours.
    official.register_comm_hook(seen, lambda state, bucket: _recording_allreduce(state, bucket))
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
    out = {"mine_vs_ref": max_diff(ref, mine.module), "official_vs_ref": max_diff(ref, official.module),
           "mine_vs_official": max_diff(mine.module, official.module), "ranks_diff": diff_from_rank0(mine),
           "launches_per_step": mine.allreduces_launched / steps, "official_per_step": official_per_step,
           "buckets": [(b.names, b.flat.numel() * b.flat.element_size()) for b in mine.buckets]}
    del official, mine   # DDP objects gone before the group is (teardown aborts otherwise)
    return out


def _recording_allreduce(seen: list[int], bucket: dist.GradBucket) -> torch.futures.Future:
    seen.append(bucket.index())
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].div_(dist.get_world_size()))


def order_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    dev = rank_device()
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(rank)).to(dev)
    stack = MyDDP(ReversedStack().to(dev), bucket_bytes=32 * 33 * 4)     # one Linear(32, 32) per bucket
    stack(x).sum().backward()
    out: dict[str, Any] = {"stack_ready": stack.ready_order, "stack_launch": stack.launch_order,
                           "stack_buckets": [b.names for b in stack.buckets]}
    X = torch.randn(4 * world, 16, generator=torch.Generator().manual_seed(7)).to(dev)
    ref = RankOrderedBranches().to(dev)   # the same math whatever the order: a single-process reference
    (ref(X).sum() / len(X)).backward()
    for naive in (False, True):
        model = MyDDP(RankOrderedBranches().to(dev), bucket_bytes=16 * 17 * 4, naive_ready_order=naive)
        (model(X[shard(len(X), rank, world)]).sum() * world / len(X)).backward()
        grad_diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
        out["naive" if naive else "index"] = {"ready": model.ready_order, "launch": model.launch_order,
                                              "grad_vs_ref": grad_diff}
    return out


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


# ---- the parent prints -----------------------------------------------------------------------------
def median_step(timings: list[dict[str, list[float]]], name: str) -> float:
    """Median over repeats of the slowest rank's step (a step ends when its last rank does);
    `timings` holds timing_rank's result for every rank."""
    return statistics.median(max(ts) for ts in zip(*(t[name] for t in timings)))


def part1_buckets(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(1, "buckets of the handbook's model")
    train = ranks[0]["train"]
    rows = [[i, ", ".join(names), size] for i, (names, size) in enumerate(train["buckets"])]
    rep.table(["bucket", "parameters (gradient-ready order)", "bytes"], rows, name="buckets")
    rep.note(f"cap {fmt_bytes(args.bucket_cap_bytes, binary=True)}; reverse registration order, a bucket is "
             "sealed after the tensor that brings it to >= the cap (PyTorch's rule)")
    rep.claim(f"gradient buckets at {fmt_bytes(args.bucket_cap_bytes, binary=True)}", len(rows), notes=2, kind=EXACT,
              why="the handbook uses 64 KiB (its MyDDP default); this run set --bucket-size")


def part2_train(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(2, f"{args.steps} steps: MyDDP = single process = PyTorch DDP (ddp_check.py)")
    train = ranks[0]["train"]
    buckets, per_step = len(train["buckets"]), train["launches_per_step"]
    launches = f"{per_step:g} all-reduce{'' if per_step == 1 else 's'}"
    rep.line(f"  {plural(args.world_size, 'rank')}, {plural(buckets, 'gradient bucket')}, {launches} launched "
             "during each backward")
    rep.claim("the handbook's summary line, from our numbers",
              HANDBOOK_LINE.format(args.world_size, buckets, f"{per_step:g}"),
              notes=HANDBOOK_LINE.format(2, 2, 2), kind=EXACT,
              why="the handbook ran 2 ranks at 64 KiB; this run changed --world-size or --bucket-size")
    rows = [["MyDDP vs single process (whole batch)", max(r["train"]["mine_vs_ref"] for r in ranks)],
            ["PyTorch DDP vs single process", max(r["train"]["official_vs_ref"] for r in ranks)],
            ["MyDDP vs PyTorch DDP", max(r["train"]["mine_vs_official"] for r in ranks)],
            ["MyDDP, any rank vs rank 0", max(r["train"]["ranks_diff"] for r in ranks)]]
    rep.table([f"after {args.steps} SGD steps (float32)", "max |Δparam|"], rows, name="diffs")
    rep.claim(f"MyDDP equals single-process training (max diff < {MATCH_TOL:g})",
              rows[0][1] < MATCH_TOL, notes=True, kind=EXACT)
    rep.claim(f"PyTorch DDP equals single-process training (max diff < {MATCH_TOL:g})",
              rows[1][1] < MATCH_TOL, notes=True, kind=EXACT)
    rep.note(f"PyTorch DDP with its defaults (25 MiB cap, first bucket 1 MiB) launched "
             f"{train['official_per_step']} all-reduces in its steps (its step 1 always uses a single bucket)")
    if args.batch % args.world_size:
        rep.note(f"{args.batch} samples on {args.world_size} ranks: unequal shards, so each rank's loss is "
                 "its summed loss × W / batch, not its mean (the mean would weight samples unequally)")


def part3_no_sync(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(3, "exercise: gradient accumulation with no_sync")
    acc = ranks[0]["no_sync"]
    rows = [["MyDDP, 2 micro-batches, first under no_sync", max(r["no_sync"]["mine_vs_ref"] for r in ranks)],
            ["PyTorch DDP, the same", max(r["no_sync"]["official_vs_ref"] for r in ranks)]]
    rep.table([f"vs one full batch, after {args.steps} steps", "max |Δparam|"], rows, name="no_sync")
    rep.claim(f"accumulating 2 half-batches equals 1 full batch (max diff < {MATCH_TOL:g})",
              rows[0][1] < MATCH_TOL, notes=True, kind=EXACT)
    rep.line(f"  all-reduces per step: MyDDP {acc['launches_per_step']:g} with no_sync "
             f"({2 * len(acc['buckets'])} if both micro-batches synchronised); PyTorch DDP "
             f"{acc['official_per_step']}")
    rep.note("each micro-batch's loss is its share of the global mean (summed loss × W / batch): for "
             "equal halves that is the handbook's 'divide each micro-step's loss by the step count'")


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


def part5_timing(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(5, "step time: MyDDP vs PyTorch DDP")
    timings = [r["timing"] for r in ranks]
    mine, official = median_step(timings, "MyDDP"), median_step(timings, "PyTorch DDP")
    rep.table(["", "median step (ms)"], [["MyDDP", mine * 1e3], ["PyTorch DDP", official * 1e3]], name="timing")
    ratio = mine / official
    rep.claim("MyDDP step / PyTorch DDP step", ratio, unit="×", kind=MEASURED)
    rep.line(f"  target <= {TARGET_RATIO:g}×: {'met' if ratio <= TARGET_RATIO else 'NOT met'} "
             f"(median of {args.repeats} interleaved repeats, same buckets, {plural(args.world_size, 'rank')})")


def main() -> None:
    parser = make_parser(__doc__, world_size=2, bucket_cap_mb="64KiB", batch=32, steps=3, repeats=None, real=True,
                         context={"bucket_cap_mb": "MyDDP's and DDP's; default: the handbook's 64 KiB",
                                  "steps": "SGD steps compared", "repeats": "timed steps per wrapper; default 50, "
                                  "10 with --quick"})
    args = parser.parse_args()
    if args.batch < 2 * args.world_size:
        raise UsageError(f"--batch {args.batch} is too small for {args.world_size} ranks: each rank "
                         "needs 2 samples (Part 3 splits its share into two micro-batches)")
    args.repeats = args.repeats or (10 if args.quick else 50)
    rep = Report(__file__, "from-scratch DDP (handbook) on real ranks", args)
    cfg = {"batch": args.batch, "steps": args.steps, "bucket_bytes": args.bucket_cap_bytes,
           "repeats": args.repeats, "warmup": 3 if args.quick else 10}
    # The ranks do every part's work in one launch (start-up paid once) and return plain data.
    preload_for_ddp(args.world_size)  # PyTorch DDP() imports torch._dynamo: see there
    ranks = launch(check_rank, args.world_size, cfg, backend="auto", timeout_s=args.timeout_s)
    part1_buckets(rep, args, ranks)     # our rule on the handbook's model: how many buckets
    part2_train(rep, args, ranks)       # ddp_check.py: MyDDP = one process = PyTorch DDP
    part3_no_sync(rep, args, ranks)     # the exercise: 2 half-batches under no_sync = 1 full batch
    part4_order(rep, args, ranks)       # lecture 15 §2.3: launches in bucket-index order
    part5_timing(rep, args, ranks)      # MyDDP's step against PyTorch DDP's
    rep.finish()


if __name__ == "__main__":
    run_main(main)
