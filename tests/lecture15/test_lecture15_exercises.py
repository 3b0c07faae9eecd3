"""Lecture 15's §8 exercises (lecture15/exercises.py) against independent references: torch autograd
for the gradients, PyTorch's own bucketing function, brute-force enumeration, and the arithmetic by
hand; and the script run as a student would."""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import load_script
from lecture15_shared import EXERCISES, _claims, _run_json

from common.units import MB
from lecture15.least_squares import mean_gradient
from lecture15.models import resnet50


@pytest.fixture(scope="module")
def exercises() -> ModuleType:
    return load_script(EXERCISES)


@pytest.fixture(scope="module")
def exercises_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    return _run_json(EXERCISES, tmp_path_factory.mktemp("ex"))


# ---- exercises against independent computations --------------------------------------------------
def test_exercise_claims_against_independent_numbers(exercises_run: tuple[str, dict]) -> None:
    out, data = exercises_run
    claims = _claims(data)
    layout = [(m, g) for m in range(3) for g in range(4)]             # ranks fill machine 0 first
    assert claims["L15-8-ex1"]["ours"] == layout[7][0] == 1                 # the machine
    assert claims["L15-8-ex1-local-rank"]["ours"] == layout[7][1] == 3
    assert claims["L15-8-ex1-world-size"]["ours"] == len(layout)
    # exercise 4 by hand: bucket 0 = {p4, p3} ready at 2 ms, 24 MB; bucket 1 = {p2, p1, p0} at 5 ms, 20 MB
    cost = [0.5 + 0.1 * 24, 0.5 + 0.1 * 20]
    end0 = 2 + cost[0]
    assert claims["L15-8-ex4"]["ours"] == pytest.approx(max(end0, 5) + cost[1])       # overlapped
    assert claims["L15-8-ex4-no-overlap"]["ours"] == pytest.approx(5 + sum(cost))
    assert claims["L15-8-ex4-one-bucket"]["ours"] == pytest.approx(5 + 0.5 + 0.1 * 44)
    assert claims["L15-8-ex10"]["ours"] == pytest.approx((256 * 32 / 0.100) / (32 / 0.050))   # throughput
    assert claims["L15-8-ex10-efficiency"]["ours"] == pytest.approx(50.0)
    assert claims["L15-8-ex11"]["ours"] == pytest.approx((3 * 50 + 100) / 4)
    assert claims["L15-8-ex5-tensors"]["ours"] == len(resnet50().params) == 161
    assert claims["L15-8-ex5"]["ours"] is True                                # cap 0 loses to one bucket
    disagreeing = [c for c in data["claims"] if c["status"] != "agrees"]
    assert not disagreeing, disagreeing
    # cap 0's latency alone: 161 × 2(K−1)α
    assert data["parts"]["Part 5"]["ex5_cap0_latency_ms"] == pytest.approx(161 * 2 * 15 * 10e-3)
    # the twelve exercises, then Part 13: the figures of §10's preview (bubble, Megatron's MLP, 405B)
    assert [f"Part {i}" for i in range(1, 14)] == [p for p in data["parts"] if p != "intro"]
    assert claims["L15-8-ex4-bucket0-comm"]["ours"] == pytest.approx(0.5 + 0.1 * 24)
    assert claims["L15-8-ex4-bucket1-comm"]["ours"] == pytest.approx(0.5 + 0.1 * 20)
    assert claims["L15-10-405b-state"]["ours"] == pytest.approx(405e9 * 16 / 1e12)
    assert claims["L15-10-megatron-mlp"]["ours"] == 1


def test_exercise3_buckets_equal_pytorch(exercises: ModuleType) -> None:
    sizes = exercises.EX3_SIZES
    reversed_tensors = [torch.empty(s // 4, device="meta") for s in reversed(sizes)]
    torch_buckets, _ = dist._compute_bucket_assignment_by_size(reversed_tensors, [12 * MB])
    expected = [[len(sizes) - 1 - i for i in b] for b in sorted(torch_buckets, key=min)]
    assert exercises.exercise3_buckets() == expected == [[4, 3], [2, 1, 0]]


def test_exercise1_placement_and_bad_rank(exercises: ModuleType) -> None:
    for machines, gpus in ((3, 4), (2, 8), (5, 1)):
        layout = [(m, g) for m in range(machines) for g in range(gpus)]
        for rank, (m, g) in enumerate(layout):
            assert exercises.rank_placement(rank, machines, gpus) == (m, g, machines * gpus)
    with pytest.raises(ValueError):
        exercises.rank_placement(12, 3, 4)


def test_exercise6_launch_rules(exercises: ModuleType) -> None:
    for ready in itertools.permutations(range(4)):
        assert exercises.launch_order(list(ready), in_index_order=True) == [0, 1, 2, 3]
        assert exercises.launch_order(list(ready), in_index_order=False) == list(ready)
    same = [[np.ones(2), 2 * np.ones(2)], [3 * np.ones(2), 4 * np.ones(2)]]
    assert all("correct" in s for s in exercises.pair_by_call_order([[0, 1], [0, 1]], same))
    assert all("WRONG" in s for s in exercises.pair_by_call_order([[1, 0], [0, 1]], same))
    uneven = [[np.ones(3), np.ones(2)], [np.ones(3), np.ones(2)]]
    assert all("error/hang" in s for s in exercises.pair_by_call_order([[1, 0], [0, 1]], uneven))


def test_exercise7_gradient_matches_torch_accumulation(exercises: ModuleType) -> None:
    rng = np.random.default_rng(0)
    x, y, w = rng.standard_normal((32, 5)), rng.standard_normal(32), rng.standard_normal(5)
    wt = torch.tensor(w, requires_grad=True)
    for i in range(4):                                 # four backward calls accumulate into .grad
        xb, yb = torch.from_numpy(x[i * 8:(i + 1) * 8]), torch.from_numpy(y[i * 8:(i + 1) * 8])
        (0.5 * ((xb @ wt - yb) ** 2).mean() / 4).backward()
    full = mean_gradient(w, x, y)
    assert np.allclose(wt.grad.numpy(), full, rtol=0, atol=1e-12)


def test_exercise8_idle_expert_probability_by_enumeration(exercises_run: tuple[str, dict]) -> None:
    pairs = list(itertools.combinations(range(8), 2))
    for tokens in (1, 2, 3):
        idle = sum(len(set(itertools.chain(*choice))) < 8
                   for choice in itertools.product(pairs, repeat=tokens))
        exact = sum((-1) ** (j + 1) * math.comb(8, j) * (math.comb(8 - j, 2) / 28) ** tokens
                    for j in range(1, 7))
        assert exact == pytest.approx(idle / len(pairs) ** tokens)
    rows = {r[0]: float(r[1]) for r in exercises_run[1]["parts"]["Part 8"]["tables"]["moe_idle"]["rows"]}
    # 4 tokens use all 8 experts only as 4 disjoint pairs: 28·15·6·1 = 8!/2⁴ of the 28⁴ choices
    assert rows[4] == pytest.approx(1 - (math.factorial(8) / 2**4) / 28**4, abs=5e-4)
    assert rows[64] == pytest.approx(0.0, abs=5e-4) and all(rows[a] > rows[b] for a, b in ((4, 8), (8, 16)))


def test_exercises_quick_smoke(quick_run) -> None:
    data = quick_run(EXERCISES).data
    claims = _claims(data)
    assert claims["L15-8-ex3"]["ours"] == "{p4, p3}, {p2, p1, p0}"
    assert not [ref for ref, c in claims.items() if c["status"] == "differs"]
    rules = {(row[0], row[1]): row[2:] for row in data["parts"]["Part 6"]["tables"]["launch_rules"]["rows"]}
    # the naive launch rule adds different buckets on the two ranks, DDP's index order the same
    assert rules["equal", "naive: first ready"] == ["buckets [1, 0]: WRONG", "buckets [0, 1]: WRONG"]
    assert rules["equal", "DDP: index order"] == ["buckets [0, 0]: correct", "buckets [1, 1]: correct"]
