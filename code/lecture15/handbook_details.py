"""The handbook chapter's statements that my_ddp_check.py checks beyond its ddp_check.py: the 7B
question on the α-β model (Part 6) and the practical details (Part 8): what a bf16/fp16 comm hook
all-reduces, gradient_as_bucket_view, the scaling-efficiency argument, ZeRO's bytes and
DistributedSampler's shares.

The rank side (`check_and_details_rank`, one launch for every part) and the parent side (the parts);
imported by my_ddp_check.py, not run by itself.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from common.costmodel import (
    Link,
    ring_allreduce_bytes_per_device,
    ring_allreduce_time,
    zero_step_bytes_per_device,
)
from common.dist_count import counting
from common.launcher import rank_device
from common.output import ASSUMPTION, EXACT, Report, fmt_bytes
from lecture15.ddp_sim import MiB, Timeline, assign_buckets, simulate_backward
from lecture15.my_ddp import MyDDP
from lecture15.my_ddp_ranks import check_rank, global_batch, handbook_model, max_diff, shard, share_of_loss

# DDP's built-in hooks, called through lambdas: DDP refuses a hook *named* bf16_compress_hook unless
# CUDA and NCCL are there, yet gloo all-reduces bfloat16 on the CPU; and a lambda carries no string
# annotations (DDP rejects those, which `from __future__ import annotations` would make of a def).
HOOKS = {"allreduce_hook (plain)": lambda state, bucket: default_hooks.allreduce_hook(state, bucket),
         "fp16_compress_hook": lambda state, bucket: default_hooks.fp16_compress_hook(state, bucket),
         "bf16_compress_hook": lambda state, bucket: default_hooks.bf16_compress_hook(state, bucket)}


# ---- rank side --------------------------------------------------------------------------------------
def check_and_details_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Everything my_ddp_check.py needs from one launch: check_rank's parts and Part 8's."""
    out = check_rank(rank, world, cfg)
    out["hooks"], out["views"] = hooks_rank(rank, world, cfg), views_rank(rank, world, cfg)
    return out


def _steps(model: torch.nn.Module, rank: int, world: int, cfg: dict[str, Any]) -> None:
    X, Y = (t.to(rank_device()) for t in global_batch(cfg["batch"]))
    x, y = X[shard(len(X), rank, world)], Y[shard(len(X), rank, world)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(cfg["steps"]):
        opt.zero_grad()
        share_of_loss(model, x, y, len(X), world).backward()
        opt.step()


def hooks_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Bytes and dtypes each hook hands to all_reduce over the steps, and the parameters it trains."""
    out, trained = {}, {}
    for name, hook in HOOKS.items():
        model = DistributedDataParallel(handbook_model().to(rank_device()), bucket_cap_mb=cfg["bucket_bytes"] / MiB)
        model.register_comm_hook(None, hook)
        with counting() as counts:  # the hooks call dist.all_reduce: every tensor handed to it is seen
            _steps(model, rank, world, cfg)
        record = [(dtype, nbytes) for name, dtype, nbytes in counts.tensors if name == "all_reduce"]
        out[name] = {"dtypes": sorted({d for d, _ in record}), "bytes": sum(n for _, n in record),
                     "calls": len(record)}
        trained[name] = model
    plain = trained[next(iter(HOOKS))].module
    for name, model in trained.items():
        out[name]["vs_plain"] = max_diff(plain, model.module)
    del trained
    return out


def views_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """After the steps: how many .grad tensors share storage with their bucket's buffer, for DDP with
    gradient_as_bucket_view True and False (buffers seen by a comm hook in the last step) and MyDDP."""
    out: dict[str, Any] = {}
    for as_view in (True, False):
        buffers: dict[int, int] = {}    # id(param) -> its bucket buffer's storage, from the last backward

        def hook(state: Any, bucket: dist.GradBucket, buffers: dict[int, int] = buffers) -> torch.futures.Future:
            for p in bucket.parameters():
                buffers[id(p)] = bucket.buffer().untyped_storage().data_ptr()
            return default_hooks.allreduce_hook(state, bucket)

        model = DistributedDataParallel(handbook_model().to(rank_device()), bucket_cap_mb=cfg["bucket_bytes"] / MiB,
                                        gradient_as_bucket_view=as_view)
        model.register_comm_hook(None, lambda state, bucket, h=hook: h(state, bucket))
        _steps(model, rank, world, cfg)
        params = list(model.parameters())
        out[f"DDP, gradient_as_bucket_view={as_view}"] = (
            sum(p.grad.untyped_storage().data_ptr() == buffers[id(p)] for p in params), len(params),
            len(set(buffers.values())))
        del model
    mine = MyDDP(handbook_model().to(rank_device()), bucket_bytes=cfg["bucket_bytes"])
    _steps(mine, rank, world, cfg)
    out["MyDDP (flat buffer, copied in and out)"] = (
        sum(p.grad.untyped_storage().data_ptr() == b.flat.untyped_storage().data_ptr()
            for b in mine.buckets for p in b.params), sum(len(b.params) for b in mine.buckets), len(mine.buckets))
    return out


# ---- Part 6: the 7B question ------------------------------------------------------------------------
# The handbook's question: a 7B model, bf16 gradients, 64 ranks, 50 GB/s per rank, 0.8 s backward.
PARAMS_7B, RANKS_7B, LINK_7B, BACKWARD_7B_S = 7e9, 64, Link(0.0, 50e9, "50 GB/s, α = 0"), 0.8
TENSORS_7B = 224   # assumed: 32 layers × 7 equal matrices (the handbook gives no shapes)
GRAD_7B = PARAMS_7B * 2


def timeline_7b(ranks: int, backward_s: float) -> Timeline:
    """The 7B step on ddp_sim: TENSORS_7B equal tensors ready at equal intervals over `backward_s`,
    DDP's default buckets (25 MiB, first 1 MiB), ring all-reduce on LINK_7B."""
    sizes = [int(GRAD_7B / TENSORS_7B)] * TENSORS_7B
    # Registration order: the first layer's tensor (index 0) is ready last, at the end of backward.
    ready = [(TENSORS_7B - i) * backward_s / TENSORS_7B for i in range(TENSORS_7B)]
    buckets = assign_buckets(sizes, 25 * MiB, first_cap_bytes=MiB)
    return simulate_backward(ready, sizes, buckets, lambda n: ring_allreduce_time(ranks, n, LINK_7B))


def part6_question(rep: Report) -> None:
    rep.part(6, "the handbook's question: can a 7B model's gradient sync hide behind its backward?")
    sent = ring_allreduce_bytes_per_device(RANKS_7B, GRAD_7B)
    comm_s = ring_allreduce_time(RANKS_7B, GRAD_7B, LINK_7B)
    rep.claim("bf16 gradients of 7e9 parameters", GRAD_7B / 1e9, notes=14, unit="GB", places=0, setting=(),
              ref="HB-7b-gradient-bytes", why="7e9 × 2 bytes")
    why = "the handbook's 'about': within a factor 1.05 of 2(K−1)/K·N, which it rounds to 2N"
    rep.claim("bytes each rank sends in the ring all-reduce", sent / 1e9, notes=28, unit="GB", factor=1.05,
              setting=(), ref="HB-7b-ring-bytes", why=f"{why}: 2·63/64·14 GB")
    rep.claim("that all-reduce at 50 GB/s (α = 0)", comm_s, notes=0.56, unit="s", factor=1.05, setting=(),
              ref="HB-7b-ring-time", why=f"{why}: 27.56 GB / 50 GB/s")
    rep.claim("shorter than the 0.8 s backward (hidden in principle)", comm_s < BACKWARD_7B_S, notes=True,
              setting=(), ref="HB-7b-hidden", why=f"{comm_s:.3f} s < {BACKWARD_7B_S} s")
    rep.line(f"  to hide it the link must deliver >= {comm_s / BACKWARD_7B_S:.0%} of its 50 GB/s: the "
             "handbook's 'not much margin'")
    # The timeline behind "only the last bucket is exposed", on ddp_sim with stated assumptions.
    timeline = timeline_7b(RANKS_7B, BACKWARD_7B_S)
    last = timeline.comm_s[-1]
    rep.line(f"  timeline ({TENSORS_7B} equal tensors ready at equal intervals, DDP's default buckets: "
             f"{len(timeline.buckets)}): backward {timeline.backward_s:.3f} s, step {timeline.step_s:.4f} s, "
             f"exposed {timeline.exposed_comm_s * 1e3:.2f} ms = the last bucket's all-reduce {last * 1e3:.2f} ms")
    rep.claim("only the last bucket's all-reduce is exposed", math.isclose(timeline.exposed_comm_s, last),
              notes=True, kind=ASSUMPTION, setting=(), ref="HB-last-bucket-exposed",
              why="on ddp_sim's two-stream timeline: each bucket's all-reduce ends before the next is ready, "
                  "so only the one launched at the end of backward runs past it")
    rep.note(f"assumed for the timeline: {TENSORS_7B} equal tensors, their gradients ready at equal intervals "
             "over the 0.8 s, α = 0, the link at 100 %")
    zero = {s: zero_step_bytes_per_device(s, RANKS_7B, GRAD_7B) for s in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")}
    rep.line("  bytes per rank per step: " + ", ".join(f"{s} {fmt_bytes(b)}" for s, b in zero.items()))
    rep.claim("ZeRO (stages 1, 2) sends what DDP sends per step", zero["ZeRO-1"] == zero["ZeRO-2"] == zero["DDP"],
              notes=True, setting=(), ref="HB-zero-same-comm",
              why="common.costmodel: reduce-scatter + all-gather = 2 × (K−1)/K·N = the ring all-reduce's "
                  f"2(K−1)/K·N; ZeRO-3 gathers parameters twice, {zero['ZeRO-3'] / zero['DDP']:g}× DDP's")


# ---- Part 8: the handbook's practical details -------------------------------------------------------
SCALING_RANKS = [16, 32, 64, 128, 256, 512]   # the 7B model, its global batch fixed at the question's
SAMPLER_CASES = [(2, 64), (4, 64), (8, 64), (3, 60), (4, 10), (8, 17), (3, 100)]   # (K, N)


def part8_details(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    rep.part(8, "the handbook's practical details: comm hooks, bucket views, scaling, data sharding")
    hooks = ranks[0]["hooks"]
    plain = hooks[next(iter(HOOKS))]
    rep.table(["DDP comm hook", "all-reduces", "dtype", "bytes", "vs plain", "max |Δparam| vs plain"],
              [[name, h["calls"], ", ".join(h["dtypes"]), f"{h['bytes']:,}", f"{h['bytes'] / plain['bytes']:g}×",
                f"{max(r['hooks'][name]['vs_plain'] for r in ranks):.2g}"] for name, h in hooks.items()],
              name="comm_hooks")
    rep.note(f"torch.distributed.algorithms.ddp_comm_hooks.default_hooks; {args.steps} steps of the handbook's "
             f"model, bucket_cap_mb = {fmt_bytes(args.bucket_cap_bytes, binary=True)}; counted: every tensor a "
             "hook handed to dist.all_reduce, all steps. The compressed gradients train slightly differently "
             "(last column): the handbook's trade")
    for name in ("bf16_compress_hook", "fp16_compress_hook"):
        rep.claim(f"{name}: bytes all-reduced / plain", hooks[name]["bytes"] / plain["bytes"], notes=0.5,
                  kind=EXACT, setting=(), ref="HB-bf16-hook-halves",
                  why=f"{hooks[name]['bytes']:,} B of {'/'.join(hooks[name]['dtypes'])} against {plain['bytes']:,} B "
                      "of float32 over the same all-reduces: 2 bytes per gradient instead of 4")
    views = ranks[0]["views"]
    rep.table(["after the steps", ".grad in its bucket's storage", "buckets"],
              [[name, f"{shared} of {total}", buckets] for name, (shared, total, buckets) in views.items()],
              name="bucket_views")
    on, off, mine = views.values()
    rep.claim("gradient_as_bucket_view=True: every .grad is a view of its bucket (no copy); False: none is",
              on[0] == on[1] and off[0] == 0, notes=True, kind=EXACT, setting=(), ref="HB-bucket-view-no-copy",
              why=f"storage of each .grad against the bucket buffer a comm hook saw: {on[0]}/{on[1]} with True, "
                  f"{off[0]}/{off[1]} with False")
    rep.claim("a concatenated bucket (MyDDP's flat buffer) is a copy of the gradients", mine[0] == 0, notes=True,
              kind=EXACT, setting=(), ref="HB-cat-copies",
              why=f"{mine[0]} of MyDDP's {mine[1]} .grad tensors share storage with their bucket's buffer")
    part8_scaling(rep)
    part8_sampler(rep)


def part8_scaling(rep: Report) -> None:
    """Fixed global batch: compute per rank falls as 1/K, the ring's bytes per rank rise toward 2Ψ."""
    whole_s = RANKS_7B * BACKWARD_7B_S    # the global batch's backward on one GPU (assumed linear)
    rows, efficiency = [], []
    for k in SCALING_RANKS:
        timeline = timeline_7b(k, whole_s / k)
        efficiency.append(timeline.backward_s / timeline.step_s)
        rows.append([k, f"{timeline.backward_s:.3f}", f"{ring_allreduce_bytes_per_device(k, GRAD_7B) / GRAD_7B:.3f}",
                     f"{ring_allreduce_time(k, GRAD_7B, LINK_7B):.3f}", f"{timeline.step_s:.3f}",
                     f"{efficiency[-1]:.0%}"])
    rep.table(["ranks K", "backward per rank (s)", "ring bytes per rank / Ψ", "all-reduce (s)",
               "step overlapped (s)", "efficiency"], rows, name="scaling")
    rep.note(f"the 7B question's model with its global batch fixed: the backward of the whole batch is "
             f"{RANKS_7B} × {BACKWARD_7B_S} s and splits evenly (per-rank compute ∝ per-rank batch, assumed); "
             "Ψ = the bf16 gradients' bytes; efficiency = backward / step, with Part 6's timeline")
    top = SCALING_RANKS[-1]
    rep.claim(f"ring bytes per rank at K = {top}, in units of Ψ", ring_allreduce_bytes_per_device(top, GRAD_7B)
              / GRAD_7B, notes=2, unit="Ψ", factor=1.05, setting=(), ref="HB-scaling-comm-fixed",
              why=f"the handbook's 'of the order of 2Ψ' (within a factor 1.05): 2(K−1)/K·Ψ, which rises with K "
                  f"toward 2Ψ ({rows[0][2]} at K = {SCALING_RANKS[0]}) while compute per rank falls as 1/K")
    falls = all(a >= b for a, b in zip(efficiency, efficiency[1:])) and efficiency[-1] < efficiency[0]
    rep.claim("efficiency falls as K grows with the global batch fixed", falls, notes=True, kind=ASSUMPTION,
              setting=(), ref="HB-scaling-efficiency-falls",
              why=f"backward / step on ddp_sim: {', '.join(r[-1] for r in rows)} for K = "
                  f"{', '.join(map(str, SCALING_RANKS))}: hidden while the all-reduce fits in the backward")


def sampler_shares(k: int, n: int, drop_last: bool, epoch: int = 1) -> list[list[int]]:
    """Each rank's indices for one epoch from torch's DistributedSampler (shuffled, seed 0)."""
    shares = []
    for rank in range(k):
        sampler = DistributedSampler(range(n), num_replicas=k, rank=rank, shuffle=True, seed=0, drop_last=drop_last)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def part8_sampler(rep: Report) -> None:
    rows, exact_ok, any_ok = [], True, True
    for k, n in SAMPLER_CASES:
        cells: list[object] = [k, n]
        for drop_last in (False, True):
            shares = sampler_shares(k, n, drop_last)
            taken = sum(len(s) for s in shares)
            seen = set().union(*shares)
            repeated, missing = taken - len(seen), n - len(seen)
            cells += [f"{len(shares[0])}", repeated, missing]
            ok = repeated == 0 and missing == 0
            any_ok = any_ok and (ok or drop_last)   # the default (drop_last=False) is the one we judge
            exact_ok = exact_ok and (ok if n % k == 0 else True)
        rows.append(cells)
    rep.table(["K", "N", "per rank", "repeated", "left out", "drop_last: per rank", "repeated", "left out"],
              rows, name="sampler")
    rep.note("torch.utils.data.DistributedSampler, shuffle=True, seed 0, set_epoch(1) on every rank. When K does "
             "not divide N it pads (drop_last=False, the default) by repeating the first indices of the "
             "shuffled order, or drops the tail (drop_last=True): each rank gets the same count either way")
    rep.claim("K divides N: the ranks' shares are disjoint and cover the data", exact_ok, notes=True, kind=EXACT,
              setting=(), ref="HB-sampler-disjoint",
              why="every (K, N) above with K | N: nothing repeated, nothing left out")
    uneven = next((r for r in rows if r[3] or r[4]), None)
    rep.claim("any N (default drop_last=False): no overlap and no gaps", any_ok, notes=True, kind=EXACT,
              setting=(), ref="HB-sampler-disjoint",
              why="the handbook states it without the condition; it holds only when K divides N: "
                  + (f"K = {uneven[0]}, N = {uneven[1]} repeats {uneven[3]} samples (padding to equal shares); "
                     "drop_last=True leaves them out instead" if uneven else "no uneven case tried"))
