"""Problem 114's cases: HW5's partition_indices, average_gradients and train_step.

partition_indices runs in the judge's process (it needs no communication); average_gradients and
train_step run on real gloo ranks. Expected values: lecture14.data_parallel (the suite's HW5 and
its one-process training), and plain arithmetic on the gradients each rank was given.
"""

from __future__ import annotations

import numbers
import random
from types import ModuleType
from typing import Any

import torch
from torch import nn

from judging.engine import Case, Fail, function, kind, show
from judging.ranks import run_ranks, solution_in_rank
from lecture14 import data_parallel as dp

FUNCTIONS = ("partition_indices", "average_gradients", "train_step")
TOL = 1e-10          # float64: ranks and one process differ only in summation order
D_IN, HIDDEN, LR, STEPS = 4, 8, 0.1, 3

HINT_PART = "README hint 1: shuffle list(range(size)) with random.Random(seed); size // W each, +1 for the first size % W"
HINT_AVG = "README hint 2: all_reduce SUM each grad in place, then divide by the world size; skip grad None"
HINT_STEP = "README hint 3: zero_grad, forward, loss, backward, average_gradients, step; return loss.item()"


def prepare() -> None:
    """Build one optimizer in the judge before any fork: its imports (~1 s) are then inherited."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)


# ---- partition_indices, in the judge's process -----------------------------------------------------
def _split(solution: ModuleType, size: int, world: int, seed: int) -> list[list[int]]:
    fn = function(solution, "partition_indices")
    parts = []
    for rank in range(world):
        got = fn(size, world, rank, seed)
        if not (isinstance(got, list) and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in got)):
            raise Fail(f"a list of ints (rank {rank}'s sample indices)", kind(got), HINT_PART)
        parts.append([int(i) for i in got])
    return parts


def _check_split(solution: ModuleType, size: int, world: int, seed: int = 0) -> None:
    parts = _split(solution, size, world, seed)
    sizes = dp.partition_sizes(size, world)
    if [len(p) for p in parts] != sizes:
        raise Fail(f"shard sizes {sizes} for {size} samples on {world} ranks", f"{[len(p) for p in parts]}", HINT_PART)
    every = sorted(i for p in parts for i in p)
    if every != list(range(size)):
        raise Fail(f"every index 0…{size - 1} exactly once over the ranks", show(every), HINT_PART)


def split_uneven(solution: ModuleType) -> None:
    _check_split(solution, 10, 3)
    _check_split(solution, 10, 4)


def split_small(solution: ModuleType) -> None:
    _check_split(solution, 2, 4)
    _check_split(solution, 0, 3)
    _check_split(solution, 7, 1)


def split_is_the_seeded_shuffle(solution: ModuleType) -> None:
    for size, world, seed in [(10, 3, 0), (25, 4, 7), (16, 2, 123)]:
        got = _split(solution, size, world, seed)
        expected = [dp.partition_indices(size, world, r, seed) for r in range(world)]
        if got != expected:
            raise Fail(f"size {size}, W = {world}, seed {seed}: {show(expected, 60)}", show(got, 60),
                       HINT_PART + " (one shuffle, then contiguous slices)")


def split_leaves_global_random(solution: ModuleType) -> None:
    random.seed(2024)
    expected = random.random()
    random.seed(2024)
    _split(solution, 20, 4, 5)
    got = random.random()
    if got != expected:
        raise Fail("the global random module's state untouched", "it changed (random.seed or random.shuffle?)",
                   "README hint 1: a local random.Random(seed) leaves the global generator alone")


# ---- average_gradients and train_step, on real ranks ---------------------------------------------
class _Model(nn.Module):
    """A float64 linear layer plus one that forward never uses (its grad stays None)."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(3, 2).double()
        self.unused = nn.Linear(2, 2).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def _rank_grads(rank: int, shape: torch.Size, index: int) -> torch.Tensor:
    """Rank r's gradient for parameter `index`: integers, so every summation order is exact."""
    return torch.arange(shape.numel(), dtype=torch.float64).reshape(shape) * (rank + 1) + 10 * index


def average_worker(rank: int, world: int, path: str) -> dict[str, Any]:
    solution = solution_in_rank(path)
    torch.manual_seed(0)
    model = _Model()
    for i, p in enumerate(model.used.parameters()):
        p.grad = _rank_grads(rank, p.shape, i)
    returned = function(solution, "average_gradients")(model)
    return {"grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
            "returned": returned}


def _check_average(world: int) -> Any:
    def run(solution: ModuleType) -> None:
        results = run_ranks(average_worker, world, solution.__file__)
        shapes = [p.shape for p in _Model().used.parameters()]
        expected = [sum(_rank_grads(r, s, i) for r in range(world)) / world for i, s in enumerate(shapes)]
        for rank, res in enumerate(results):
            grads = res["grads"]
            if grads[2] is not None or grads[3] is not None:
                raise Fail("grad None left as None (a parameter forward did not use)",
                           f"rank {rank}: {kind(grads[2])}", HINT_AVG)
            for i, (g, e) in enumerate(zip(grads[:2], expected)):
                if g is None or g.shape != e.shape or not torch.allclose(g, e, rtol=0, atol=TOL):
                    got = "None" if g is None else show(g.flatten().tolist(), 60)
                    raise Fail(f"rank {rank}, parameter {i}: the mean over {world} ranks "
                               f"{show(e.flatten().tolist(), 50)}", got, HINT_AVG)
    return run


def train_worker(rank: int, world: int, path: str, size: int, uneven_loss: bool) -> dict[str, Any]:
    solution = solution_in_rank(path)
    x, y = dp.make_regression_data(size, D_IN, seed=3)
    model = dp.make_mlp(D_IN, HIDDEN, seed=4)
    shard = dp.partition_indices(size, world, rank, seed=5)      # the suite's split, not the student's
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    if uneven_loss:   # this rank's share of the whole batch's mean, × W (average_gradients divides by W)
        def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return nn.functional.mse_loss(out, target, reduction="sum") * world / size
    else:
        loss_fn = nn.functional.mse_loss
    step = function(solution, "train_step")
    losses = [step(model, optimizer, loss_fn, x[shard], y[shard]) for _ in range(STEPS)]
    return {"params": dp.flat_params(model), "losses": losses}


def _check_train(world: int, size: int, uneven_loss: bool) -> Any:
    def run(solution: ModuleType) -> None:
        results = run_ranks(train_worker, world, solution.__file__, size, uneven_loss)
        x, y = dp.make_regression_data(size, D_IN, seed=3)
        reference, _ = dp.train_full_batch(dp.make_mlp(D_IN, HIDDEN, seed=4), x, y, STEPS, LR)
        for rank, res in enumerate(results):
            losses = res["losses"]
            if not all(isinstance(v, float) for v in losses):
                raise Fail("a float: this rank's loss (loss.item())", kind(losses[0]), HINT_STEP)
            shard = dp.partition_indices(size, world, rank, seed=5)
            model = dp.make_mlp(D_IN, HIDDEN, seed=4)   # the weights every rank starts from
            with torch.no_grad():
                out = model(x[shard])
                first = (nn.functional.mse_loss(out, y[shard], reduction="sum") * world / size if uneven_loss
                         else nn.functional.mse_loss(out, y[shard])).item()
            if abs(losses[0] - first) > TOL * max(1.0, abs(first)):
                raise Fail(f"rank {rank}'s first loss {first:.10g} (its loss_fn on its shard)", f"{losses[0]:.10g}",
                           HINT_STEP)
            diff = dp.max_abs_diff(res["params"], dp.flat_params(reference))
            if diff > TOL:
                raise Fail(f"rank {rank}'s parameters after {STEPS} steps = one process on all {size} samples",
                           f"max |difference| {diff:.3g}", HINT_STEP)
    return run


CASES = [
    Case("partition: 10 samples on 3 and on 4 ranks (4, 3, 3 and 3, 3, 2, 2), each once", split_uneven, HINT_PART),
    Case("partition: fewer samples than ranks, none, one rank", split_small, HINT_PART),
    Case("partition: the split is random.Random(seed)'s shuffle, sliced in rank order",
         split_is_the_seeded_shuffle, HINT_PART),
    Case("partition: the global random state is left alone", split_leaves_global_random, HINT_PART),
    Case("average_gradients on 2 real ranks: the mean, grad None skipped", _check_average(2), HINT_AVG),
    Case("average_gradients on 3 real ranks", _check_average(3), HINT_AVG, quick=False),
    Case("train_step on 2 real ranks, equal shards: 3 steps = one process", _check_train(2, 16, False), HINT_STEP),
    Case("train_step on 3 real ranks, shards 4, 3, 3 (loss = share of the batch mean): = one process",
         _check_train(3, 10, True), HINT_STEP),
]
