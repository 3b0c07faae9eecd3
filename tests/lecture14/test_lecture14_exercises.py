"""Lecture 14 exercises: every computed answer against a hand computation written here, and the
script run as a student would."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import assert_usage_error, load_script, run_script

EXERCISES = load_script("lecture14/exercises.py")  # the weights and replica helpers live in the script


@pytest.fixture(scope="module")
def claims(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    out = tmp_path_factory.mktemp("ex") / "ex.json"
    proc = run_script("lecture14/exercises.py", "--json", str(out))
    for n in range(1, 13):   # the headers a reader matches with the notes' exercise numbers
        assert f"== Part {n}: exercise {n} " in proc.stdout
    # our own check beside the exercise (the notes assume K divides N): a line, no row of the notes
    assert ("where K does not divide N (K = 5): 2N less the two chunks a device never sends: yes"
            in proc.stdout)
    data = json.loads(out.read_text())
    return {(c["part"], c["what"]): c for c in data["claims"]}


def ours(claims: dict, part: int, what: str) -> object:
    return claims[(f"Part {part}", what)]["ours"]


# The notes' 21 % is script 05's value on one data set; ours here is the data-free weight-vector
# error 20.41 %, a model the notes do not use: shown as ours only (05's row holds it against theirs).
DATA_FREE = ("Part 9", "gradient error, 3/3/2/2, orthogonal gradients")


def test_every_claim_agrees_with_the_notes(claims: dict) -> None:
    # The notes' answers were all checked by hand; where one is wrong this test would say which.
    bad = [(k, c["ours"], c["notes"]) for k, c in claims.items()
           if c["status"] not in ("agrees", "ours only")]
    assert not bad
    data_free = claims[DATA_FREE]
    assert data_free["status"] == "ours only" and data_free["notes"] is None and "21 %" in data_free["why"]
    assert abs(data_free["ours"] - 21) > 0.5  # its value is checked by hand in test_ex9_weights


def test_ex1_compute_budget(claims: dict) -> None:
    flops = 6 * 70e9 * 2e12
    gpu_hours = flops / 350e12 / 3600
    assert ours(claims, 1, "6ND") == pytest.approx(8.4e23)
    assert ours(claims, 1, "GPU-hours (in units of 10^4, the notes' 万)") == pytest.approx(gpu_hours / 1e4)
    assert ours(claims, 1, "on 1024 GPUs: hours") == pytest.approx(gpu_hours / 1024)
    assert ours(claims, 1, "on 1024 GPUs: days") == pytest.approx(gpu_hours / 1024 / 24)


def test_ex2_buffer_ratios(claims: dict) -> None:
    assert ours(claims, 2, "reduce-scatter output / input N") == 0.25
    assert ours(claims, 2, "all-gather output / input (= K)") == 4


def _hand_ring_k3() -> list[list[list[str]]]:
    """The notes' schedule on sets of terms, written independently of the simulator."""
    k = 3
    state = [[{f"{'abc'[r]}{j}"} for j in range(k)] for r in range(k)]
    history = []
    for i in range(k - 1):  # reduce-scatter: r sends chunk (r - i) mod K, the right neighbour adds
        sends = [(r, (r - i) % k, set(state[r][(r - i) % k])) for r in range(k)]
        for r, c, payload in sends:
            state[(r + 1) % k][c] = state[(r + 1) % k][c] | payload
        history.append([["+".join(sorted(x)) for x in dev] for dev in state])
    for i in range(k - 1):  # all-gather: r sends chunk (r + 1 - i) mod K, the neighbour overwrites
        sends = [(r, (r + 1 - i) % k, set(state[r][(r + 1 - i) % k])) for r in range(k)]
        for r, c, payload in sends:
            state[(r + 1) % k][c] = payload
        history.append([["+".join(sorted(x)) for x in dev] for dev in state])
    return history


def test_ex3_rounds_match_a_hand_simulation(claims: dict) -> None:
    hand = _hand_ring_k3()
    for dev in range(3):
        assert ours(claims, 3, f"after round 1, device {dev}") == "[" + ", ".join(hand[0][dev]) + "]"
    for dev, chunk in ((0, 1), (1, 2), (2, 0)):
        assert ours(claims, 3, f"after round 2, device {dev} chunk {chunk}") == hand[1][dev][chunk]
    assert all(dev == ["a0+b0+c0", "a1+b1+c1", "a2+b2+c2"] for dev in hand[-1])
    assert ours(claims, 3, "complete after 4 rounds") is True


def test_ex4_bytes_per_device() -> None:

    from lecture14.collectives import ring_allreduce
    for k in (2, 4, 6):
        n_floats = 12 * k
        res = ring_allreduce([np.zeros(n_floats, dtype=np.float32) for _ in range(k)])
        assert all(s == 2 * (k - 1) * (4 * n_floats) // k for s in res.sent)  # 2(K-1)N/K by hand


def test_ex4_claims(claims: dict) -> None:
    assert ours(claims, 4, "simulated bytes = 2(K-1)N/K when K divides N") is True


def test_ex5_ring_time(claims: dict) -> None:
    total = 2 * 15 * (10e-6 + 1e9 / (16 * 25e9))
    assert ours(claims, 5, "time") == pytest.approx(total * 1e3)
    assert ours(claims, 5, "latency part 2(K-1)α") == pytest.approx(30 * 10e-3)
    assert ours(claims, 5, "latency share") == pytest.approx(100 * 30 * 10e-6 / total)


def test_ex6_broadcast(claims: dict) -> None:
    assert ours(claims, 6, "unsplit") == pytest.approx(3 * 100e6 / 10e9 * 1e3)
    assert ours(claims, 6, "S = 100") == pytest.approx(102 * 1e6 / 10e9 * 1e3)
    assert ours(claims, 6, "S = 100 with α = 20 µs") == pytest.approx(102 * (20e-6 + 1e6 / 10e9) * 1e3)
    half = claims[("Part 6", "with α: S = 100 time / unsplit time")]  # '仍然好得多': the row's bound
    assert half["ours"] == pytest.approx(102 * (20e-6 + 1e6 / 10e9) / (3 * (20e-6 + 100e6 / 10e9)))
    assert half["status"] == "agrees" and half["notes"] == "< 0.5"


def test_ex7_crossover(claims: dict) -> None:
    alpha, beta = 5e-6, 25e9
    n = 12 * alpha * beta / 12.25  # 14α + 1.75N/β = 2α + 14N/β
    assert ours(claims, 7, "N where ring = naive") == pytest.approx(n / 1e3)


def test_ex8_parameter_server(claims: dict) -> None:
    assert ours(claims, 8, "server, send and receive in turn") == pytest.approx(2 * 16 * 2e9 / 25e9)
    assert ours(claims, 8, "server, full duplex") == pytest.approx(16 * 2e9 / 25e9)
    assert ours(claims, 8, "bytes each device sends (ring model)") == pytest.approx(2 * 15 / 16 * 2)
    assert ours(claims, 8, "ring all-reduce time") == pytest.approx(2 * 15 / 16 * 2e9 / 25e9)


def test_ex9_weights(claims: dict) -> None:
    assert EXERCISES.sample_weights([334, 333, 333]) == pytest.approx([1 / 1002, 1 / 999, 1 / 999])
    assert ours(claims, 9, "largest deviation") == pytest.approx(100 * (1 - 1000 / 1002))
    assert ours(claims, 9, "10 samples on 4 ranks: weight, 2-sample / 3-sample") == pytest.approx(1.5)
    error = math.sqrt(6 * (1 / 12 - 0.1) ** 2 + 4 * (1 / 8 - 0.1) ** 2) / math.sqrt(10 * 0.01)
    assert ours(claims, 9, "gradient error, 3/3/2/2, orthogonal gradients") == pytest.approx(100 * error)
    assert EXERCISES.weight_vector_error([3, 3, 2, 2]) == pytest.approx(error)


def test_ex9_correlated_errors_against_numpy_means() -> None:
    # A plain numpy mean of means (no ring) against the module's ring-averaged one; the fix is round-off.
    grads = np.random.default_rng(0).normal(size=(10, 5)) + 1.0
    means = np.mean([part.mean(axis=0) for part in np.split(grads, [3, 6, 8])], axis=0)
    naive, fixed = EXERCISES.correlated_errors([3, 3, 2, 2])
    mean = grads.mean(axis=0)
    assert naive == pytest.approx(np.linalg.norm(means - mean) / np.linalg.norm(mean))
    assert naive > 0.01 and fixed < 1e-14


def test_ex10_effective_batch(claims: dict) -> None:
    assert EXERCISES.effective_batch(4, 32) == 128 and EXERCISES.effective_batch(4, 32, 2) == 256
    assert EXERCISES.effective_batch(3, 5, 7) == 105
    assert ours(claims, 10, "4 ranks × 32 samples × 2 accumulation steps") == 256


def test_ex11_speedups(claims: dict) -> None:
    for k, comm_ms in ((2, 40), (4, 60), (8, 70)):
        assert ours(claims, 11, f"K = {k}: all-reduce") == pytest.approx(2 * (k - 1) / k * 1e9 / 25e9 * 1e3)
        assert ours(claims, 11, f"K = {k}: all-reduce") == pytest.approx(comm_ms)
        assert ours(claims, 11, f"K = {k}: speedup") == pytest.approx(100 / (100 / k + comm_ms))


def test_ex12_replicas() -> None:
    drift = EXERCISES.replica_drift
    assert drift(3, 10, init_seeds=[0, 0, 0]) == 0.0
    start = drift(3, 0, init_seeds=[0, 1, 2])
    # SGD with one shared averaged gradient keeps an initial difference exactly as it was.
    assert drift(3, 10, init_seeds=[0, 1, 2]) == pytest.approx(start, rel=1e-5)
    assert drift(3, 10, init_seeds=[0, 0, 0], skip_param=1) > 0


def test_exercises_quick_and_bad_flag(quick_run) -> None:
    found = {c["ref"]: c["ours"] for c in quick_run("lecture14/exercises.py").data["claims"]}
    # by hand: 2(K - 1)(α + N/(Kβ)) at K = 16, N = 1 GB, α = 10 µs, β = 25 GB/s; and the ring = naive
    # crossover (K - 2)K·αβ/(K - 1)² at K = 8, α = 5 µs, β = 25 GB/s (75.3 ms and 122.4 KB printed)
    assert found["L14-ex5-ring-time"] == pytest.approx(30 * (10e-6 + 1e9 / (16 * 25e9)) * 1e3, rel=1e-12)
    assert found["L14-ex7-ring-naive-crossover"] == pytest.approx(6 * 8 * 5e-6 * 25e9 / 49 / 1e3, rel=1e-12)
    assert_usage_error("lecture14/exercises.py", "--world-size", "0")
