"""lecture15.ddp_sim against independent references: PyTorch's own bucketing function, the notes'
exercises done by hand, and brute-force re-simulation (the models' inventories: test_models.py)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.units import MB, MiB
from lecture15.ddp_sim import (
    ComputeModel,
    assign_buckets,
    assign_buckets_in_order,
    bucket_sizes,
    buckets_for_registration,
    gradient_ready_times,
    registration_order,
    simulate_backward,
    simulate_ddp,
    skip_sync_speedup,
    skip_sync_step_s,
    weak_scaling,
)
from lecture15.models import bert_large, resnet50

NOTES_LINK_03 = Link(10e-6, 10e9)   # §3: α = 10 µs, β = 10 GB/s


# ---- buckets against torch.distributed._compute_bucket_assignment_by_size --------------------
def _torch_buckets(numels: list[int], limits: list[int], order: list[int] | None = None) -> list[list[int]]:
    tensors = [torch.empty(n, device="meta") for n in numels]
    if order is None:
        buckets, _ = dist._compute_bucket_assignment_by_size(tensors, limits)
        return buckets
    buckets, _ = dist._compute_bucket_assignment_by_size([tensors[i] for i in order], limits, [], list(order))
    return buckets


def _random_case(rng: random.Random) -> tuple[list[int], int, int | None]:
    numels = [rng.choice([1, 3, 64, 512, 4096, rng.randint(1, 20000)]) for _ in range(rng.randint(1, 40))]
    total = 4 * sum(numels)
    cap = rng.choice([0, 1, 4, rng.randint(1, total), rng.randint(1, 2 * total), total])
    first = rng.choice([None, None, 0, rng.randint(1, total), 4 * numels[-1]])
    return numels, cap, first


def test_assign_buckets_equals_pytorch_on_random_inputs() -> None:
    rng = random.Random(1234)
    for _ in range(400):
        numels, cap, first = _random_case(rng)
        limits = [cap] if first is None else [first, cap]
        n = len(numels)
        # DDP's rule walks the reverse registration order: give torch the reversed list, map back.
        expected = [[n - 1 - j for j in bucket] for bucket in _torch_buckets(numels[::-1], limits)]
        assert assign_buckets([4 * m for m in numels], cap, first) == expected, (numels, cap, first)


def test_assign_buckets_in_order_equals_pytorch_rebuild() -> None:
    rng = random.Random(99)
    for _ in range(300):
        numels, cap, first = _random_case(rng)
        order = list(range(len(numels)))
        rng.shuffle(order)
        limits = [cap] if first is None else [first, cap]
        got = assign_buckets_in_order([4 * m for m in numels], order, cap, first)
        assert got == _torch_buckets(numels, limits, order), (numels, order, cap, first)


@pytest.mark.parametrize("cap_mib, expected_bytes", [
    (1, [1_050_624] * 6),
    (2, [2_101_248] * 3),
    (2.5, [3_151_872, 3_151_872]),
    (25, [6_303_744]),
])
def test_six_linear_layers_as_in_the_facts(cap_mib: float, expected_bytes: list[int]) -> None:
    model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(6)])
    names = [name for name, _ in model.named_parameters()]
    sizes = [p.numel() * 4 for p in model.parameters()]
    buckets = assign_buckets(sizes, int(cap_mib * MiB))
    assert bucket_sizes(sizes, buckets) == expected_bytes
    assert [names[i] for i in buckets[0][:2]] == ["5.bias", "5.weight"]


def test_six_linear_layers_default_caps() -> None:
    sizes = [p.numel() * 4 for p in nn.Sequential(*[nn.Linear(512, 512) for _ in range(6)]).parameters()]
    buckets = assign_buckets(sizes, 25 * MiB, first_cap_bytes=MiB)
    assert bucket_sizes(sizes, buckets) == [1_050_624, 5_253_120]


def test_cap_zero_gives_one_bucket_per_parameter_and_huge_cap_one_bucket() -> None:
    sizes = resnet50().param_bytes()
    assert assign_buckets(sizes, 0) == [[i] for i in reversed(range(len(sizes)))]
    assert len(assign_buckets(sizes, 10**12)) == 1


def test_exercise_3_buckets() -> None:
    # §8 exercise 3: p0..p4 = 10, 2, 8, 20, 4 MB, cap 12 MB -> {p4, p3}, {p2, p1, p0}.
    assert assign_buckets([10 * MB, 2 * MB, 8 * MB, 20 * MB, 4 * MB], 12 * MB) == [[4, 3], [2, 1, 0]]


# ---- timeline -----------------------------------------------------------------------------------
def _exercise_comm(nbytes: int) -> float:
    return 0.5e-3 + 0.1e-3 * nbytes / MB     # §8 exercise 4: 0.5 ms + 0.1 ms/MB


def test_exercise_4_timeline() -> None:
    sizes = [10 * MB, 2 * MB, 8 * MB, 20 * MB, 4 * MB]
    ready = [5e-3, 4e-3, 3e-3, 2e-3, 1e-3]          # p4 at 1 ms ... p0 at 5 ms
    buckets = assign_buckets(sizes, 12 * MB)
    overlapped = simulate_backward(ready, sizes, buckets, _exercise_comm, overlap=True)
    times = [t for e in overlapped.comm_events() for t in (e.start_s, e.end_s)]
    assert times == pytest.approx([2e-3, 4.9e-3, 5e-3, 7.5e-3])  # flat: pytest >= 9.2 refuses nesting
    assert overlapped.step_s == pytest.approx(7.5e-3)
    serial = simulate_backward(ready, sizes, buckets, _exercise_comm, overlap=False)
    assert serial.step_s == pytest.approx(10.4e-3)
    assert simulate_backward(ready, sizes, [[4, 3, 2, 1, 0]], _exercise_comm).step_s == pytest.approx(9.9e-3)


def _reducer_reference(ready: list[float], sizes: list[int], buckets: list[list[int]], comm,
                       overlap: bool) -> float:
    """The notes' Reducer, event by event: pending counts, launch in index order, one FIFO comm stream."""
    where = {i: b for b, bucket in enumerate(buckets) for i in bucket}
    pending = [len(b) for b in buckets]
    next_bucket, free_at, last_end = 0, 0.0, 0.0
    end_of_backward = max(ready)
    for index in sorted(range(len(ready)), key=lambda i: ready[i]):
        now = ready[index] if overlap else end_of_backward
        pending[where[index]] -= 1
        while next_bucket < len(buckets) and pending[next_bucket] == 0:
            start = max(now, free_at)
            free_at = last_end = start + comm(sum(sizes[i] for i in buckets[next_bucket]))
            next_bucket += 1
    return max(end_of_backward, last_end)


def _random_timeline_case(rng: random.Random):
    n = rng.randint(1, 30)
    sizes = [4 * rng.randint(0, 300_000) for _ in range(n)]
    steps = [rng.choice([0.0, rng.uniform(0, 2e-3)]) for _ in range(n)]
    ready, clock = [0.0] * n, 0.0
    for i in reversed(range(n)):                    # reverse model order, like backward
        clock += steps[i]
        ready[i] = clock
    registration = registration_order(n, rng.choice(["correct", "shuffled", "reversed"]), rng.randint(0, 99))
    cap = rng.choice([0, rng.randint(1, sum(sizes) + 1), 10**12])
    first = rng.choice([None, rng.randint(0, 2_000_000)])
    in_order = assign_buckets([sizes[i] for i in registration], cap, first)
    buckets = [[registration[i] for i in b] for b in in_order]
    link = Link(rng.choice([0.0, 1e-5, 1e-4]), rng.choice([1e9, 1e10, 1e11]))
    k = rng.choice([2, 3, 16, 100])
    return ready, sizes, buckets, (lambda nbytes: algorithm("ring all-reduce").time(k, nbytes, link))


def test_timeline_invariants_and_reference_on_random_cases() -> None:
    rng = random.Random(7)
    for _ in range(300):
        ready, sizes, buckets, comm = _random_timeline_case(rng)
        on = simulate_backward(ready, sizes, buckets, comm, overlap=True)
        off = simulate_backward(ready, sizes, buckets, comm, overlap=False)
        assert on.step_s <= off.step_s + 1e-15
        assert on.step_s == pytest.approx(_reducer_reference(ready, sizes, buckets, comm, True), abs=1e-12)
        assert off.step_s == pytest.approx(_reducer_reference(ready, sizes, buckets, comm, False), abs=1e-12)
        assert off.step_s == pytest.approx(max(ready) + sum(comm(s) for s in bucket_sizes(sizes, buckets)))
        # whatever follows the bucket holding the last gradient can never hide behind compute
        last = max(range(len(ready)), key=lambda i: ready[i])
        tail = next(b for b, bucket in enumerate(buckets) if last in bucket)
        assert on.exposed_comm_s >= sum(on.comm_s[tail:]) - 1e-12
        events = on.comm_events()
        assert [e.index for e in events] == list(range(len(buckets)))
        for b, e in enumerate(events):
            assert e.start_s >= on.bucket_ready_s[b] - 1e-15
            if b:
                assert e.start_s >= events[b - 1].end_s - 1e-15     # one bucket at a time, in index order
        for e in off.comm_events():
            assert e.start_s >= max(ready) - 1e-15
        if len(buckets) == 1:                           # one bucket: nothing to overlap
            assert on.step_s == pytest.approx(off.step_s)


def test_simulate_ddp_matches_the_notes_part_1_within_the_model() -> None:
    model = resnet50(batch=32)
    off = simulate_ddp(model, 16, NOTES_LINK_03, 25 * MB, overlap=False)
    on = simulate_ddp(model, 16, NOTES_LINK_03, 25 * MB, overlap=True)
    assert len(on.buckets) == 4
    # comm is 4 ring all-reduces: 2·15·(α·4 + bytes/(16β)) in total
    assert off.comm_total_s == pytest.approx(30 * (4 * 10e-6 + model.nbytes / 16e10))
    assert off.step_s == pytest.approx(53.3e-3, rel=0.01)
    assert on.step_s == pytest.approx(37.8e-3, rel=0.01)
    assert on.exposed_comm_s >= on.comm_s[-1] - 1e-12
    cap0 = simulate_ddp(model, 16, NOTES_LINK_03, 0)
    # The notes' "worse than no overlap".
    assert len(cap0.buckets) == len(model.params) and cap0.step_s > off.step_s


def test_ready_times_and_registration_orders() -> None:
    model = resnet50(batch=8)
    compute = ComputeModel(flops_per_s=1e12, calibration=1.5)
    ready = gradient_ready_times(model, compute)
    assert max(ready) == pytest.approx(compute.backward_s(model)) == pytest.approx(ready[0])
    assert all(ready[i] >= ready[i + 1] for i in range(len(ready) - 1))
    assert compute.forward_s(model) == pytest.approx(compute.backward_s(model) / 2)
    n = len(model.params)
    for kind in ("correct", "shuffled", "reversed"):
        assert sorted(registration_order(n, kind, seed=3)) == list(range(n))
    assert registration_order(n, "shuffled", 1) != registration_order(n, "shuffled", 2)
    sizes = model.param_bytes()
    assert buckets_for_registration(model, range(n), 5 * MB) == assign_buckets(sizes, 5 * MB)
    backwards = buckets_for_registration(model, registration_order(n, "reversed"), 5 * MB)
    assert backwards == assign_buckets_in_order(sizes, range(n), 5 * MB)
    with pytest.raises(ValueError):
        registration_order(n, "sideways")


# ---- §5 scaling ---------------------------------------------------------------------------------
def test_weak_scaling_is_monotone_and_starts_at_one() -> None:
    ks = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for model, compute in ((resnet50(), ComputeModel()), (bert_large(), ComputeModel(calibration=1.07))):
        points = weak_scaling(model, ks, NOTES_LINK_03, 25 * MB, compute=compute)
        assert points[0].slowdown == pytest.approx(1.0) and points[0].efficiency == pytest.approx(1.0)
        assert points[0].step_s == pytest.approx(compute.forward_s(model) + compute.backward_s(model))
        steps = [p.step_s for p in points]
        assert all(a <= b for a, b in zip(steps, steps[1:]))
        assert all(p.throughput_speedup == pytest.approx(p.world_size / p.slowdown) for p in points)
    resnet = weak_scaling(resnet50(), [1, 256], NOTES_LINK_03, 25 * MB)
    assert resnet[1].slowdown == pytest.approx(1.20, abs=0.02)   # §5: 49.3 -> 59.3 ms


def test_skip_sync_model() -> None:
    assert skip_sync_step_s(100.0, 50.0, 4) == pytest.approx(62.5)       # §8 exercise 11
    assert skip_sync_speedup(100.0, 50.0, 1) == pytest.approx(1.0)
    speedups = [skip_sync_speedup(59.3, 49.3, n) for n in range(1, 20)]
    assert all(a < b for a, b in zip(speedups, speedups[1:])) and speedups[-1] < 59.3 / 49.3
    assert skip_sync_speedup(59.3, 49.3, 8) == pytest.approx(1.17, abs=0.01)   # §5: +17 %
    with pytest.raises(ValueError):
        skip_sync_step_s(1.0, 1.0, 0)


def test_the_simulator_reads_no_table():
    """The pure simulator imports nothing from the notes' checker: its calibration targets come in as
    arguments (lecture15/notes_calibration.py reads them from the notes' table)."""
    code = Path(__file__).resolve().parents[2] / "code"
    probe = "import sys, lecture15.ddp_sim; print('common.checker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=code, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
