"""Handbook "数据并行与 DDP" (实践中的细节, and the 7B question of 练习): the chapter's practical details.

    python code/lecture15/handbook_details.py [--world-size 2] [--bucket-cap-mb 64KiB] [--steps 3]

Part 1: gradient_as_bucket_view against a concatenated bucket, on real DDP and MyDDP ranks. Part 2:
what a bf16 / fp16 comm hook hands to all_reduce. Part 3: the 7B question on the α-β model (and
ddp_sim's timeline for "only the last bucket is exposed"). Part 4: the scaling-efficiency argument
with the global batch fixed. Part 5: DistributedSampler's shares. MyDDP itself: my_ddp_check.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.costmodel.steps import zero_step_bytes_per_device
from common.dist_count import counting
from common.launch import launch, preload_for_ddp, rank_device
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import MiB, fmt_bytes
from lecture15.ddp_sim import Timeline, assign_buckets, simulate_backward
from lecture15.handbook_model import global_batch, handbook_model, max_diff, shard, share_of_loss
from lecture15.my_ddp import MyDDP

RING_ALLREDUCE = algorithm("ring all-reduce")

# DDP's built-in hooks, called through lambdas: DDP refuses a hook *named* bf16_compress_hook unless
# CUDA and NCCL are there, yet gloo all-reduces bfloat16 on the CPU; and a lambda carries no string
# annotations (DDP rejects those, which `from __future__ import annotations` would make of a def).
HOOKS = {"allreduce_hook (plain)": lambda state, bucket: default_hooks.allreduce_hook(state, bucket),
         "fp16_compress_hook": lambda state, bucket: default_hooks.fp16_compress_hook(state, bucket),
         "bf16_compress_hook": lambda state, bucket: default_hooks.bf16_compress_hook(state, bucket)}
# Part 3, the handbook's question: a 7B model, bf16 gradients, 64 ranks, 50 GB/s per rank, 0.8 s backward.
PARAMS_7B, RANKS_7B, LINK_7B, BACKWARD_7B_S = 7e9, 64, Link(0.0, 50e9, "50 GB/s, α = 0"), 0.8
TENSORS_7B = 224   # assumed: 32 layers × 7 equal matrices (the handbook gives no shapes)
GRAD_7B = PARAMS_7B * 2
SCALING_RANKS = [16, 32, 64, 128, 256, 512]   # Part 4: the 7B model, its global batch fixed at the question's
SAMPLER_CASES = [(2, 64), (4, 64), (8, 64), (3, 60), (4, 10), (8, 17), (3, 100)]   # Part 5: (K, N)

# CPU time here (measured at W = 2 and 8 on 2 cores: 8.0 and 8.6 s): start-up (torch, dynamo, W ranks),
# then on every rank six DDP/MyDDP copies of the handbook's model trained `steps` steps on its share of
# the batch. Memory: the global batch (64 float32 features) a few times in every process.
COST = Cost([Term("1", 7.0, lambda a: 1), Term("W²", 0.02, lambda a: a.world_size**2),
             Term("W·steps", 0.05, lambda a: a.world_size * a.steps), Term("B", 0.0049, lambda a: a.batch)],
            memory=lambda a: (a.world_size + 1) * 4 * 64 * 4 * a.batch)


def train_steps(model: torch.nn.Module, rank: int, world: int, cfg: dict[str, Any]) -> None:
    """`steps` SGD steps of a wrapped handbook model on this rank's shard of the global batch."""
    X, Y = (t.to(rank_device()) for t in global_batch(cfg["batch"]))
    x, y = X[shard(len(X), rank, world)], Y[shard(len(X), rank, world)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(cfg["steps"]):
        opt.zero_grad()
        share_of_loss(model, x, y, len(X), world).backward()
        opt.step()


def ddp(cfg: dict[str, Any], **options: Any) -> DistributedDataParallel:
    model = handbook_model().to(rank_device())
    return DistributedDataParallel(model, bucket_cap_mb=cfg["bucket_bytes"] / MiB, **options)


# ---- Part 1: a bucket's gradients as views, or concatenated ---------------------------------------
def views_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """After the steps: how many .grad tensors share storage with their bucket's buffer, for DDP with
    gradient_as_bucket_view True and False (buffers seen by a comm hook in the last step) and MyDDP."""
    out: dict[str, Any] = {}
    for as_view in (True, False):
        buffers: dict[int, int] = {}    # id(param) -> its bucket buffer's storage, from the last backward

        def hook(state: Any, bucket: dist.GradBucket, buffers: dict[int, int] = buffers) -> Any:
            for p in bucket.parameters():
                buffers[id(p)] = bucket.buffer().untyped_storage().data_ptr()
            return default_hooks.allreduce_hook(state, bucket)

        model = ddp(cfg, gradient_as_bucket_view=as_view)
        model.register_comm_hook(None, lambda state, bucket, h=hook: h(state, bucket))
        train_steps(model, rank, world, cfg)
        params = list(model.parameters())
        out[f"DDP, gradient_as_bucket_view={as_view}"] = (
            sum(p.grad.untyped_storage().data_ptr() == buffers[id(p)] for p in params), len(params),
            len(set(buffers.values())))
        del model
    mine = MyDDP(handbook_model().to(rank_device()), bucket_bytes=cfg["bucket_bytes"])
    train_steps(mine, rank, world, cfg)
    params = [(p, b.flat) for b in mine.buckets for p in b.params]
    out["MyDDP (flat buffer, copied in and out)"] = (
        sum(p.grad.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for p, flat in params),
        len(params), len(mine.buckets))
    return out


def part1_bucket_views(rep: Report, ranks: list[dict[str, Any]]) -> None:
    views = ranks[0]["views"]
    rep.table(["after the steps", ".grad in its bucket's storage", "buckets"],
              [[name, f"{shared} of {total}", buckets] for name, (shared, total, buckets) in views.items()],
              name="bucket_views")
    on, off, mine = views.values()
    rep.value("view_no_copy", on[0] == on[1] and off[0] == 0)
    rep.value("view_on", f"{on[0]}/{on[1]}")
    rep.value("view_off", f"{off[0]}/{off[1]}")
    rep.value("cat_copies", mine[0] == 0)
    rep.value("mine_shared", mine[0])
    rep.value("mine_grads", mine[1])


# ---- Part 2: comm hooks ---------------------------------------------------------------------------
def hooks_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Bytes and dtypes each hook hands to all_reduce over the steps, and the parameters it trains."""
    out, trained = {}, {}
    for name, hook in HOOKS.items():
        model = ddp(cfg)
        model.register_comm_hook(None, hook)
        with counting() as counts:  # the hooks call dist.all_reduce: every tensor handed to it is seen
            train_steps(model, rank, world, cfg)
        record = [(dtype, nbytes) for call, dtype, nbytes in counts.tensors if call == "all_reduce"]
        out[name] = {"dtypes": sorted({d for d, _ in record}), "bytes": sum(n for _, n in record),
                     "calls": len(record)}
        trained[name] = model
    plain = trained[next(iter(HOOKS))].module
    for name, model in trained.items():
        out[name]["vs_plain"] = max_diff(plain, model.module)
    del trained
    return out


def part2_comm_hooks(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    hooks = ranks[0]["hooks"]
    plain = hooks[next(iter(HOOKS))]
    rep.table(["DDP comm hook", "all-reduces", "dtype", "bytes", "vs plain", "max |Δparam| vs plain"],
              [[name, h["calls"], ", ".join(h["dtypes"]), f"{h['bytes']:,}",
                f"{h['bytes'] / plain['bytes']:g}×",
                f"{max(r['hooks'][name]['vs_plain'] for r in ranks):.2g}"]
               for name, h in hooks.items()],
              name="comm_hooks")
    rep.note(f"torch's ddp_comm_hooks.default_hooks; {args.steps} steps of the handbook's model, "
             f"bucket_cap_mb = {fmt_bytes(args.bucket_cap_bytes, binary=True)}; counted: every tensor a hook "
             "handed to dist.all_reduce, all steps. The compressed gradients train slightly differently "
             "(last column): the handbook's trade")
    bf16, fp16 = hooks["bf16_compress_hook"], hooks["fp16_compress_hook"]
    rep.value("bf16_share", bf16["bytes"] / plain["bytes"])
    rep.value("bf16_bytes", bf16["bytes"])
    rep.value("bf16_dtype", "/".join(bf16["dtypes"]))
    rep.value("fp16_share", fp16["bytes"] / plain["bytes"])
    rep.value("fp16_bytes", fp16["bytes"])
    rep.value("fp16_dtype", "/".join(fp16["dtypes"]))
    rep.value("plain_bytes", plain["bytes"])


# ---- Part 3: the 7B question ----------------------------------------------------------------------
def timeline_7b(ranks: int, backward_s: float) -> Timeline:
    """The 7B step on ddp_sim: TENSORS_7B equal tensors ready at equal intervals over `backward_s`,
    DDP's default buckets (25 MiB, first 1 MiB), ring all-reduce on LINK_7B."""
    sizes = [int(GRAD_7B / TENSORS_7B)] * TENSORS_7B
    # Registration order: the first layer's tensor (index 0) is ready last, at the end of backward.
    ready = [(TENSORS_7B - i) * backward_s / TENSORS_7B for i in range(TENSORS_7B)]
    buckets = assign_buckets(sizes, 25 * MiB, first_cap_bytes=MiB)
    return simulate_backward(ready, sizes, buckets, lambda n: RING_ALLREDUCE.time(ranks, n, LINK_7B))


def part3_question(rep: Report) -> None:
    comm_s = RING_ALLREDUCE.time(RANKS_7B, GRAD_7B, LINK_7B)
    rep.line(f"  to hide it the link must deliver >= {comm_s / BACKWARD_7B_S:.0%} of its 50 GB/s: the "
             "handbook's 'not much margin'")
    timeline = timeline_7b(RANKS_7B, BACKWARD_7B_S)   # "only the last bucket is exposed", on ddp_sim
    last = timeline.comm_s[-1]
    rep.line(f"  timeline ({TENSORS_7B} equal tensors ready at equal intervals, DDP's default buckets): step "
             f"{timeline.step_s:.4f} s, exposed {timeline.exposed_comm_s * 1e3:.2f} ms = the last bucket's "
             f"{last * 1e3:.2f} ms")
    zero = {stage: zero_step_bytes_per_device(stage, RANKS_7B, GRAD_7B)
            for stage in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")}
    rep.line("  bytes per rank per step: " + ", ".join(f"{s} {fmt_bytes(b)}" for s, b in zero.items()))
    rep.value("grad_7b_gb", GRAD_7B / 1e9)
    rep.value("ring_7b_gb", RING_ALLREDUCE.busiest_bytes(RANKS_7B, GRAD_7B) / 1e9)
    rep.value("ring_7b_s", comm_s)
    rep.value("hidden_7b", comm_s < BACKWARD_7B_S)
    rep.value("backward_7b_s", BACKWARD_7B_S)
    rep.value("last_bucket_exposed", math.isclose(timeline.exposed_comm_s, last))
    rep.value("zero_same_comm", zero["ZeRO-1"] == zero["ZeRO-2"] == zero["DDP"])
    rep.value("zero3_over_ddp", zero["ZeRO-3"] / zero["DDP"])


# ---- Part 4: scaling with the global batch fixed ---------------------------------------------------
def part4_scaling(rep: Report) -> None:
    """Fixed global batch: compute per rank falls as 1/K, the ring's bytes per rank rise toward 2Ψ."""
    whole_s = RANKS_7B * BACKWARD_7B_S    # the global batch's backward on one GPU (assumed linear)
    rows, efficiency = [], []
    for k in SCALING_RANKS:
        timeline = timeline_7b(k, whole_s / k)
        efficiency.append(timeline.backward_s / timeline.step_s)
        psi = RING_ALLREDUCE.busiest_bytes(k, GRAD_7B) / GRAD_7B
        rows.append([k, f"{timeline.backward_s:.3f}", f"{psi:.3f}",
                     f"{RING_ALLREDUCE.time(k, GRAD_7B, LINK_7B):.3f}", f"{timeline.step_s:.3f}",
                     f"{efficiency[-1]:.0%}"])
    rep.table(["K", "backward/rank (s)", "ring bytes/rank ÷ Ψ", "all-reduce (s)", "step (s)", "efficiency"],
              rows, name="scaling")
    rep.note(f"Part 3's model with its global batch fixed: the whole batch's backward is {RANKS_7B} × "
             f"{BACKWARD_7B_S} s and splits evenly (per-rank compute ∝ per-rank batch, assumed); Ψ = the "
             "bf16 gradients' bytes; efficiency = backward / step")
    rep.value("ring_bytes_top_psi", RING_ALLREDUCE.busiest_bytes(SCALING_RANKS[-1], GRAD_7B) / GRAD_7B)
    rep.value("top_k", SCALING_RANKS[-1])
    rep.value("low_k", SCALING_RANKS[0])
    rep.value("ring_bytes_low_psi", rows[0][2])
    rep.value("efficiency_falls", all(a >= b for a, b in zip(efficiency, efficiency[1:]))
               and efficiency[-1] < efficiency[0])
    rep.value("efficiency_text", ", ".join(r[-1] for r in rows))
    rep.value("ranks_text", ", ".join(map(str, SCALING_RANKS)))


# ---- Part 5: DistributedSampler --------------------------------------------------------------------
def sampler_shares(k: int, n: int, drop_last: bool, epoch: int = 1) -> list[list[int]]:
    """Each rank's indices for one epoch from torch's DistributedSampler (shuffled, seed 0)."""
    shares = []
    for rank in range(k):
        sampler = DistributedSampler(range(n), num_replicas=k, rank=rank, shuffle=True, seed=0,
                                     drop_last=drop_last)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def part5_sampler(rep: Report) -> None:
    rows, exact_ok, any_ok = [], True, True
    for k, n in SAMPLER_CASES:
        cells: list[object] = [k, n]
        for drop_last in (False, True):
            shares = sampler_shares(k, n, drop_last)
            seen = set().union(*shares)
            repeated, missing = sum(len(s) for s in shares) - len(seen), n - len(seen)
            cells += [f"{len(shares[0])}", repeated, missing]
            ok = repeated == 0 and missing == 0
            any_ok = any_ok and (ok or drop_last)   # the default (drop_last=False) is the one we judge
            exact_ok = exact_ok and (ok if n % k == 0 else True)
        rows.append(cells)
    rep.table(["K", "N", "per rank", "repeated", "left out", "drop_last: per rank", "repeated", "left out"],
              rows, name="sampler")
    rep.note("torch's DistributedSampler, shuffle=True, seed 0, set_epoch(1) on every rank. When K does not "
             "divide N it pads (drop_last=False, the default) by repeating the first indices of the shuffled "
             "order, or drops the tail (drop_last=True): each rank gets the same count either way")
    uneven = next((r for r in rows if r[3] or r[4]), None)
    rep.value("sampler_exact", exact_ok)
    rep.value("sampler_any", any_ok)
    rep.value("sampler_uneven", f"K = {uneven[0]}, N = {uneven[1]} repeats {uneven[3]} samples (padding to "
                               "equal shares); drop_last=True leaves them out instead" if uneven
                               else "no uneven case tried")


def details_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Parts 1 and 2's rank work in one launch (start-up paid once); plain data back to the parent."""
    return {"views": views_rank(rank, world, cfg), "hooks": hooks_rank(rank, world, cfg)}


def main() -> None:
    parser = make_parser(__doc__, world_size=2, bucket_cap_mb="64KiB", batch=32, steps=3, real=True,
                         cost=COST,
                         context={"bucket_cap_mb": "DDP's and MyDDP's; default: the handbook's 64 KiB",
                                  "steps": "SGD steps of Parts 1 and 2"})
    args = parser.parse_args()
    rep = Report(__file__, "the handbook's practical details and its 7B question", args)
    cfg = {"batch": args.batch, "steps": args.steps, "bucket_bytes": args.bucket_cap_bytes}
    preload_for_ddp(args.world_size)  # DDP() imports torch._dynamo: see there
    ranks = launch(details_rank, args.world_size, cfg, backend="auto", timeout_s=args.timeout_s)
    rep.part(1, "a bucket's gradients: views (gradient_as_bucket_view) or a copy")   # 从零实现's note
    part1_bucket_views(rep, ranks)
    rep.part(2, "comm hooks: bf16 and fp16 gradients")   # 降低通信量
    part2_comm_hooks(rep, args, ranks)
    rep.part(3, "the handbook's question: can a 7B model's gradient sync hide behind its backward?")
    part3_question(rep)
    rep.part(4, "scaling efficiency with the global batch fixed")   # 扩展效率, on Part 3's model
    part4_scaling(rep)
    rep.part(5, "DistributedSampler: each rank's share of the data")   # 数据的切分
    part5_sampler(rep)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
