"""Problem 114's cases: HW5's partition_indices, average_gradients and train_step.

partition_indices runs in the solution's process without ranks; average_gradients and train_step
on real gloo ranks. Expected values: lecture14.data_parallel (the suite's HW5 split), and one
process trained on the whole batch, computed here in the judge. The training loss is an
asymmetric squared error, so a train_step that calls loss_fn(targets, outputs) is caught.
"""

from __future__ import annotations

import numbers
import random
from types import ModuleType
from typing import Any

import torch
from torch import nn

from judging.engine import Case, Fail
from judging.messages import kind, show
from judging.ranks import run_ranks, solution_in_rank
from judging.sandbox import function
from lecture14 import data_parallel as dp

FUNCTIONS = ("partition_indices", "average_gradients", "train_step")
TOL = 1e-10          # float64: ranks and one process differ only in summation order
D_IN, HIDDEN, LR, STEPS = 4, 8, 0.1, 3
UNDER, OVER = 1.0, 0.2   # the loss's weight on (output − target)² below and above the target

HINT_PART = ("README hint 1: shuffle list(range(size)) with random.Random(seed); size // W each, "
             "+1 for the first size % W")
HINT_AVG = "README hint 2: all_reduce SUM each grad in place, then divide by the world size; skip grad None"
HINT_STEP = ("README hint 3: zero_grad, forward, loss_fn(outputs, targets), backward, average_gradients, "
             "step; return this rank's loss.item()")
HINT_DEADLOCK = (
    "README hint 2: every rank must call the same all-reduces in the same order (skip grad None only)"
)


def prepare() -> None:
    """Build one optimizer in the judge before any fork: its imports (~1 s) are then inherited."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)


def share_loss(outputs: torch.Tensor, targets: torch.Tensor, world: int, size: int) -> torch.Tensor:
    """This rank's share of the whole batch's mean asymmetric squared error, × W (the average divides
    by W): under-predictions cost 1, over-predictions 0.2, so the arguments' order matters."""
    diff = outputs - targets
    return (torch.where(diff < 0, UNDER, OVER) * diff ** 2).sum() * world / size


# ---- partition_indices, in the solution's process ----------------------------------------------------------
def collect_split(solution: ModuleType, inputs: dict[str, Any]) -> list[list[Any]]:
    fn = function(solution, "partition_indices")
    return [[fn(size, world, rank, seed) for rank in range(world)] for size, world, seed in inputs["calls"]]


def _parts(got: list[Any], size: int, world: int, seed: int) -> list[list[int]]:
    for rank, part in enumerate(got):
        if not (isinstance(part, list)
                and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in part)):
            raise Fail(f"a list of ints (rank {rank}'s sample indices)", kind(part), HINT_PART,
                       {"size": size, "world_size": world, "rank": rank, "seed": seed})
    return [[int(i) for i in p] for p in got]


def check_split_sizes(inputs: dict[str, Any], data: list[Any]) -> None:
    for (size, world, seed), got in zip(inputs["calls"], data):
        parts, shown = _parts(got, size, world, seed), {"size": size, "world_size": world, "seed": seed}
        sizes = dp.partition_sizes(size, world)
        if [len(p) for p in parts] != sizes:
            raise Fail(f"shard sizes {sizes} for {size} samples on {world} ranks",
                       f"{[len(p) for p in parts]}", HINT_PART, shown)
        every = sorted(i for p in parts for i in p)
        if every != list(range(size)):
            raise Fail(f"every index 0…{size - 1} exactly once over the ranks", show(every), HINT_PART, shown)


def check_split_shuffle(inputs: dict[str, Any], data: list[Any]) -> None:
    for (size, world, seed), got in zip(inputs["calls"], data):
        expected = [dp.partition_indices(size, world, r, seed) for r in range(world)]
        if _parts(got, size, world, seed) != expected:
            raise Fail(expected, got, HINT_PART + " (one shuffle, then contiguous slices)",
                       {"size": size, "world_size": world, "seed": seed})


def collect_global_random(solution: ModuleType, inputs: dict[str, Any]) -> float:
    random.seed(inputs["global_seed"])
    collect_split(solution, inputs)
    return random.random()


def check_global_random(inputs: dict[str, Any], data: Any) -> None:
    if data != random.Random(inputs["global_seed"]).random():
        raise Fail("the global random module's state untouched",
                   "it changed (random.seed or random.shuffle?)",
                   "README hint 1: a local random.Random(seed) leaves the global generator alone")


# ---- average_gradients, on real ranks -------------------------------------------------------------------
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


def average_worker(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = _Model()
    for i, p in enumerate(model.used.parameters()):
        p.grad = _rank_grads(rank, p.shape, i)
    function(solution_in_rank(), "average_gradients")(model)
    return {"grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()]}


def collect_average(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(average_worker, inputs["world_size"])


def check_average(inputs: dict[str, Any], data: list[Any]) -> None:
    world = inputs["world_size"]
    shapes = [p.shape for p in _Model().used.parameters()]
    expected = [sum(_rank_grads(r, s, i) for r in range(world)) / world for i, s in enumerate(shapes)]
    for rank, res in enumerate(data):
        grads = res["grads"]
        if grads[2] is not None or grads[3] is not None:
            raise Fail("grad None left as None (a parameter forward did not use)", f"rank {rank}: "
                                                                                   f"{kind(grads[2])}",
                       HINT_AVG)
        for i, (g, e) in enumerate(zip(grads[:2], expected)):
            if not isinstance(g, torch.Tensor) or g.shape != e.shape or (g - e).abs().max().item() > TOL:
                got = (
                    "None"
                    if g is None
                    else show(g.flatten().tolist())
                    if isinstance(g, torch.Tensor)
                    else kind(g)
                )
                raise Fail(f"rank {rank}, parameter {i}: the mean over {world} ranks "
                           f"{show(e.flatten().tolist())}",
                           got, HINT_AVG)


# ---- train_step, on real ranks --------------------------------------------------------------------------
def train_worker(rank: int, world: int, size: int) -> dict[str, Any]:
    x, y = dp.make_regression_data(size, D_IN, seed=3)
    model = dp.make_mlp(D_IN, HIDDEN, seed=4)
    shard = dp.partition_indices(size, world, rank, seed=5)      # the suite's split, not the student's
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return share_loss(outputs, targets, world, size)
    step = function(solution_in_rank(), "train_step")
    losses = [step(model, optimizer, loss_fn, x[shard], y[shard]) for _ in range(STEPS)]
    return {"params": dp.flat_params(model), "losses": losses}


def collect_train(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(train_worker, inputs["world_size"], inputs["samples"])


def one_process(size: int) -> torch.Tensor:
    """The parameters after STEPS steps of one process on all `size` samples, same loss and SGD."""
    x, y = dp.make_regression_data(size, D_IN, seed=3)
    model = dp.make_mlp(D_IN, HIDDEN, seed=4)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        optimizer.zero_grad()
        share_loss(model(x), y, 1, size).backward()
        optimizer.step()
    return dp.flat_params(model)


def _first_losses(size: int, world: int, rank: int) -> tuple[float, float]:
    """Rank r's first loss: loss_fn(outputs, targets), and what the arguments swapped would give."""
    x, y = dp.make_regression_data(size, D_IN, seed=3)
    shard = dp.partition_indices(size, world, rank, seed=5)
    with torch.no_grad():
        out = dp.make_mlp(D_IN, HIDDEN, seed=4)(x[shard])
        return share_loss(out, y[shard], world, size).item(), share_loss(y[shard], out, world, size).item()


def check_train(inputs: dict[str, Any], data: list[Any]) -> None:
    world, size = inputs["world_size"], inputs["samples"]
    reference = one_process(size)
    for rank, res in enumerate(data):
        losses = res["losses"]
        if not all(isinstance(v, float) for v in losses):
            raise Fail("a float: this rank's loss (loss.item())", kind(losses[0]), HINT_STEP)
        first, swapped = _first_losses(size, world, rank)
        if abs(losses[0] - first) > TOL * max(1.0, abs(first)):
            why = (": loss_fn(targets, outputs), the arguments swapped"
                   if abs(losses[0] - swapped) <= TOL * max(1.0, abs(swapped))
                   else "")
            raise Fail(f"rank {rank}'s first loss {first:.10g} (loss_fn(outputs, targets) on its shard)",
                       f"{losses[0]:.10g}{why}", HINT_STEP)
        params = res["params"]
        diff = (params - reference).abs().max().item() if isinstance(params, torch.Tensor) and \
            params.shape == reference.shape else float("inf")
        if diff > TOL:
            raise Fail(f"rank {rank}'s parameters after {STEPS} steps = one process on all {size} samples",
                       f"max |difference| {diff:.3g}", HINT_STEP)


CASES = [
    Case("partition: 10 samples on 3 and on 4 ranks (4, 3, 3 and 3, 3, 2, 2), each once",
         {"calls": [[10, 3, 0], [10, 4, 0]]}, collect_split, check_split_sizes, HINT_PART),
    Case("partition: fewer samples than ranks, none, one rank", {"calls": [[2, 4, 0], [0, 3, 0], [7, 1, 0]]},
         collect_split, check_split_sizes, HINT_PART),
    Case("partition: the split is random.Random(seed)'s shuffle, sliced in rank order",
         {"calls": [[10, 3, 0], [25, 4, 7], [16, 2, 123]]}, collect_split, check_split_shuffle, HINT_PART),
    Case("partition: the global random state is left alone", {"calls": [[20, 4, 5]], "global_seed": 2024},
         collect_global_random, check_global_random, HINT_PART),
    Case("average_gradients on 2 real ranks: the mean, grad None skipped", {"world_size": 2}, collect_average,
         check_average, HINT_AVG, ranks=True),
    Case("average_gradients on 3 real ranks", {"world_size": 3}, collect_average, check_average, HINT_AVG,
         quick=False, ranks=True),
    Case("train_step on 2 real ranks, equal shards, an asymmetric loss: 3 steps = one process",
         {"world_size": 2, "samples": 16}, collect_train, check_train, HINT_STEP, ranks=True),
    Case("train_step on 3 real ranks, shards 4, 3, 3 (loss = share of the batch mean): = one process",
         {"world_size": 3, "samples": 10}, collect_train, check_train, HINT_STEP, ranks=True),
]
