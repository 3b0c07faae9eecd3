"""The rank side of lecture15/my_ddp_check.py: the handbook's model and data, and what each rank runs
(MyDDP, PyTorch DDP and a single process side by side); ranks return plain data, the check prints.

Imported by my_ddp_check.py, tests/test_my_ddp.py and bench/bench_my_ddp.py; not run by itself.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common.launcher import rank_device
from lecture15.my_ddp import MyDDP


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


class ScaledByBuffer(torch.nn.Module):
    """A Linear whose output is multiplied by a buffer: whether a forward synced the buffer shows."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


# Forwards in a row, each with its backward where it has one: plain training, an accumulation window,
# eval() mode with a backward, an evaluation loop under no_grad, inference_mode (lecture 15 §4.3).
FORWARD_KINDS = ["train", "train", "no_sync", "no_sync", "train", "eval()", "train", "no_grad", "no_grad",
                 "train", "train", "inference_mode"]
# Where the no_sync block sits in one step: around forward and backward, the forward only, the backward only.
NO_SYNC_PLACEMENTS = ["forward + backward", "forward only", "backward only"]


def global_batch(n: int, features: int = 64, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(123)
    return torch.randn(n, features), torch.randint(0, classes, (n,))


def shard(n: int, part: int, parts: int) -> slice:
    return slice(part * n // parts, (part + 1) * n // parts)   # sizes differ by one when W ∤ n


def share_of_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, n_global: int, world: int) -> torch.Tensor:
    """This shard's part of the global mean loss, scaled by W because DDP divides the sum by W.
    Equals the local mean when shards are equal; stays exact when they are not (W ∤ batch)."""
    return torch.nn.functional.cross_entropy(model(x), y, reduction="sum") * world / n_global


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
            "order": order_rank(rank, world, cfg), "timing": timing_rank(rank, world, cfg),
            "placement": no_sync_placement_rank(rank, world), "buffers": buffer_sync_rank(rank, world)}


def _make_wrapper(kind: str, module: torch.nn.Module, seen: list[int]) -> torch.nn.Module:
    if kind == "MyDDP":
        return MyDDP(module)
    official = DistributedDataParallel(module)
    official.register_comm_hook(seen, lambda state, bucket: _recording_allreduce(state, bucket))
    return official


def no_sync_placement_rank(rank: int, world: int) -> dict[str, list[bool]]:
    """For each placement of the no_sync block: did that step's backward synchronise?"""
    out: dict[str, list[bool]] = {}
    for kind in ("MyDDP", "PyTorch DDP"):
        seen: list[int] = []
        model = _make_wrapper(kind, handbook_model(), seen)
        synced = []
        for placement in NO_SYNC_PLACEMENTS:
            before = model.allreduces_launched if kind == "MyDDP" else len(seen)
            x = torch.randn(4, 64)
            if placement == "backward only":
                loss = model(x).sum()
                with model.no_sync():
                    loss.backward()
            else:
                with model.no_sync():
                    loss = model(x).sum()
                    if placement == "forward + backward":
                        loss.backward()
                if placement == "forward only":
                    loss.backward()
            synced.append((model.allreduces_launched if kind == "MyDDP" else len(seen)) > before)
            model.zero_grad()
        out[kind] = synced
        del model
    return out


def buffer_sync_rank(rank: int, world: int) -> dict[str, Any]:
    """Before each forward of FORWARD_KINDS every rank sets its buffer to rank + 1; after it, a
    buffer equal to 1 (rank 0's) means this forward broadcast the buffers."""
    out: dict[str, Any] = {}
    for kind in ("MyDDP", "PyTorch DDP"):
        model = _make_wrapper(kind, ScaledByBuffer(), [])
        synced = []
        for what in FORWARD_KINDS:
            model.module.scale.fill_(rank + 1.0)
            model.train(what != "eval()")
            x = torch.randn(2, 4)
            if what == "no_sync":
                with model.no_sync():
                    model(x).sum().backward()
            elif what in ("no_grad", "inference_mode"):
                with torch.no_grad() if what == "no_grad" else torch.inference_mode():
                    model(x)
            else:
                model(x).sum().backward()
            synced.append(model.module.scale.item() == 1.0)
        out[kind] = synced
        if kind == "MyDDP":
            out["my_syncs"] = model.buffer_syncs
        del model
    try:
        MyDDP(torch.nn.Sequential(torch.nn.Embedding(10, 4, sparse=True), torch.nn.Linear(4, 2)))
        out["sparse"] = "accepted"
    except ValueError as err:  # the staged refusal, before any communication; anything else is a failure
        if "does not support sparse gradients" not in str(err):
            raise
        out["sparse"] = str(err)
    return out


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
           "buckets": [(b.names, b.flat.numel() * b.flat.element_size()) for b in mine.buckets],
           "ddp_default_cap": official.bucket_bytes_cap, "ddp_first_cap": dist._DEFAULT_FIRST_BUCKET_BYTES}
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
