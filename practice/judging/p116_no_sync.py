"""Problem 116's cases: MyDDP.no_sync() on real gloo ranks (the handbook's exercise).

The judge drives the student's MyDDP the way the exercise says: the first micro-batches forward and
backward inside `with ddp.no_sync():`, the last one outside, then `ddp.finish_gradient_sync()`;
two rounds in a row, a block nested in another, a second model synchronising inside the first
one's block, and an exception raised inside the block (it must reach the caller).
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

from judging.engine import Case
from judging.messages import kind
from judging.ranks import check_seen, run_ranks, solution_in_rank, watched
from judging.sandbox import Fail, function
from lecture15.handbook_model import global_batch, handbook_model, shard, share_of_loss

FUNCTIONS = ("MyDDP",)
HIDDEN, CAP, BATCH = 32, 4096, 31     # several buckets; 31 samples: unequal shards on 2 and 3 ranks
TOL = 1e-12                           # float64: only the summation order differs
QUIET = "no communication inside no_sync (forward and backward)"
HINT_NO_COMM = "README hint 1: check the flag at the top of _on_grad_ready and return before any all_reduce"
HINT_SYNC = ("README hint 1: after the block the next backward all-reduces: set the flag back, and inside "
             "no_sync return BEFORE counting the gradient in its bucket (the counts must start afresh)")
HINT_FINALLY = ("README hint 2: set the flag back in a finally: block, so that an exception does not leave "
                "it off")
HINT_REACH = ("README hint 2: no_sync must not catch the exception: try/finally, no except (the "
              "contextmanager raises it again at the yield)")
HINT_NESTED = ("README hint 2: restore the flag's PREVIOUS value, not True: a block nested in another "
               "must not turn syncing back on")
HINT_INSTANCE = ("README hint 1: the flag belongs to the instance (self.…), not to the class or a global: "
                 "one model's no_sync leaves another syncing")
HINT_GRADS = "README hint 3: the .grad sums of every micro-batch are what the synced backward all-reduces"
HINT_MEAN = ("the synced backward's all-reduce SUMS the ranks' .grad: finish_gradient_sync divides by the "
             "world size (the worked example's ÷ 2)")
HINT_DEADLOCK = ("README hint 1: every rank must skip the same all-reduces: the flag is read at the same "
                 "point on every rank")
HINT_AUTOGRAD = ("README hint 1: no_sync turns off the all-reduce, not autograd: no torch.no_grad() in it "
                 "(the backward inside still needs the graph, and .grad must accumulate)")
# a backward inside a no_grad() block: the loss has no graph
ERROR_HINTS = [("does not require grad and does not have a grad_fn", HINT_AUTOGRAD),
               # MyDDP's own check: a backward whose per-backward state was never reset
               ("buckets never completed", HINT_SYNC)]
ROUNDS = 2                            # accumulation rounds in a row in the plain scenario


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


class _Rank:
    """One rank's batch, micro-batches and MyDDP factory for a scenario."""

    def __init__(self, rank: int, world: int, micro: int) -> None:
        X, self.Y = global_batch(BATCH)
        self.X, self.world = X.double(), world
        mine = shard(BATCH, rank, world)
        self.mine = mine
        self.pieces = [slice(s.start + mine.start, s.stop + mine.start)
                       for s in (shard(mine.stop - mine.start, m, micro) for m in range(micro))]
        self.MyDDP = function(solution_in_rank(), "MyDDP")

    def model(self) -> Any:
        return self.MyDDP(_model(), bucket_bytes=CAP)

    def backward(self, ddp: Any, piece: slice) -> None:
        share_of_loss(ddp, self.X[piece], self.Y[piece], BATCH, self.world).backward()

    def synced(self, ddp: Any, piece: slice) -> dict[str, Any]:
        """The last micro-batch's backward outside no_sync, watched."""
        with watched() as after:
            self.backward(ddp, piece)
            ddp.finish_gradient_sync()
        return after


def _plain(me: _Rank) -> dict[str, Any]:
    """ROUNDS rounds: the first micro-batches inside no_sync, the last one outside."""
    ddp, out = me.model(), {}
    for round_ in range(1, ROUNDS + 1):
        for p in ddp.parameters():
            p.grad = None
        with watched() as inside:
            with ddp.no_sync():
                for piece in me.pieces[:-1]:
                    me.backward(ddp, piece)
        out.update({f"inside{round_}": inside, f"after{round_}": me.synced(ddp, me.pieces[-1]),
                    f"grads{round_}": _grads(ddp)})
    return out


def _raises(me: _Rank) -> dict[str, Any]:
    """An exception inside no_sync: it must come out of the block, and syncing be back on."""
    ddp, reached = me.model(), False
    try:
        with ddp.no_sync():
            raise KeyError("the judge's exception inside no_sync")
    except KeyError:
        reached = True
    return {"reached": reached, "after1": me.synced(ddp, me.mine), "grads1": _grads(ddp)}


def _nested(me: _Rank) -> dict[str, Any]:
    """A block inside a block: quiet in the inner one and in the rest of the outer one."""
    ddp = me.model()
    with ddp.no_sync():
        with watched() as before:                 # a .grad already there when the inner block starts
            me.backward(ddp, me.pieces[0])
        with watched() as inner:
            with ddp.no_sync():
                me.backward(ddp, me.pieces[1])
        with watched() as outer:
            me.backward(ddp, me.pieces[2])
    return {"before": before, "inside1": inner, "outer": outer, "after1": me.synced(ddp, me.pieces[3]),
            "grads1": _grads(ddp)}


def _two(me: _Rank) -> dict[str, Any]:
    """Model b's whole step inside model a's no_sync block: b syncs, a does not."""
    a, b = me.model(), me.model()
    with a.no_sync():
        with watched() as inside:
            me.backward(a, me.pieces[0])
        other = me.synced(b, me.mine)
    return {"inside1": inside, "other": other, "other_grads": _grads(b), "after1": me.synced(a, me.pieces[1]),
            "grads1": _grads(a)}


SCENARIOS = {"plain": _plain, "raises": _raises, "nested": _nested, "two": _two}


def accumulate_worker(rank: int, world: int, micro: int, scenario: str) -> dict[str, Any]:
    return SCENARIOS[scenario](_Rank(rank, world, micro))


def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(accumulate_worker, inputs["world_size"], inputs["micro_batches"], inputs["scenario"])


# ---- in the judge's process: one check per property, each with its hint -----------------------------------
def _check_quiet(data: list[Any], key: str, hint: str, expected: str = QUIET) -> None:
    for rank, res in enumerate(data):
        inside = res.get(key)
        if not inside:
            continue
        if inside["collectives"] or inside["sends"]:
            used = ", ".join(f"{name} ×{count}" for name, count in inside["collectives"].items())
            raise Fail(expected, f"rank {rank} called {used or 'send'}", hint)
        if inside["ran"]:         # the groups' own count: the counter's records may have been edited
            raise Fail(expected, f"rank {rank}'s group ran {inside['ran']} operation(s) in it; the "
                                      "counter's records show none", hint)


def _check_synced(data: list[Any], key: str, hint: str, what: str) -> None:
    for rank, res in enumerate(data):
        if not res[key]["collectives"].get("all_reduce") or res[key]["ran"] == 0:
            raise Fail(f"all-reduces in {what}", f"rank {rank} called none", hint)


def _check_grads(data: list[Any], key: str, what: str) -> None:
    expected = one_process_grads()
    for rank, res in enumerate(data):
        grads = res[key]
        if len(grads) != len(expected) or any(not isinstance(g, torch.Tensor) or g.shape != e.shape
                                              for g, e in zip(grads, expected)):
            raise Fail("a gradient in every parameter's .grad", kind(grads), HINT_GRADS)
        diff = max((g - e).abs().max().item() for g, e in zip(grads, expected))
        if not diff <= TOL:
            world = len(data)     # the ranks' sum, not their mean: the division by W left out
            summed = max((g - world * e).abs().max().item() for g, e in zip(grads, expected)) <= TOL * world
            raise Fail(f"rank {rank}'s gradients = {what}", f"max |difference| {diff:.3g}"
                       + (f": {world}× it, the ranks' sum" if summed else ""),
                       HINT_MEAN if summed else HINT_GRADS)


WHOLE = f"one process on all {BATCH} samples"


def check_plain(inputs: dict[str, Any], data: list[Any]) -> None:
    # quiet first: what ran inside no_sync is known even when the counter's records are not
    for r in range(1, ROUNDS + 1):
        _check_quiet(data, f"inside{r}", HINT_NO_COMM)
    check_seen(data, *(f"{k}{r}" for r in range(1, ROUNDS + 1) for k in ("inside", "after")))
    for r in range(1, ROUNDS + 1):
        _check_synced(data, f"after{r}", HINT_SYNC, f"the backward after no_sync (round {r})")
        _check_grads(data, f"grads{r}", WHOLE + (f" (round {r})" if r > 1 else ""))


def check_raises(inputs: dict[str, Any], data: list[Any]) -> None:
    for rank, res in enumerate(data):
        if res["reached"] is not True:
            raise Fail("the KeyError raised inside no_sync reaches the code around the with block",
                       f"rank {rank}: it never came out (no_sync swallowed it)", HINT_REACH)
    check_seen(data, "after1")
    _check_synced(data, "after1", HINT_FINALLY, "the backward after an exception inside no_sync")
    _check_grads(data, "grads1", WHOLE + " (syncing is back on after the exception)")


def check_nested(inputs: dict[str, Any], data: list[Any]) -> None:
    _check_quiet(data, "before", HINT_NO_COMM)
    # the plain case already showed a single block quiet: noise here is the nesting's (a flag flipped)
    _check_quiet(data, "inside1", HINT_NESTED, "no communication in a no_sync block inside another")
    # quiet in the inner block, not after it: the flag the inner block restored
    _check_quiet(data, "outer", HINT_NESTED, "no communication in the outer block after the inner one ended")
    check_seen(data, "before", "inside1", "outer", "after1")
    _check_synced(data, "after1", HINT_NESTED, "the backward after the outer block (syncing back on)")
    _check_grads(data, "grads1", WHOLE)


def check_two(inputs: dict[str, Any], data: list[Any]) -> None:
    _check_quiet(data, "inside1", HINT_NO_COMM)
    check_seen(data, "inside1", "other", "after1")
    _check_synced(data, "other", HINT_INSTANCE, "model b's backward inside model a's no_sync")
    _check_grads(data, "other_grads", f"{WHOLE} for model b")
    _check_synced(data, "after1", HINT_SYNC, "model a's backward after its no_sync")
    _check_grads(data, "grads1", f"{WHOLE} for model a")


CHECKS = {"plain": check_plain, "raises": check_raises, "nested": check_nested, "two": check_two}


def case(name: str, world: int, micro: int, scenario: str, hint: str, quick: bool = True) -> Case:
    return Case(name, {"world_size": world, "micro_batches": micro, "scenario": scenario}, collect,
                CHECKS[scenario], hint, quick, ranks=True)


CASES = [
    case(f"2 ranks, 2 micro-batches, {ROUNDS} rounds: nothing inside no_sync, all-reduces after, gradients = "
         "one process", 2, 2, "plain", HINT_NO_COMM),
    case("3 ranks, 3 micro-batches, shards 10, 10, 11: = one process", 3, 3, "plain", HINT_GRADS),
    case("an exception inside no_sync reaches the caller and leaves syncing on", 2, 1, "raises",
         HINT_FINALLY),
    case("no_sync inside no_sync, after a backward in the outer block: no communication until the outer "
         "block ends, and the earlier .grad kept", 2, 4, "nested", HINT_NESTED),
    case("two models: model b syncs inside model a's no_sync", 2, 2, "two", HINT_INSTANCE),
]
