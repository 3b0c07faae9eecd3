"""Problem 116's cases: MyDDP.no_sync() on real gloo ranks (the handbook's exercise).

The judge drives the student's MyDDP the way the exercise says: the first micro-batches forward and
backward inside `with ddp.no_sync():`, the last one outside, then `ddp.finish_gradient_sync()`.
Every rank's torch.distributed traffic is counted below the names, inside the block (none allowed)
and after it (the all-reduces must come back); "none inside" is read from the process groups' own
operation numbers (judging.ranks.watched), not only from the counter's records, which code in the
solution's process can edit. The gradients are compared, here in the judge, with one process on
the whole batch.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from judging.engine import Case, Fail
from judging.messages import kind
from judging.ranks import check_seen, run_ranks, solution_in_rank, watched
from judging.sandbox import function
from lecture15.handbook_model import global_batch, handbook_model, shard, share_of_loss

FUNCTIONS = ("MyDDP",)
HIDDEN, CAP, BATCH = 32, 4096, 31     # several buckets; 31 samples: unequal shards on 2 and 3 ranks
TOL = 1e-12                           # float64: only the summation order differs
QUIET = "no communication inside no_sync (forward and backward)"
HINT_NO_COMM = "README hint 1: check the flag at the top of _on_grad_ready and return before any all_reduce"
HINT_SYNC = "README hint 2: set the flag back when the block ends (try/finally), so the next backward syncs"
HINT_GRADS = "README hint 3: the .grad sums of every micro-batch are what the synced backward all-reduces"
HINT_DEADLOCK = ("README hint 1: every rank must skip the same all-reduces: the flag is read at the same "
                 "point on every rank")


def prepare() -> None:
    """Import what a rank's MyDDP needs once, in the judge, before any fork."""
    import lecture15.my_ddp  # noqa: F401


def _model() -> torch.nn.Module:
    return handbook_model(HIDDEN).double()


def one_process_grads() -> list[torch.Tensor]:
    """The mean cross-entropy's gradients over the whole batch, one process."""
    x, y = global_batch(BATCH)
    model = _model()
    torch.nn.functional.cross_entropy(model(x.double()), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def _grads(ddp: torch.nn.Module) -> list[Any]:
    return [None if p.grad is None else p.grad.clone() for p in ddp.parameters()]


def _raises_inside(ddp: Any, x: torch.Tensor, y: torch.Tensor, world: int) -> dict[str, Any]:
    """An exception inside no_sync, then a plain synced step."""
    try:
        with ddp.no_sync():
            raise KeyError("the judge's exception inside no_sync")
    except KeyError:
        pass
    with watched() as after:
        share_of_loss(ddp, x, y, BATCH, world).backward()
        ddp.finish_gradient_sync()
    return {"inside": None, "after": after, "grads": _grads(ddp)}


def accumulate_worker(rank: int, world: int, micro: int, scenario: str) -> dict[str, Any]:
    X, Y = global_batch(BATCH)
    X = X.double()
    mine = shard(BATCH, rank, world)
    ddp = function(solution_in_rank(), "MyDDP")(_model(), bucket_bytes=CAP)
    if scenario == "raises":
        return _raises_inside(ddp, X[mine], Y[mine], world)
    pieces = [slice(s.start + mine.start, s.stop + mine.start)
              for s in (shard(mine.stop - mine.start, m, micro) for m in range(micro))]
    out: dict[str, Any] = {}
    for _ in range(2 if scenario == "twice" else 1):
        for p in ddp.parameters():
            p.grad = None
        with watched() as inside:
            with ddp.no_sync():
                for piece in pieces[:-1]:
                    share_of_loss(ddp, X[piece], Y[piece], BATCH, world).backward()
        with watched() as after:
            share_of_loss(ddp, X[pieces[-1]], Y[pieces[-1]], BATCH, world).backward()
            ddp.finish_gradient_sync()
        out = {"inside": inside, "after": after, "grads": _grads(ddp)}
    return out


def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(accumulate_worker, inputs["world_size"], inputs["micro_batches"], inputs["scenario"])


def _check_quiet(data: list[Any]) -> None:
    for rank, res in enumerate(data):
        inside = res["inside"]
        if not inside:
            continue
        if inside["collectives"] or inside["sends"]:
            used = ", ".join(f"{name} ×{count}" for name, count in inside["collectives"].items())
            raise Fail(QUIET, f"rank {rank} called {used or 'send'}", HINT_NO_COMM)
        if inside["ran"]:         # the groups' own count: the counter's records may have been edited
            raise Fail(QUIET, f"rank {rank}'s group ran {inside['ran']} operation(s) in it; the counter's "
                              "records show none", HINT_NO_COMM)


def _check_synced(data: list[Any]) -> None:
    for rank, res in enumerate(data):
        if not res["after"]["collectives"].get("all_reduce") or res["after"]["ran"] == 0:
            raise Fail("all-reduces in the first backward after no_sync", f"rank {rank} called none",
                       HINT_SYNC)


def _check_grads(data: list[Any], what: str) -> None:
    expected = one_process_grads()
    for rank, res in enumerate(data):
        grads = res["grads"]
        if len(grads) != len(expected) or any(not isinstance(g, torch.Tensor) or g.shape != e.shape
                                              for g, e in zip(grads, expected)):
            raise Fail("a gradient in every parameter's .grad", kind(grads), HINT_GRADS)
        diff = max((g - e).abs().max().item() for g, e in zip(grads, expected))
        if not diff <= TOL:
            raise Fail(f"rank {rank}'s gradients = {what}", f"max |difference| {diff:.3g}", HINT_GRADS)


def checker(*parts: str, what: str = f"one process on all {BATCH} samples") -> Any:
    def check(inputs: dict[str, Any], data: list[Any]) -> None:
        if "quiet" in parts:      # first: what ran inside no_sync is known even when the counter is not
            _check_quiet(data)
        check_seen(data, "inside", "after")
        if "synced" in parts:
            _check_synced(data)
        if "grads" in parts:
            _check_grads(data, what)
    return check


def case(name: str, world: int, micro: int, check: Any, hint: str, scenario: str = "once",
         quick: bool = True) -> Case:
    return Case(name, {"world_size": world, "micro_batches": micro, "scenario": scenario}, collect, check,
                hint, quick, ranks=True)


CASES = [
    case("2 ranks, 2 micro-batches: no collective inside no_sync", 2, 2, checker("quiet"), HINT_NO_COMM),
    case("2 ranks: the backward after no_sync all-reduces", 2, 2, checker("quiet", "synced"), HINT_SYNC),
    case("2 ranks, 2 micro-batches: gradients = one process on the whole batch", 2, 2,
         checker("quiet", "grads"), HINT_GRADS),
    case("3 ranks, 3 micro-batches, shards 10, 10, 11: = one process", 3, 3, checker("quiet", "grads"),
         HINT_GRADS),
    case("2 ranks, two accumulation rounds in a row", 2, 2,
         checker("quiet", "synced", "grads", what="one process, in the second accumulation round too"),
         HINT_SYNC, "twice", quick=False),
    case("an exception inside no_sync leaves syncing on", 2, 1,
         checker("synced", "grads", what="one process (syncing is back on after the exception)"), HINT_SYNC,
         "raises"),
]
