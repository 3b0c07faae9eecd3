"""Problem 114's cases: HW5's partition_indices, average_gradients and train_step.

partition_indices runs in the solution's process without ranks; average_gradients and train_step
on real gloo ranks. Expected values: lecture14.data_parallel (the suite's HW5 split), and one
process trained on the whole batch, computed here in the judge, with SGD and with Adam (averaging
the parameters after the step instead of the gradients before it is the same for SGD only). Every
loss train_step returns is compared, at every step, with the loss of that rank's shard; the loss
is an asymmetric squared error, so a train_step that calls loss_fn(targets, outputs) is caught.
"""

from __future__ import annotations

import numbers
import random
from types import ModuleType
from typing import Any

import torch
from torch import nn

from common.costmodel.collectives import split_sizes
from judging.engine import Case
from judging.messages import kind, show
from judging.ranks import run_ranks, solution_in_rank
from judging.sandbox import Fail, function
from lecture14 import data_parallel as dp

FUNCTIONS = ("partition_indices", "average_gradients", "train_step")
TOL = 1e-10          # float64: ranks and one process differ only in summation order
D_IN, HIDDEN, LR, STEPS = 4, 8, 0.1, 3        # LR for SGD and Adam alike
OPTIMIZERS = ("SGD", "Adam")    # the statement leaves the optimizer open
UNDER, OVER = 1.0, 0.2   # the loss's weight on (output − target)² below and above the target

HINT_PART = ("README hint 1: shuffle list(range(size)) with random.Random(seed); size // W each, "
             "+1 for the first size % W")
HINT_SLICES = "README hint 1: one shuffle, then CONTIGUOUS slices in rank order (not every W-th index)"
HINT_GLOBAL = "README hint 1: a local random.Random(seed) leaves the global generator alone"
HINT_AVG = "README hint 2: all_reduce SUM each grad in place, then divide by the world size; skip grad None"
HINT_DIVIDE = "README hint 2: after the SUM, divide by dist.get_world_size() (the ranks' count, not a number)"
HINT_IN_PLACE = ("README hint 2: p.grad came back as this rank's own: all_reduce p.grad ITSELF (it works in "
                 "place; dist.all_reduce(p.grad / W) reduces a temporary and throws it away), then divide")
HINT_NONE = ("README hint 2: skip a parameter whose grad is None (leave it None): every rank skips the "
             "same ones")
HINT_STEP = ("README hint 3: zero_grad, forward, loss_fn(outputs, targets), backward, average_gradients, "
             "step; return this rank's loss.item()")
HINT_ARGS = ("README hint 3: loss_fn(outputs, targets): the model's outputs first (the judge's loss is not "
             "symmetric)")
HINT_MINE = "README hint 3: return THIS rank's loss (loss.item()), not one averaged over the ranks"
HINT_FLOAT = "README hint 3: return loss.item(), a Python float, from every call"
HINT_EVERY_LOSS = ("README hint 3: every call returns THIS step's loss (loss.item() before the update), "
                   "not a running mean, a total or an earlier step's")
HINT_ADAM = ("README hint 3: average the GRADIENTS before optimizer.step(), not the parameters after it "
             "(the same for SGD, not for Adam)")
HINT_DEADLOCK = (
    "README hint 2: every rank must call the same all-reduces in the same order (skip grad None only)"
)


def prepare() -> None:
    """Build the optimizers in the judge before any fork: their imports (~1 s) are then inherited."""
    for name in OPTIMIZERS:
        make_optimizer(name, nn.Linear(1, 1))


def share_loss(outputs: torch.Tensor, targets: torch.Tensor, world: int, size: int) -> torch.Tensor:
    """This rank's share of the whole batch's mean asymmetric squared error, × W (the average divides
    by W): under-predictions cost 1, over-predictions 0.2, so the arguments' order matters."""
    diff = outputs - targets
    return (torch.where(diff < 0, UNDER, OVER) * diff ** 2).sum() * world / size


# ---- partition_indices, in the solution's process ----------------------------------------------------------
def collect_split(solution: ModuleType, inputs: dict[str, Any]) -> list[list[Any]]:
    fn = function(solution, "partition_indices")
    return [[fn(size, world, rank, seed) for rank in range(world)] for size, world, seed in inputs["calls"]]


def _parts(got: list[Any], shown: dict[str, int]) -> list[list[int]]:
    for rank, part in enumerate(got):
        if not (isinstance(part, list)
                and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in part)):
            raise Fail(f"a list of ints (rank {rank}'s sample indices)", kind(part), HINT_PART,
                       {**shown, "rank": rank})
    return [[int(i) for i in p] for p in got]


def check_split_sizes(inputs: dict[str, Any], data: list[Any]) -> None:
    for (size, world, seed), got in zip(inputs["calls"], data):
        shown = {"size": size, "world_size": world, "seed": seed}
        parts, sizes = _parts(got, shown), split_sizes(size, world)
        if [len(p) for p in parts] != sizes:
            raise Fail(f"shard sizes {sizes} for {size} samples on {world} ranks",
                       f"{[len(p) for p in parts]}", HINT_PART, shown)
        every = sorted(i for p in parts for i in p)
        if every != list(range(size)):
            raise Fail(f"every index 0…{size - 1} exactly once over the ranks", show(every), HINT_PART, shown)


def check_split_shuffle(inputs: dict[str, Any], data: list[Any]) -> None:
    for (size, world, seed), got in zip(inputs["calls"], data):
        shown = {"size": size, "world_size": world, "seed": seed}
        expected = [dp.partition_indices(size, world, r, seed) for r in range(world)]
        parts = _parts(got, shown)
        if parts != expected:
            order = [i for p in expected for i in p]           # the shuffle, rank 0's slice first
            strided = [order[r::world] for r in range(world)]
            raise Fail(expected, got, HINT_SLICES if parts == strided else HINT_PART, shown)


def collect_global_random(solution: ModuleType, inputs: dict[str, Any]) -> float:
    random.seed(inputs["global_seed"])
    collect_split(solution, inputs)
    return random.random()


def check_global_random(inputs: dict[str, Any], data: Any) -> None:
    if data != random.Random(inputs["global_seed"]).random():
        raise Fail("the global random module's state untouched",
                   "it changed (random.seed or random.shuffle?)", HINT_GLOBAL)


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
    sums = [sum(_rank_grads(r, s, i) for r in range(world)) for i, s in enumerate(shapes)]
    for rank, res in enumerate(data):
        grads = res["grads"]
        if grads[2] is not None or grads[3] is not None:
            raise Fail("grad None left as None (a parameter forward did not use)",
                       f"rank {rank}: {kind(grads[2] if grads[2] is not None else grads[3])}", HINT_NONE)
        for i, (g, total) in enumerate(zip(grads[:2], sums)):
            right = isinstance(g, torch.Tensor) and g.shape == total.shape
            if right and (g - total / world).abs().max().item() <= TOL:
                continue
            raise Fail(f"rank {rank}, parameter {i}: the mean over {world} ranks "
                       f"{show((total / world).flatten().tolist())}",
                       show(g.flatten().tolist()) if isinstance(g, torch.Tensor) else kind(g),
                       _average_hint(g if right else None, total, _rank_grads(rank, total.shape, i)))


def _average_hint(got: torch.Tensor | None, total: torch.Tensor, own: torch.Tensor) -> str:
    """What the gradient is instead chooses the hint: this rank's own, unchanged (nothing reduced
    in place), or a multiple of the sum (a wrong division)."""
    if got is None:
        return HINT_AVG
    if torch.equal(got, own):
        return HINT_IN_PLACE
    ratio = (total.sum() / got.sum()).item() if got.sum().item() else 0.0
    return HINT_DIVIDE if torch.allclose(got * ratio, total) else HINT_AVG


# ---- train_step, on real ranks --------------------------------------------------------------------------
def make_optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    """SGD, and Adam: averaging the parameters after the step instead of the gradients before it is
    the same update for SGD (linear in the gradient), another one for Adam."""
    return (torch.optim.SGD if name == "SGD" else torch.optim.Adam)(model.parameters(), lr=LR)


def train_worker(rank: int, world: int, size: int) -> dict[str, Any]:
    x, y = dp.make_regression_data(size, D_IN, seed=3)
    shard = dp.partition_indices(size, world, rank, seed=5)      # the suite's split, not the student's

    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return share_loss(outputs, targets, world, size)
    step = function(solution_in_rank(), "train_step")
    runs = {}
    for name in OPTIMIZERS:
        model = dp.make_mlp(D_IN, HIDDEN, seed=4)
        optimizer = make_optimizer(name, model)
        losses = [step(model, optimizer, loss_fn, x[shard], y[shard]) for _ in range(STEPS)]
        runs[name] = {"params": dp.flat_params(model), "losses": losses}
    return runs


def collect_train(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(train_worker, inputs["world_size"], inputs["samples"])


Losses = list[list[tuple[float, float]]]    # per rank, per step: (the loss, the loss of swapped arguments)


def one_process(size: int, world: int, name: str) -> tuple[torch.Tensor, Losses]:
    """One process on all `size` samples, same loss and optimizer: its parameters after STEPS steps,
    and for every rank and step that rank's loss on its shard before the step (and the loss with
    the arguments swapped, to name that mistake)."""
    x, y = dp.make_regression_data(size, D_IN, seed=3)
    model = dp.make_mlp(D_IN, HIDDEN, seed=4)
    optimizer = make_optimizer(name, model)
    shards = [dp.partition_indices(size, world, r, seed=5) for r in range(world)]
    losses: Losses = [[] for _ in range(world)]
    for _ in range(STEPS):
        with torch.no_grad():
            for rank, shard in enumerate(shards):
                out = model(x[shard])
                losses[rank].append((share_loss(out, y[shard], world, size).item(),
                                     share_loss(y[shard], out, world, size).item()))
        optimizer.zero_grad()
        share_loss(model(x), y, 1, size).backward()
        optimizer.step()
    return dp.flat_params(model), losses


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(b))


def _check_first_losses(data: list[Any], name: str, expected: Losses) -> None:
    """Every rank's first loss, and what it is instead: the arguments swapped, the ranks' mean."""
    mean = sum(losses[0][0] for losses in expected) / len(expected)
    for rank, res in enumerate(data):
        got = res[name]["losses"]
        if not (isinstance(got, list) and len(got) == STEPS and all(type(v) is float for v in got)):
            raise Fail(f"{STEPS} floats, this rank's loss at each step (loss.item())",
                       kind(got[0] if isinstance(got, list) and len(got) == STEPS else got), HINT_FLOAT)
        right, swapped = expected[rank][0]
        after = expected[rank][1][0]         # the loss on this shard after step 1's update
        if not _close(got[0], right):
            why, hint = ((": loss_fn(targets, outputs), the arguments swapped", HINT_ARGS)
                         if _close(got[0], swapped) else (": the ranks' mean", HINT_MINE)
                         if _close(got[0], mean) else (": the loss after the update", HINT_EVERY_LOSS)
                         if _close(got[0], after) else ("", HINT_STEP))
            raise Fail(f"rank {rank}'s first loss ({name}) {right:.10g}: loss_fn(outputs, targets) on its "
                       "shard", f"{got[0]:.10g}{why}", hint)


def _check_params(data: list[Any], name: str, reference: torch.Tensor, size: int) -> None:
    for rank, res in enumerate(data):
        params = res[name]["params"]
        diff = (params - reference).abs().max().item() if isinstance(params, torch.Tensor) and \
            params.shape == reference.shape else float("inf")
        if diff > TOL:
            raise Fail(f"rank {rank}'s parameters after {STEPS} {name} steps = one process on all {size} "
                       "samples", f"max |difference| {diff:.3g}", HINT_ADAM if name == "Adam" else HINT_STEP)


def _check_later_losses(data: list[Any], name: str, expected: Losses) -> None:
    for rank, res in enumerate(data):
        for step, (value, (right, _)) in enumerate(zip(res[name]["losses"], expected[rank])):
            if not _close(value, right):
                raise Fail(f"rank {rank}'s loss at step {step + 1} of {STEPS} ({name}) {right:.10g}: on its "
                           "shard, before that step's update", f"{value:.10g}", HINT_EVERY_LOSS)


def check_train(inputs: dict[str, Any], data: list[Any]) -> None:
    """Per optimizer, SGD first (a mistake both show gets SGD's hint): the first losses, the trained
    parameters (a wrong step shows in every later loss: named here first), then every later loss."""
    world, size = inputs["world_size"], inputs["samples"]
    for name in OPTIMIZERS:
        reference, losses = one_process(size, world, name)
        _check_first_losses(data, name, losses)
        _check_params(data, name, reference, size)
        _check_later_losses(data, name, losses)

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
    Case("average_gradients on 3 real ranks (÷ the world size, not 2)", {"world_size": 3}, collect_average,
         check_average, HINT_AVG, ranks=True),
    Case("train_step on 2 real ranks, equal shards, an asymmetric loss: every loss, 3 SGD and 3 Adam "
         "steps = one process", {"world_size": 2, "samples": 16}, collect_train, check_train, HINT_STEP,
         ranks=True),
    Case("train_step on 3 real ranks, shards 4, 3, 3 (loss = share of the batch mean): = one process",
         {"world_size": 3, "samples": 10}, collect_train, check_train, HINT_STEP, ranks=True),
]
