"""lecture14.data_parallel against independent references: a plain shuffle, single-process
autograd and torch.optim.SGD, explicit least-squares gradients, and real gloo ranks."""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch
from torch import nn

from common.costmodel.collectives import split_sizes
from common.launch import launch
from lecture14 import data_parallel as dp


# ---- partition_indices -------------------------------------------------------------------------
@pytest.mark.parametrize("size, world_size", [(3, 4), (4, 4), (10, 4), (1003, 4), (7, 3), (0, 2), (5, 1)])
def test_partition_covers_each_index_once_with_balanced_sizes(size: int, world_size: int) -> None:
    parts = [dp.partition_indices(size, world_size, r, seed=7) for r in range(world_size)]
    assert sorted(i for p in parts for i in p) == list(range(size))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    extra = size % world_size
    assert sizes == [size // world_size + 1] * extra + [size // world_size] * (world_size - extra)
    assert sizes == split_sizes(size, world_size)


def test_partition_is_contiguous_slices_of_a_local_shuffle() -> None:
    expected = list(range(10))
    random.Random(3).shuffle(expected)
    parts = [dp.partition_indices(10, 4, r, seed=3) for r in range(4)]
    assert [i for p in parts for i in p] == expected
    assert parts == [expected[0:3], expected[3:6], expected[6:8], expected[8:10]]


def test_partition_same_seed_same_split_and_global_state_untouched() -> None:
    random.seed(123)
    state = random.getstate()
    a = dp.partition_indices(100, 4, 2, seed=5)
    assert random.getstate() == state
    assert a == dp.partition_indices(100, 4, 2, seed=5)
    assert a != dp.partition_indices(100, 4, 2, seed=6)
    assert a != list(range(50, 75))  # it was shuffled


@pytest.mark.parametrize("args", [(10, 4, 4, 0), (10, 4, -1, 0), (10, 0, 0, 0), (-1, 2, 0, 0),
                                  (10, 2.5, 0, 0)])
def test_partition_rejects_bad_arguments(args: tuple) -> None:
    with pytest.raises(ValueError):
        dp.partition_indices(*args)


def test_naive_proportional_split_drops_the_remainder() -> None:
    assert dp.naive_proportional_sizes(10, 4) == [2, 2, 2, 2]


# ---- average_gradients and train_step on real gloo ranks ----------------------------------------
class WithUnused(nn.Module):
    """An MLP plus a layer no forward uses: its grad must stay None, on every rank."""

    def __init__(self) -> None:
        super().__init__()
        self.body = dp.make_mlp(5, 7, seed=1)
        self.unused = nn.Linear(3, 3).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def average_worker(rank: int, world_size: int, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    shard = dp.partition_indices(len(x), world_size, rank, seed=0)
    nn.functional.mse_loss(model(x[shard]), y[shard]).backward()
    dp.average_gradients(model)
    grads = {n: (None if p.grad is None else p.grad.tolist()) for n, p in model.named_parameters()}
    # then a few HW5 training steps from the same start
    model.zero_grad(set_to_none=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        dp.train_step(model, optimizer, nn.functional.mse_loss, x[shard], y[shard])
    return {"grads": grads, "params": dp.flat_params(model).tolist()}


@pytest.mark.parametrize("world_size", [2, 3])
def test_average_gradients_on_real_ranks_equals_full_batch(world_size: int) -> None:
    model = WithUnused()
    x, y = dp.make_regression_data(6 * world_size, 5, seed=2)  # equal shards
    results = launch(average_worker, world_size, model, x, y, timeout_s=20)
    reference = copy.deepcopy(model)
    nn.functional.mse_loss(reference(x), y).backward()
    for name, p in reference.named_parameters():
        for res in results:
            if p.grad is None:
                assert res["grads"][name] is None, name
            else:
                torch.testing.assert_close(torch.tensor(res["grads"][name], dtype=torch.float64), p.grad,
                                           rtol=1e-12, atol=1e-14)
    assert results[0]["grads"]["unused.weight"] is None
    # train_step: every rank ends identical, and equal to full-batch torch.optim.SGD
    reference = copy.deepcopy(model)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        opt.step()
    for res in results:
        assert res["params"] == results[0]["params"]
        torch.testing.assert_close(torch.tensor(res["params"], dtype=torch.float64),
                                   dp.flat_params(reference), rtol=0, atol=1e-12)


# ---- simulations against single-process references ---------------------------------------------
def _torch_sgd_reference(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int,
                         lr: float) -> nn.Module:
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


@pytest.mark.parametrize("k", [2, 4, 8])
def test_simulated_data_parallel_matches_single_process(k: int) -> None:
    x, y = dp.make_regression_data(64, 8, seed=4)
    model = dp.make_mlp(8, 16, seed=4)
    shards = [dp.partition_indices(64, k, r, seed=4) for r in range(k)]
    run = dp.simulate_data_parallel(model, x, y, shards, steps=20, lr=0.1)
    first = dp.flat_params(run.replicas[0])
    assert all(torch.equal(first, dp.flat_params(m)) for m in run.replicas)
    reference = _torch_sgd_reference(model, x, y, 20, 0.1)
    assert dp.max_abs_diff(run.replicas[0], reference) < 1e-12
    assert run.losses[-1] < run.losses[0]  # it trained
    assert dp.max_abs_diff(run.replicas[0], model) > 1e-3
    full, losses = dp.train_full_batch(model, x, y, 20, 0.1)
    assert dp.max_abs_diff(full, reference) < 1e-12
    assert dp.max_abs_diff(full, reference) == 0  # sgd_update is SGD's arithmetic, as its docstring says
    assert losses[-1] < losses[0] and len(losses) == 20


def test_gradient_accumulation_matches_full_batch() -> None:
    x, y = dp.make_regression_data(48, 8, seed=5)
    model = dp.make_mlp(8, 16, seed=5)
    micro = [dp.partition_indices(48, 3, r, seed=5) for r in range(3)]
    accumulated = dp.train_grad_accumulation(model, x, y, micro, steps=10, lr=0.1)
    assert dp.max_abs_diff(accumulated, _torch_sgd_reference(model, x, y, 10, 0.1)) < 1e-12


def test_sum_then_divide_fixes_unequal_shards_and_naive_mean_does_not() -> None:
    x, y = dp.make_regression_data(10, 8, seed=6)
    model = dp.make_mlp(8, 16, seed=6)
    shards = [dp.partition_indices(10, 4, r, seed=6) for r in range(4)]
    counts = [len(s) for s in shards]
    assert counts == [3, 3, 2, 2]

    def flat_grad(xs: torch.Tensor, ys: torch.Tensor, reduction: str) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(xs), ys, reduction=reduction)
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])

    full = flat_grad(x, y, "mean")
    means = [flat_grad(x[s], y[s], "mean") for s in shards]
    sums = [flat_grad(x[s], y[s], "sum") for s in shards]
    torch.testing.assert_close(dp.combine_sum_then_divide(sums, counts), full, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(dp.combine_weighted(means, counts), full, rtol=1e-12, atol=1e-15)
    naive = dp.combine_naive_mean(means, counts)
    assert ((naive - full).norm() / full.norm()).item() > 0.01
    # the naive mean is an explicit reweighting: sample weights 1/(K·n_r)
    per_sample = [flat_grad(x[i:i + 1], y[i:i + 1], "sum") for i in range(10)]
    weights = dp.sample_weights_naive(counts)
    order = [i for s in shards for i in s]
    reweighted = sum(w * per_sample[i] for w, i in zip(weights, order))
    torch.testing.assert_close(naive, reweighted, rtol=1e-10, atol=1e-14)


# ---- the asynchronous parameter server ---------------------------------------------------------
def test_least_squares_gradient_is_the_minibatch_gradient() -> None:
    p = dp.make_least_squares(50, 4, computations=6, batch=5, seed=1)
    w = np.arange(4.0)
    for j in range(6):
        a, b = p.a[p.rows[j]], p.b[p.rows[j]]
        np.testing.assert_allclose(p.grad(w, j), a.T @ (a @ w - b) / 5, rtol=1e-12, atol=1e-12)


def test_parameter_server_schedules_against_explicit_loops() -> None:
    p = dp.make_least_squares(64, 5, computations=40, batch=4, seed=2)
    lr = 0.05

    def grad(w: np.ndarray, j: int) -> np.ndarray:
        a, b = p.a[p.rows[j]], p.b[p.rows[j]]
        return a.T @ (a @ w - b) / len(b)

    history = [np.zeros(5)]
    for j in range(40):  # staleness 2: gradient j at the parameters of update j − 2
        history.append(history[-1] - lr * grad(history[max(0, j - 2)], j))
    final = dp.simulate_parameter_server(p, 4, lr, staleness=2)
    assert final == pytest.approx(p.loss(history[-1]), rel=1e-10)
    w = np.zeros(5)
    for u in range(10):  # synchronous: 4 gradients at the same w per update
        w = w - lr * np.mean([grad(w, 4 * u + i) for i in range(4)], axis=0)
    assert dp.simulate_parameter_server(p, 4, lr, staleness=None) == pytest.approx(p.loss(w), rel=1e-10)
    # one worker, synchronous, is sequential SGD: the same as τ = 0
    assert dp.simulate_parameter_server(p, 1, lr, None) == pytest.approx(
        dp.simulate_parameter_server(p, 4, lr, 0), rel=1e-12)


def test_stale_gradients_diverge_where_fresh_ones_do_not() -> None:
    p = dp.make_least_squares(256, 10, computations=400, batch=8, seed=0)
    start = p.loss(np.zeros(10))
    assert dp.simulate_parameter_server(p, 8, 0.3, staleness=0) < 0.01 * start
    assert dp.simulate_parameter_server(p, 8, 0.3, staleness=7) > start
    with pytest.raises(ValueError):
        dp.simulate_parameter_server(p, 8, 0.1, staleness=-1)


@pytest.mark.parametrize("tau", [0, 1, 3, 7])
def test_delayed_gradient_stability_limit_against_characteristic_roots(tau: int) -> None:
    def spectral_radius(a: float) -> float:  # roots of z^(τ+1) − z^τ + a
        return max(abs(np.roots([1.0, -1.0] + [0.0] * (tau - 1) + [a]))) if tau else abs(1 - a)

    limit = dp.delayed_gd_stable_limit(tau)
    assert spectral_radius(0.99 * limit) < 1 < spectral_radius(1.01 * limit)


def test_async_tau0_is_sequential_sgd_and_the_curve_ends_at_the_final_loss() -> None:
    p = dp.make_least_squares(64, 5, computations=40, batch=4, seed=2)
    assert dp.simulate_parameter_server(p, 4, 0.05, 0) == dp.sequential_sgd(p, 0.05)
    for staleness in (None, 0, 3):
        xs, ys = dp.parameter_server_curve(p, 4, 0.05, staleness)
        assert ys[-1] == pytest.approx(dp.simulate_parameter_server(p, 4, 0.05, staleness), rel=1e-12)
        assert xs[-1] == 40 and ys[0] == p.loss(np.zeros(5))
    xs, ys = dp.parameter_server_curve(p, 4, 1e9, 0)  # overflows: ends at the update that did
    assert math.isinf(ys[-1]) and xs[-1] < 40 and math.isinf(dp.simulate_parameter_server(p, 4, 1e9, 0))


def test_the_sweep_reads_staleness_and_divergence_right() -> None:
    from lecture14 import async_sgd

    sw = async_sgd.Sweep([0.1, 1.0], [0, 1], [[2.0, 1.0, 1.5], [3.0, 9e9, 9e9]], start=5.0, optimum=1.0)
    assert sw.staler_worse(0) and sw.converged(1.0) and not sw.converged(1.6)
    assert sw.diverged(9e9) and not sw.diverged(5.0)
    assert [sw.first_diverging_lr(c) for c in (0, 1, 2)] == [2, 1, 1]
    assert not async_sgd.Sweep([0.1], [0, 1], [[2.0, 1.5, 1.0]], 5.0, 1.0).staler_worse(0)


# ---- staleness of asynchronous updates (05 Part 5) ----------------------------------------------
def _staleness_by_clock(workers: int, gradients: int, times: list[float]) -> list[int]:
    """An independent reference: scan every worker for the next arrival (no heap), count versions."""
    finish = list(times)
    pulled, version, stale = [0] * workers, 0, []
    while len(stale) < gradients:
        w = min(range(workers), key=lambda i: (finish[i], i))
        stale.append(version - pulled[w])
        version += 1
        pulled[w], finish[w] = version, finish[w] + times[w]
    return stale


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_equal_speed_workers_are_k_minus_1_late_in_steady_state(k: int) -> None:
    from lecture14 import async_sgd
    stale = async_sgd.gradient_staleness(k, 50)
    assert stale == list(range(k)) + [k - 1] * (50 - k)  # the first K ramp up, then exactly K − 1
    assert stale == _staleness_by_clock(k, 50, [1.0] * k)


def test_uneven_workers_match_the_clock_reference_and_stay_near_k_minus_1() -> None:
    from lecture14 import async_sgd
    rng = random.Random(3)
    times = [rng.uniform(0.5, 1.5) for _ in range(6)]
    stale = async_sgd.gradient_staleness(6, 2000, times)
    assert stale == _staleness_by_clock(6, 2000, times)
    assert sum(stale[6:]) / len(stale[6:]) == pytest.approx(5, abs=0.05)
    rows = async_sgd.staleness_rows([4, 8], 400, seed=0)
    assert [r[:5] for r in rows] == [[4, 3, 3.0, 3, 3], [8, 7, 7.0, 7, 7]]
    with pytest.raises(ValueError):
        async_sgd.gradient_staleness(3, 10, [1.0, 2.0])
