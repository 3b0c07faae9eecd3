"""MyDDP (code/lecture15/my_ddp.py) on real ranks, against single-process training and PyTorch's DDP.

One launch per world size runs every rank-side check and returns plain data (numpy/lists); the
tests below assert on it. References are independent of MyDDP: a single process on the whole
batch, torch's own DistributedDataParallel, and torch's bucket assignment function.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import load_script
from torch.nn.parallel import DistributedDataParallel

from common.launch import RankError, launch
from lecture15.handbook_model import global_batch, handbook_model, shard, share_of_loss
from lecture15.my_ddp import MyDDP

# The staged models and the rank functions that hold MyDDP to DDP's rules live in their script.
VS_DDP = load_script("lecture15/my_ddp_vs_ddp.py")
FORWARD_KINDS, RankOrderedBranches, ReversedStack = (VS_DDP.FORWARD_KINDS, VS_DDP.RankOrderedBranches,
                                                     VS_DDP.ReversedStack)
buffer_sync_rank, no_sync_placement_rank = VS_DDP.buffer_sync_rank, VS_DDP.no_sync_placement_rank

BATCH, STEPS, CAP = 31, 4, 64 * 1024     # 31: shards are unequal on 2 and 3 ranks
TOL64 = 1e-12                             # float64: only summation order differs


def _params(module: torch.nn.Module) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in module.parameters()]


def _train(rank: int, world: int, accumulate: bool) -> dict[str, Any]:
    """STEPS SGD steps of the handbook model in float64: single process, MyDDP, PyTorch DDP."""
    X, Y = global_batch(BATCH)
    X = X.double()
    local = shard(BATCH, rank, world)
    x, y = X[local], Y[local]
    ref, mine = handbook_model().double(), MyDDP(handbook_model().double(), bucket_bytes=CAP)
    official = DistributedDataParallel(handbook_model().double())
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ref, mine, official)]
    launches = []
    for _ in range(STEPS):
        for opt in opts:
            opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(X), Y).backward()
        before = mine.allreduces_launched
        for model in (mine, official):
            if accumulate:
                first, second = shard(len(x), 0, 2), shard(len(x), 1, 2)
                with model.no_sync():
                    share_of_loss(model, x[first], y[first], BATCH, world).backward()
                share_of_loss(model, x[second], y[second], BATCH, world).backward()
            else:
                share_of_loss(model, x, y, BATCH, world).backward()
        launches.append(mine.allreduces_launched - before)
        for opt in opts:
            opt.step()
    out = {"ref": _params(ref), "mine": _params(mine.module), "official": _params(official.module),
           "launches": launches, "buckets": [b.names for b in mine.buckets]}
    del official, mine
    return out


def _order(rank: int, world: int) -> dict[str, Any]:
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(rank), dtype=torch.float64)
    stack = MyDDP(ReversedStack().double(), bucket_bytes=32 * 33 * 8)
    for _ in range(2):
        stack(x).sum().backward()
    out: dict[str, Any] = {"stack": (stack.ready_order, stack.launch_order)}
    X = torch.randn(3 * world, 16, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ref = RankOrderedBranches().double()
    (ref(X).sum() / len(X)).backward()
    for naive in (False, True):
        model = MyDDP(RankOrderedBranches().double(), bucket_bytes=16 * 17 * 8, naive_ready_order=naive)
        (model(X[shard(len(X), rank, world)]).sum() * world / len(X)).backward()
        out[naive] = {"ready": model.ready_order, "launch": model.launch_order,
                      "grads": [p.grad.numpy().copy() for p in model.parameters()],
                      "ref": [p.grad.numpy().copy() for p in ref.parameters()]}
    return out


def _broadcast_and_frozen(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(100 + rank)   # a different initialisation on every rank
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3))
    model[1].running_mean.fill_(float(rank + 1))
    model[0].weight.requires_grad_(False)
    before = _params(model) + [model[1].running_mean.numpy().copy()]
    mine = MyDDP(model, bucket_bytes=1)    # cap 1 byte: one parameter per bucket
    after = _params(model) + [model[1].running_mean.numpy().copy()]
    frozen_before = model[0].weight.detach().clone()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    torch.nn.functional.cross_entropy(mine(torch.randn(4, 8)), torch.tensor([0, 1, 2, 0])).backward()
    opt.step()
    return {"before": before, "after": after, "bucketed": [n for b in mine.buckets for n in b.names],
            "frozen_grad_is_none": model[0].weight.grad is None,
            "frozen_unchanged": bool(torch.equal(frozen_before, model[0].weight)),
            "launches": mine.allreduces_launched, "grads": [p.grad.numpy().copy() for p in model.parameters()
                                                             if p.requires_grad]}


def _semantics(rank: int, world: int) -> dict[str, Any]:
    x = torch.randn(4, 64)
    mine = MyDDP(handbook_model())
    loss = mine(x).sum()
    with mine.no_sync():     # only the backward inside: like PyTorch DDP, this still synchronises
        loss.backward()
    backward_only = mine.allreduces_launched
    grads = [p.grad.clone() for p in mine.parameters()]
    mine.finish_gradient_sync()   # the handbook's explicit call: already done at end of backward
    finish_again_is_noop = all(torch.equal(g, p.grad) for g, p in zip(grads, mine.parameters()))
    unused = MyDDP(torch.nn.ModuleDict({"used": torch.nn.Linear(4, 4), "spare": torch.nn.Linear(4, 4)}),
                   bucket_bytes=1)
    try:
        unused.module["used"](torch.randn(2, 4)).sum().backward()
        message = ""
    except RuntimeError as err:
        message = str(err)
    return {"backward_only": backward_only, "buckets": len(mine.buckets), "unused_message": message,
            "finish_again_is_noop": finish_again_is_noop and mine.allreduces_launched == backward_only}


def _all_checks(rank: int, world: int) -> dict[str, Any]:
    return {"plain": _train(rank, world, False), "no_sync": _train(rank, world, True),
            "order": _order(rank, world), "broadcast": _broadcast_and_frozen(rank, world),
            "semantics": _semantics(rank, world), "buffers": buffer_sync_rank(rank, world),
            "placement": no_sync_placement_rank(rank, world), "sparse_hook": _sparse_in_hook(rank, world)}


class _FunctionalSparse(torch.nn.Module):
    """A sparse gradient the constructor cannot see: F.embedding(sparse=True) on a bare Parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 4))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(idx, self.table, sparse=True)


def _sparse_in_hook(rank: int, world: int) -> str:
    model = MyDDP(_FunctionalSparse())
    try:
        model(torch.tensor([1, 2])).sum().backward()
    except RuntimeError as err:
        return str(err)
    return "accepted"


@functools.lru_cache(maxsize=None)
def _run(world: int) -> list[dict[str, Any]]:
    return launch(_all_checks, world)


WORLDS = [2, 3]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("mode", ["plain", "no_sync"])
def test_matches_single_process_and_pytorch_ddp(world: int, mode: str) -> None:
    ranks = _run(world)
    for r in ranks:
        assert _max_diff(r[mode]["mine"], r[mode]["ref"]) < TOL64
        assert _max_diff(r[mode]["mine"], r[mode]["official"]) < TOL64
        assert _max_diff(r[mode]["mine"], ranks[0][mode]["mine"]) == 0.0   # replicas bit-identical
    # The reference moved: the comparison is not between untouched copies.
    assert _max_diff(ranks[0][mode]["ref"], _params(handbook_model().double())) > 1e-3


@pytest.mark.parametrize("world", WORLDS)
def test_no_sync_skips_communication(world: int) -> None:
    ranks = _run(world)
    buckets = len(ranks[0]["plain"]["buckets"])
    assert buckets == 2
    assert ranks[0]["plain"]["launches"] == [buckets] * STEPS
    assert ranks[0]["no_sync"]["launches"] == [buckets] * STEPS     # the no_sync micro-step launched none


def test_buckets_follow_pytorchs_rule() -> None:
    params = [p.detach() for p in handbook_model().parameters()][::-1]
    names = [n for n, _ in handbook_model().named_parameters()][::-1]
    theirs, _ = dist._compute_bucket_assignment_by_size(params, [CAP])
    assert _run(2)[0]["plain"]["buckets"] == [[names[i] for i in b] for b in theirs]


@pytest.mark.parametrize("world", WORLDS)
def test_launch_in_bucket_index_order_when_gradients_come_out_of_order(world: int) -> None:
    ranks = _run(world)
    for r in ranks:
        ready, launched = r["order"]["stack"]
        assert ready == [3, 2, 1, 0] * 2        # registered in reverse of use: bucket 0 ready last
        assert launched == [0, 1, 2, 3] * 2
        assert r["order"][False]["launch"] == [0, 1]
        assert _max_diff(r["order"][False]["grads"], r["order"][False]["ref"]) < TOL64
    # Odd ranks really do complete bucket 1 first, so ready order would differ across ranks ...
    assert ranks[1]["order"][False]["ready"] == [1, 0] and ranks[0]["order"][False]["ready"] == [0, 1]
    # ... and the naive rule then sums unrelated buckets: the gradients are wrong.
    assert ranks[1]["order"][True]["launch"] == [1, 0]
    assert _max_diff(ranks[0]["order"][True]["grads"], ranks[0]["order"][True]["ref"]) > 1e-3


@pytest.mark.parametrize("world", WORLDS)
def test_broadcast_at_construction_and_frozen_parameters(world: int) -> None:
    ranks = _run(world)
    b = [r["broadcast"] for r in ranks]
    assert _max_diff(b[0]["before"], b[1]["before"]) > 1e-2           # the ranks did start different
    for r in b:
        assert _max_diff(r["after"], b[0]["before"]) == 0.0            # everyone now has rank 0's
        assert r["bucketed"] == ["2.bias", "2.weight", "1.bias", "1.weight", "0.bias"]   # no 0.weight
        assert r["frozen_grad_is_none"] and r["frozen_unchanged"]
        assert r["launches"] == 5
        assert _max_diff(r["grads"], b[0]["grads"]) == 0.0


def test_backward_only_in_no_sync_still_syncs_and_unused_parameters_raise() -> None:
    for r in _run(2):
        assert r["semantics"]["backward_only"] == r["semantics"]["buckets"]
        assert r["semantics"]["finish_again_is_noop"]
        assert "spare.weight" in r["semantics"]["unused_message"]
        assert "'used." not in r["semantics"]["unused_message"]


def test_needs_a_process_group() -> None:
    with pytest.raises((RuntimeError, ValueError), match="process group"):
        MyDDP(torch.nn.Linear(2, 2))


def test_rank_error_from_a_bad_worker_is_reported() -> None:
    with pytest.raises(RankError,
                       match="rank 0 failed: ValueError: MyDDP needs all trainable parameters on one dtype"):
        launch(_mixed_dtypes, 1)


def _mixed_dtypes(rank: int, world: int) -> None:
    MyDDP(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).double()))


def test_buffers_are_broadcast_in_the_same_forwards_as_pytorch_ddp() -> None:
    for world in WORLDS:
        for r in _run(world)[1:]:   # rank 0's buffer is the source: only other ranks show a broadcast
            mine, theirs = r["buffers"]["MyDDP"], r["buffers"]["PyTorch DDP"]
            assert mine == theirs, list(zip(FORWARD_KINDS, mine, theirs))
            # What torch 2.13's DDP does (the reference above): a forward broadcasts iff the previous
            # forward could synchronise gradients (grad enabled, not under no_sync), or it is the first.
            assert theirs == [True, True, True, False, False, True, True, True, False, False, True, True]
            assert r["buffers"]["my_syncs"] == sum(mine)


def test_no_sync_decided_at_forward_like_pytorch_ddp() -> None:
    for r in _run(2):
        assert r["placement"]["MyDDP"] == r["placement"]["PyTorch DDP"] == [False, False, True]


def test_sparse_gradients_are_refused_by_name() -> None:
    r = _run(2)[0]
    message = r["buffers"]["sparse"]
    assert message.startswith("MyDDP does not support sparse gradients: parameter '0.weight'"), message
    assert "\n" not in message
    assert r["sparse_hook"] == "MyDDP does not support sparse gradients: parameter 'table' got one"
