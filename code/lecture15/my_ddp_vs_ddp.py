"""Handbook "数据并行与 DDP", lecture 15 §2.3 and §4.3: MyDDP held to PyTorch DDP's rules on real ranks.

    python code/lecture15/my_ddp_vs_ddp.py [--world-size 2]

Part 1: where the no_sync block must sit (the handbook's hint reads the flag in the gradient hook;
DDP, and MyDDP, read it in the forward). Part 2: launch order when gradients arrive out of order
(buckets launched in index order, as DDP's Reducer does; the handbook's "first ready, first sent"
shown failing). Part 3: which forwards broadcast the buffers, and sparse gradients. MyDDP checked
against one process: my_ddp_check.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

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
from lecture15.handbook_model import handbook_model, recording_allreduce, shard
from lecture15.my_ddp import MyDDP

# Part 1: where the no_sync block sits in one step: around forward and backward, the forward, the backward.
NO_SYNC_PLACEMENTS = ["forward + backward", "forward only", "backward only"]
# Part 3: forwards in a row, each with its backward where it has one: plain training, an accumulation
# window, eval() mode with a backward, an evaluation loop under no_grad, inference_mode (lecture 15 §4.3).
FORWARD_KINDS = ["train", "train", "no_sync", "no_sync", "train", "eval()", "train", "no_grad", "no_grad",
                 "train", "train", "inference_mode"]

# CPU time here (measured at W = 2 and 8 on 2 cores: 6.7 and 8.1 s): start-up (torch, dynamo, W ranks)
# and, on each rank, a few small models wrapped and stepped a few times, which does not grow with W.
COST = Cost([Term("1", 6.6, lambda a: 1), Term("W²", 0.025, lambda a: a.world_size**2)],
            memory=lambda a: (a.world_size + 1) * 2**20)


# ---- Part 1: where no_sync acts ---------------------------------------------------------------
def wrapped(kind: str, module: torch.nn.Module, seen: list[int]) -> torch.nn.Module:
    if kind == "MyDDP":
        return MyDDP(module)
    official = DistributedDataParallel(module)
    official.register_comm_hook(seen, lambda state, bucket: recording_allreduce(state, bucket))
    return official


def no_sync_placement_rank(rank: int, world: int) -> dict[str, list[bool]]:
    """For each placement of the no_sync block: did that step's backward synchronise?"""
    out: dict[str, list[bool]] = {}
    for kind in ("MyDDP", "PyTorch DDP"):
        seen: list[int] = []
        model = wrapped(kind, handbook_model(), seen)
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


def part1_no_sync_placement(rep: Report, ranks: list[dict[str, Any]]) -> None:
    placement = ranks[0]["placement"]
    mine, theirs = placement["MyDDP"], placement["PyTorch DDP"]
    rows = [[where, *("synchronises" if p[i] else "local only" for p in (mine, theirs)),
             rep.mark("MyDDP's no_sync acts where DDP's does (placements that differ)", mine[i] == theirs[i],
                      where)]
            for i, where in enumerate(NO_SYNC_PLACEMENTS)]
    rep.table(["inside `with no_sync():`", "MyDDP", "PyTorch DDP", "the same"], rows,
              name="no_sync_placement")
    rep.note("MyDDP reads the no_sync flag in forward(), not in the gradient hook as the handbook's hint has "
             "it: that is DDP's contract (the table). Read in the hook, it would sync the 'forward only' "
             "step and skip the 'backward only' one, so a loop written for DDP (backward after the block) "
             "would silently sync every micro-step. DDP decides in the forward, where it readies buckets.")


# ---- Part 2: launch order when gradients arrive out of order ------------------------------------
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


def order_rank(rank: int, world: int) -> dict[str, Any]:
    """MyDDP's ready and launch orders for the two staged models; each rule's gradient against one process."""
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
        diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(ref.parameters(), model.parameters()))
        out["naive" if naive else "index"] = {"ready": model.ready_order, "launch": model.launch_order,
                                              "grad_vs_ref": diff}
    return out


def part2_order(rep: Report, ranks: list[dict[str, Any]]) -> None:
    order = ranks[0]["order"]
    ready, launched = order["stack_ready"], order["stack_launch"]
    position = {b: i + 1 for i, b in enumerate(ready)}   # the k-th bucket to become complete
    rows = [[b, ", ".join(order["stack_buckets"][b]), position[b], max(position[c] for c in range(b + 1))]
            for b in range(len(ready))]
    rep.line("  (a) ReversedStack: 4 Linear(32, 32) registered in the reverse of their use, one per bucket")
    rep.table(["bucket", "parameters", "complete as # (naive launch)", "launched at # (index order)"], rows,
              name="reversed_registration")
    rep.line(f"  recorded: ready order {ready}, launch order {launched}; bucket 0 holds the first layer "
             "used, so every launch waits for it: no overlap (lecture 15 §3, bucket order)")
    rep.line("  (b) RankOrderedBranches: even ranks finish bucket 0 first, odd ranks bucket 1")
    rows = [[label, " | ".join(f"r{r}: {ranks[r]['order'][kind]['launch']}" for r in range(len(ranks))),
             max(r["order"][kind]["grad_vs_ref"] for r in ranks)]
            for kind, label in (("index", "bucket-index order (MyDDP)"),
                                ("naive", "ready order (handbook, WRONG)"))]
    rep.table(["launch rule", "launch order per rank", "max |Δgrad| vs 1 process"], rows, name="rank_order")
    rep.note("ready order pairs rank 0's bucket 0 with rank 1's bucket 1: same size, so gloo sums unrelated "
             "gradients without any error (lecture 15 §2.3, exercise 6). PyTorch rebuilds its buckets in the "
             "observed order after step 1; MyDDP, like PyTorch 1.5, keeps the construction-time buckets.")
    rep.value("rank_order", {k: [r["order"][k] for r in ranks] for k in ("index", "naive")}, compared=False)
    rep.value("stack_order", {"ready": ready, "launch": launched}, compared=False)   # (a), for --json


# ---- Part 3: buffers and sparse gradients --------------------------------------------------------
class ScaledByBuffer(torch.nn.Module):
    """A Linear whose output is multiplied by a buffer: whether a forward synced the buffer shows."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def buffer_sync_rank(rank: int, world: int) -> dict[str, Any]:
    """Before each forward of FORWARD_KINDS every rank sets its buffer to rank + 1; after it, a
    buffer equal to 1 (rank 0's) means this forward broadcast the buffers."""
    out: dict[str, Any] = {}
    for kind in ("MyDDP", "PyTorch DDP"):
        model = wrapped(kind, ScaledByBuffer(), [])
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


def part3_buffers(rep: Report, ranks: list[dict[str, Any]]) -> None:
    seen = ranks[1]["buffers"]   # rank 1's buffer is rank 0's after a forward that broadcast
    mine, theirs = seen["MyDDP"], seen["PyTorch DDP"]
    rep.table(["forward", "kind", "MyDDP", "PyTorch DDP", "the same"],
              [[i + 1, what, *("broadcast" if k[i] else "-" for k in (mine, theirs)),
                rep.mark("MyDDP broadcasts buffers as DDP does (forwards that differ)", mine[i] == theirs[i],
                         f"forward {i + 1}, {what}")]
               for i, what in enumerate(FORWARD_KINDS)], name="buffer_sync")
    rep.note("DDP syncs buffers at the first forward and after every forward whose backward synchronises: "
             "in an accumulation window only at its first forward, in a no_grad evaluation loop only at its "
             "first forward and not at the next training one; eval() mode by itself changes nothing")
    rep.line(f"  sparse gradients: {ranks[0]['buffers']['sparse']}")


def compare_rank(rank: int, world: int) -> dict[str, Any]:
    """Every part's rank work in one launch (start-up paid once); plain data back to the parent."""
    return {"placement": no_sync_placement_rank(rank, world), "order": order_rank(rank, world),
            "buffers": buffer_sync_rank(rank, world)}


def main() -> None:
    parser = make_parser(__doc__, world_size=2, real=True, cost=COST)
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError(f"--world-size {args.world_size}: these parts compare ranks, use at least 2")
    rep = Report(__file__, "MyDDP against PyTorch DDP's rules, on real ranks", args)
    preload_for_ddp(args.world_size)  # PyTorch DDP() imports torch._dynamo: see there
    ranks = launch(compare_rank, args.world_size, backend="auto", timeout_s=args.timeout_s)
    rep.part(1, "where no_sync acts: the forward inside the block")   # the handbook's hint against DDP
    part1_no_sync_placement(rep, ranks)
    rep.part(2, "launch order when gradients arrive out of order (lecture 15 §2.3)")   # bucket-index order
    part2_order(rep, ranks)
    rep.part(3, "buffers and sparse gradients")   # which forwards broadcast; what MyDDP refuses
    part3_buffers(rep, ranks)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
