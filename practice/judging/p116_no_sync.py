"""Problem 116's cases: MyDDP.no_sync() on real gloo ranks (the handbook's exercise).

The judge drives the student's MyDDP the way the exercise says: the first micro-batches forward and
backward inside `with ddp.no_sync():`, the last one outside, then `ddp.finish_gradient_sync()`.
It counts every torch.distributed call made inside the block (none allowed) and after it (the
all-reduces must come back), and compares the gradients with one process on the whole batch.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from common.dist_count import counting
from judging.engine import Case, Fail, function, kind
from judging.ranks import run_ranks, solution_in_rank
from lecture15.my_ddp_ranks import global_batch, handbook_model, shard, share_of_loss

FUNCTIONS = ("MyDDP",)
HIDDEN, CAP, BATCH = 32, 4096, 31     # several buckets; 31 samples: unequal shards on 2 and 3 ranks
TOL = 1e-12                           # float64: only the summation order differs
HINT_NO_COMM = "README hint 1: check the flag at the top of _on_grad_ready and return before any all_reduce"
HINT_SYNC = "README hint 2: set the flag back when the block ends (try/finally), so the next backward syncs"
HINT_GRADS = "README hint 3: the .grad sums of every micro-batch are what the synced backward all-reduces"


def _model() -> torch.nn.Module:
    return handbook_model(HIDDEN).double()


def one_process_grads(samples: slice | None = None) -> list[torch.Tensor]:
    """The mean cross-entropy's gradients over the whole batch (or `samples` of it), one process."""
    x, y = global_batch(BATCH)
    x = x.double()
    if samples is not None:
        x, y = x[samples], y[samples]
    model = _model()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def accumulate_worker(rank: int, world: int, path: str, micro: int, scenario: str) -> dict[str, Any]:
    solution = solution_in_rank(path)
    X, Y = global_batch(BATCH)
    X = X.double()
    mine = shard(BATCH, rank, world)
    x, y = X[mine], Y[mine]
    ddp = function(solution, "MyDDP")(_model(), bucket_bytes=CAP)
    out: dict[str, Any] = {}
    if scenario == "raises":      # an exception inside no_sync, then a plain synced step
        try:
            with ddp.no_sync():
                raise KeyError("the judge's exception inside no_sync")
        except KeyError:
            pass
        with counting() as after:
            share_of_loss(ddp, x, y, BATCH, world).backward()
            ddp.finish_gradient_sync()
        return {"inside": {}, "after": dict(after.collectives), "grads": [p.grad.clone() for p in ddp.parameters()]}
    pieces = [slice(s.start + mine.start, s.stop + mine.start) for s in (shard(len(x), m, micro) for m in range(micro))]
    rounds = 2 if scenario == "twice" else 1
    for r in range(rounds):
        for p in ddp.parameters():
            p.grad = None
        with counting() as inside:
            with ddp.no_sync():
                for piece in pieces[:-1]:
                    share_of_loss(ddp, X[piece], Y[piece], BATCH, world).backward()
        with counting() as after:
            share_of_loss(ddp, X[pieces[-1]], Y[pieces[-1]], BATCH, world).backward()
            ddp.finish_gradient_sync()
        out = {"inside": dict(inside.collectives), "after": dict(after.collectives),
               "grads": [None if p.grad is None else p.grad.clone() for p in ddp.parameters()], "round": r}
    return out


def _run(solution: ModuleType, world: int, micro: int, scenario: str = "once") -> list[dict[str, Any]]:
    return run_ranks(accumulate_worker, world, solution.__file__, micro, scenario)


def _check_quiet(results: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(results):
        if res["inside"]:
            used = ", ".join(f"dist.{name} ×{count}" for name, count in res["inside"].items())
            raise Fail("no communication inside no_sync (forward and backward)", f"rank {rank} called {used}",
                       HINT_NO_COMM)


def _check_synced(results: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(results):
        if not res["after"].get("all_reduce"):
            raise Fail("all-reduces in the first backward after no_sync", f"rank {rank} called none",
                       HINT_SYNC)


def _check_grads(results: list[dict[str, Any]], expected: list[torch.Tensor], what: str) -> None:
    for rank, res in enumerate(results):
        grads = res["grads"]
        if any(not isinstance(g, torch.Tensor) for g in grads):
            raise Fail("a gradient in every parameter's .grad", kind(grads), HINT_GRADS)
        diff = max((g - e).abs().max().item() for g, e in zip(grads, expected))
        if diff > TOL:
            raise Fail(f"rank {rank}'s gradients = {what}", f"max |difference| {diff:.3g}", HINT_GRADS)


def quiet_inside(solution: ModuleType) -> None:
    _check_quiet(_run(solution, 2, 2))


def syncs_after(solution: ModuleType) -> None:
    results = _run(solution, 2, 2)
    _check_quiet(results)
    _check_synced(results)


def two_ranks(solution: ModuleType) -> None:
    results = _run(solution, 2, 2)
    _check_quiet(results)
    _check_grads(results, one_process_grads(), f"one process on all {BATCH} samples")


def three_ranks(solution: ModuleType) -> None:
    results = _run(solution, 3, 3)
    _check_quiet(results)
    _check_grads(results, one_process_grads(), f"one process on all {BATCH} samples")


def two_rounds(solution: ModuleType) -> None:
    results = _run(solution, 2, 2, "twice")
    _check_quiet(results)
    _check_synced(results)
    _check_grads(results, one_process_grads(), "one process, in the second accumulation round too")


def exception_inside(solution: ModuleType) -> None:
    results = _run(solution, 2, 1, "raises")
    _check_synced(results)
    _check_grads(results, one_process_grads(), "one process (syncing is back on after the exception)")


CASES = [
    Case("2 ranks, 2 micro-batches: no collective inside no_sync", quiet_inside, HINT_NO_COMM),
    Case("2 ranks: the backward after no_sync all-reduces", syncs_after, HINT_SYNC),
    Case("2 ranks, 2 micro-batches: gradients = one process on the whole batch", two_ranks, HINT_GRADS),
    Case("3 ranks, 3 micro-batches, shards 10, 10, 11: = one process", three_ranks, HINT_GRADS),
    Case("2 ranks, two accumulation rounds in a row", two_rounds, HINT_SYNC, quick=False),
    Case("an exception inside no_sync leaves syncing on", exception_inside, HINT_SYNC),
]
