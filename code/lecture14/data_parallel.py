"""Data parallelism, lecture 14 §4: HW5's three functions, and in-process simulations to check them.

HW5 Problem 1 (these run on real ranks; `average_gradients` needs an initialised process group):
    partition_indices(size, world_size, rank, seed)   each rank's share of a seeded shuffle
    average_gradients(model)                           all-reduce SUM per parameter, then / W
    train_step(model, optimizer, loss_fn, x, y)        zero grad, forward, backward, average, step

Simulations (one process, plain torch, no torch.distributed) that script 05 compares them with:
    train_full_batch               the single-process reference: one model, the whole batch
    simulate_data_parallel         K replicas, one shard each, gradients summed in rank order / K
    train_grad_accumulation        one model, M micro-batches accumulated in .grad, one update
    combine_* (naive / weighted / sum-then-divide)   three ways to merge unequal shards' gradients
    simulate_parameter_server      least squares with synchronous, or asynchronous stale, updates
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from common.costmodel.collectives import split_sizes

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# ---- HW5 1.1: partition ------------------------------------------------------------------------
def _check_partition_args(size: int, world_size: int) -> None:
    if int(size) != size or size < 0:
        raise ValueError(f"size must be an integer >= 0, got {size}")
    if int(world_size) != world_size or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size}")


def partition_indices(size: int, world_size: int, rank: int, seed: int) -> list[int]:
    """The indices (into a data set of `size` samples) that `rank` of `world_size` trains on.

    Every rank shuffles list(range(size)) with its own random.Random(seed), so all ranks derive the
    same permutation without talking to each other, and each keeps its contiguous slice of it. A
    local generator leaves the global `random` state alone (user code seeded it for other reasons).
    """
    _check_partition_args(size, world_size)
    if int(rank) != rank or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, {world_size - 1}], got {rank}")
    order = list(range(size))
    random.Random(seed).shuffle(order)
    sizes = split_sizes(size, world_size)  # size // W each, one more for the first size % W ranks
    start = sum(sizes[:rank])
    return order[start:start + sizes[rank]]


def naive_proportional_sizes(size: int, world_size: int) -> list[int]:
    """Naive, not used: int(size · 1/W) per rank, which silently drops the last size % W samples."""
    _check_partition_args(size, world_size)
    return [int(size * (1 / world_size)) for _ in range(world_size)]


# ---- HW5 1.2 and 1.3: average the gradients, one training step --------------------------------
def average_gradients(model: nn.Module) -> None:
    """Replace every parameter's gradient by its mean over all ranks (in place).

    SUM then divide, because gloo has no AVG on older releases. One all-reduce per parameter is
    the simple version; flattening all gradients into buckets (lecture 15, DDP) sends fewer, larger
    messages. A parameter with grad None (not used in this forward) is skipped: every rank must
    skip the same ones, or the ranks call different collectives and wait for ever.
    """
    world_size = dist.get_world_size()
    for param in model.parameters():
        if param.grad is None:
            continue
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad.div_(world_size)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """One data-parallel step on this rank's batch; returns this rank's (local) loss."""
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    average_gradients(model)
    optimizer.step()
    return loss.item()


# ---- a small regression problem in float64 -----------------------------------------------------
def make_regression_data(n: int, d_in: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n samples of a noisy smooth target, float64: x ~ N(0, 1)^d, y = sin(x·v) + 0.1·noise."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=gen, dtype=torch.float64)
    v = torch.randn(d_in, 1, generator=gen, dtype=torch.float64) / d_in**0.5
    y = torch.sin(x @ v) + 0.1 * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    return x, y


def make_mlp(d_in: int, hidden: int, seed: int) -> nn.Module:
    """A float64 MLP d_in → hidden → 1 (tanh), initialised from `seed`."""
    torch.manual_seed(seed)  # nn.Linear draws from the global generator
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, 1)).double()


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one detached vector (to compare models)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def max_abs_diff(a: nn.Module | torch.Tensor, b: nn.Module | torch.Tensor) -> float:
    """max |a − b| over all parameters (models) or elements (tensors)."""
    ta = flat_params(a) if isinstance(a, nn.Module) else a
    tb = flat_params(b) if isinstance(b, nn.Module) else b
    return (ta - tb).abs().max().item()


def shard_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                    reduction: str = "mean") -> list[torch.Tensor]:
    """Gradients of the MSE on (x, y), loss averaged ('mean') or summed ('sum') over the samples."""
    model.zero_grad()
    nn.functional.mse_loss(model(x), y, reduction=reduction).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def sgd_update(model: nn.Module, grads: Sequence[torch.Tensor], lr: float) -> None:
    """p ← p − lr·g, the same arithmetic as torch.optim.SGD's plain CPU path (p.add_(g, alpha=-lr)).

    The simulations use this rather than torch.optim.SGD because the first optimizer built in a
    process imports torch._dynamo, about a second here, for nothing the simulations need.
    """
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p.add_(g, alpha=-lr)


def train_full_batch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int,
                     lr: float) -> tuple[nn.Module, list[float]]:
    """The reference: a copy of `model` trained by SGD on the whole batch; (model, losses)."""
    model = copy.deepcopy(model)
    losses = []
    for _ in range(steps):
        with torch.no_grad():
            losses.append(nn.functional.mse_loss(model(x), y).item())
        sgd_update(model, shard_gradients(model, x, y), lr)
    return model, losses


@dataclass
class SimulatedRun:
    """The K replicas after training, and the full-batch loss before each step."""

    replicas: list[nn.Module]
    losses: list[float]


def simulate_data_parallel(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                           shards: Sequence[Sequence[int]], steps: int, lr: float) -> SimulatedRun:
    """Data parallelism without processes: replica r trains on x[shards[r]].

    Each step every replica computes its shard's mean-loss gradient; the K gradients are summed in
    rank order and divided by K (what average_gradients does, with one fixed summation order), and
    every replica applies that same gradient to its own parameters.
    """
    if not shards:
        raise ValueError("need at least one shard")
    replicas = [copy.deepcopy(model) for _ in shards]
    losses = []
    for _ in range(steps):
        with torch.no_grad():
            losses.append(nn.functional.mse_loss(replicas[0](x), y).item())
        grads = [shard_gradients(r, x[list(s)], y[list(s)]) for r, s in zip(replicas, shards)]
        summed = [sum(parts[1:], parts[0].clone()) for parts in zip(*grads)]
        mean = [g / len(shards) for g in summed]
        for replica in replicas:
            sgd_update(replica, mean, lr)
    return SimulatedRun(replicas, losses)


def train_grad_accumulation(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                            micro_batches: Sequence[Sequence[int]], steps: int, lr: float) -> nn.Module:
    """One model; each step backpropagates M micro-batches (loss / M) into .grad, then updates once."""
    model = copy.deepcopy(model)
    for _ in range(steps):
        model.zero_grad()
        for mb in micro_batches:
            # .grad accumulates across backward calls; / M makes the sum the mean over micro-batches
            loss = nn.functional.mse_loss(model(x[list(mb)]), y[list(mb)]) / len(micro_batches)
            loss.backward()
        sgd_update(model, [p.grad for p in model.parameters()], lr)
    return model


# ---- merging gradients of unequal shards (the 3,3,2,2 pitfall) ---------------------------------
def combine_naive_mean(mean_grads: Sequence[torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
    """Naive, wrong for unequal shards: the plain mean of the per-rank mean gradients."""
    return sum(mean_grads[1:], mean_grads[0].clone()) / len(mean_grads)


def combine_weighted(mean_grads: Sequence[torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
    """Per-rank mean gradients weighted by each rank's sample count n_r / N."""
    total = sum(counts)
    parts = [g * (n / total) for g, n in zip(mean_grads, counts)]
    return sum(parts[1:], parts[0].clone())


def combine_sum_then_divide(sum_grads: Sequence[torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
    """Per-rank gradients of the SUMMED loss, all-reduced (summed), then divided by the global N."""
    return sum(sum_grads[1:], sum_grads[0].clone()) / sum(counts)


def sample_weights_naive(counts: Sequence[int]) -> list[float]:
    """Each sample's weight in the naive mean of means: 1 / (K · n_r) (the full batch gives 1/N)."""
    return [1 / (len(counts) * n) for n in counts for _ in range(n)]


# ---- asynchronous parameter server on least squares --------------------------------------------
@dataclass
class LeastSquares:
    """L(w) = |A w − b|² / (2n), in numpy; gradient computation j uses the j-th fixed mini-batch.

    A mini-batch's gradient Aⱼᵀ(Aⱼw − bⱼ)/m is kept as Hⱼ w − cⱼ (Hⱼ = AⱼᵀAⱼ/m, cⱼ = Aⱼᵀbⱼ/m): one
    small mat-vec per gradient, so hundreds of runs of 400 gradients take a fraction of a second.
    """

    a: np.ndarray
    b: np.ndarray
    rows: np.ndarray     # (computations, m): the samples of each mini-batch
    batch_h: np.ndarray  # (computations, dim, dim)
    batch_c: np.ndarray  # (computations, dim)

    @property
    def computations(self) -> int:
        return len(self.batch_c)

    def loss(self, w: np.ndarray) -> float:
        r = self.a @ w - self.b
        return float(r @ r) / (2 * len(self.b))

    def grad(self, w: np.ndarray, j: int) -> np.ndarray:
        return self.batch_h[j] @ w - self.batch_c[j]

    def optimum_loss(self) -> float:
        return self.loss(np.linalg.lstsq(self.a, self.b, rcond=None)[0])

    def largest_curvature(self) -> float:
        """λ_max of AᵀA / n: full-batch gradient descent is stable for lr < 2 / λ_max."""
        return float(np.linalg.eigvalsh(self.a.T @ self.a / len(self.b)).max())


def make_least_squares(n: int, dim: int, computations: int, batch: int, seed: int) -> LeastSquares:
    """A seeded problem (A ~ N(0,1), b = A·w_true + 0.1·noise); the j-th mini-batch (drawn with
    replacement) is fixed, so every schedule sees the same gradients in the same order."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, dim))
    b = a @ rng.standard_normal(dim) + 0.1 * rng.standard_normal(n)
    rows = rng.integers(0, n, size=(computations, batch))
    a_j, b_j = a[rows], b[rows]  # (computations, batch, dim), (computations, batch)
    batch_h = np.einsum("jbi,jbk->jik", a_j, a_j) / batch
    batch_c = np.einsum("jbi,jb->ji", a_j, b_j) / batch
    return LeastSquares(a, b, rows, batch_h, batch_c)


def simulate_parameter_server(problem: LeastSquares, workers: int, lr: float,
                              staleness: int | None) -> float:
    """Final loss after all the problem's gradient computations, from w = 0; inf if it blew up.

    staleness=None: synchronous — each update averages `workers` gradients taken at the current
    parameters (computations // workers updates). staleness=τ: asynchronous — every gradient is one
    update, computed on the parameters as they were τ updates earlier (τ = 0 is sequential SGD;
    with K workers busy at once a gradient typically arrives K − 1 updates late).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if staleness is not None and staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    w = np.zeros(problem.a.shape[1])
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging run overflows: that is the result
        if staleness is None:
            for u in range(problem.computations // workers):
                g = sum(problem.grad(w, u * workers + i) for i in range(workers)) / workers
                w = w - lr * g
                if not np.isfinite(w).all():
                    return math.inf
            return problem.loss(w)
        history = [w]  # history[t] = the parameters after t updates
        for j in range(problem.computations):
            w = history[-1] - lr * problem.grad(history[max(0, j - staleness)], j)
            if not np.isfinite(w).all():
                return math.inf
            history.append(w)
        loss = problem.loss(w)
    return loss if math.isfinite(loss) else math.inf


def delayed_gd_stable_limit(staleness: int) -> float:
    """Largest lr·λ for which gradient descent with gradients τ updates old converges on a quadratic.

    Along an eigenvector with curvature λ: x_{t+1} = x_t − lr·λ·x_{t−τ}. All roots of
    z^{τ+1} − z^τ + lr·λ = 0 lie inside the unit circle iff 0 < lr·λ < 2·sin(π / (2(2τ + 1))):
    2 for τ = 0, 1 for τ = 1, about π/(2τ + 1) for large τ (the classical delay-equation result).
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    return 2 * math.sin(math.pi / (2 * (2 * staleness + 1)))


def parameter_server_curve(problem: LeastSquares, workers: int, lr: float,
                           staleness: int | None) -> tuple[list[int], list[float]]:
    """The loss after each update, against gradient computations so far: the run of
    simulate_parameter_server, point by point (for the loss curves). A run that blows up ends with
    an infinite loss at the update where it did."""
    w = np.zeros(problem.a.shape[1])
    xs, ys = [0], [problem.loss(w)]
    with np.errstate(over="ignore", invalid="ignore"):
        if staleness is None:
            steps = [(u, [u * workers + i for i in range(workers)])
                     for u in range(problem.computations // workers)]
            for u, js in steps:
                w = w - lr * sum(problem.grad(w, j) for j in js) / workers
                xs.append((u + 1) * workers)
                ys.append(problem.loss(w) if np.isfinite(w).all() else math.inf)
                if not math.isfinite(ys[-1]):
                    break
            return xs, ys
        history = [w]
        for j in range(problem.computations):
            w = history[-1] - lr * problem.grad(history[max(0, j - staleness)], j)
            history.append(w)
            xs.append(j + 1)
            ys.append(problem.loss(w) if np.isfinite(w).all() else math.inf)
            if not math.isfinite(ys[-1]):
                break
    return xs, ys


def sequential_sgd(problem: LeastSquares, lr: float) -> float:
    """Plain mini-batch SGD, one gradient per update in order: what async τ = 0 must be."""
    w = np.zeros(problem.a.shape[1])
    for j in range(problem.computations):
        w = w - lr * (problem.batch_h[j] @ w - problem.batch_c[j])
    return problem.loss(w)


def flat_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in shard_gradients(model, x, y, reduction)])


def naive_error(seed: int, shards: list[list[int]], counts: list[int], d_in: int, hidden: int) -> float:
    """Relative error of the naive mean of per-rank means on a seeded MLP regression of sum(counts)
    samples (05_data_parallel.py Part 3's spread over data seeds)."""
    model = make_mlp(d_in, hidden, seed)
    x, y = make_regression_data(sum(counts), d_in, seed)
    full = flat_grads(model, x, y)
    naive = combine_naive_mean([flat_grads(model, x[s], y[s]) for s in shards], counts)
    return ((naive - full).norm() / full.norm()).item()
