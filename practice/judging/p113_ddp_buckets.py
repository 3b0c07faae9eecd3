"""Problem 113's cases: DDP's buckets, the ring all-reduce's α-β cost, the overlap timeline.

Expected values come from the suite's own models: lecture15.ddp_sim (PyTorch's bucket rule and the
one-stream timeline, itself tested against torch's `_compute_bucket_assignment_by_size`) and
common.costmodel (the ring's α-β time). Where a case is one of lecture 15's exercises, the notes'
answer is shown beside the model's.
"""

from __future__ import annotations

import math
import numbers
import random
from types import ModuleType
from typing import Any, Sequence

from common.costmodel import Link, ring_allreduce_time
from judging.engine import Case, Fail, function, kind, show
from lecture15.ddp_sim import (
    DEFAULT_FIRST_BUCKET_BYTES,
    MB,
    ComputeModel,
    MiB,
    assign_buckets,
    gradient_ready_times,
    resnet50,
    simulate_backward,
)

FUNCTIONS = ("assign_buckets", "allreduce_time", "timeline")
REL_TOL = 1e-9
EX3_SIZES = [10 * MB, 2 * MB, 8 * MB, 20 * MB, 4 * MB]        # lecture 15 exercise 3: p0 … p4
EX4_READY_S = [5e-3, 4e-3, 3e-3, 2e-3, 1e-3]                  # exercise 4: p4 ready at 1 ms … p0 at 5 ms
# Exercise 4's "0.5 ms + 0.1 ms/MB" per all-reduce is the ring's 2(K−1)(α + n/(Kβ)) at K = 2,
# α = 0.25 ms, β = 10 GB/s: 2α = 0.5 ms, n/β = 0.1 ms per 10^6 bytes.
EX4_RING = (2, 0.25e-3, 10e9)
S3_RING = (16, 10e-6, 10e9)                                    # lecture 15 §3: 16 ranks, 10 µs, 10 GB/s

HINT_SEAL = "README hint 1: walk the parameters in reverse, seal AFTER adding once bytes >= the cap"
HINT_FIRST = "README hint 2: the first bucket has its own cap; every later bucket uses cap_bytes"
HINT_RING = "README hint 3: 2(K − 1) messages of n/K bytes, each α + size/β; K = 1 sends nothing"
HINT_TIMELINE = "README hint 4: bucket b starts at max(its last gradient ready, bucket b − 1's end)"
HINT_EXPOSED = "README hint 5: backward ends at the last gradient; exposed = step end − backward end"


# ---- checking what came back ----------------------------------------------------------------------
def _as_buckets(value: Any, n: int) -> list[list[int]]:
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(b, (list, tuple)) and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in b)
        for b in value)
    if not ok:
        raise Fail("a list of buckets, each a list of parameter indices (ints)", kind(value), HINT_SEAL)
    return [[int(i) for i in b] for b in value]


def _check_buckets(solution: ModuleType, sizes: Sequence[int], cap: int, first: int | None, hint: str,
                   notes: str = "") -> None:
    expected = assign_buckets(list(sizes), cap, first)
    args = (list(sizes), cap) if first is None else (list(sizes), cap, first)
    got = _as_buckets(function(solution, "assign_buckets")(*args), len(sizes))
    if got != expected:
        suffix = f" (the notes' answer: {notes})" if notes else ""
        raise Fail(show(expected) + suffix, show(got), hint)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-15)


def _number(value: Any, what: str, hint: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(float(value)):
        raise Fail(f"{what} as a float (seconds)", kind(value), hint)
    return float(value)


def _check_time(solution: ModuleType, nbytes: int, k: int, alpha_s: float, beta: float) -> None:
    expected = ring_allreduce_time(k, nbytes, Link(alpha_s, beta))
    got = _number(function(solution, "allreduce_time")(nbytes, k, alpha_s, beta), "the all-reduce time", HINT_RING)
    if not _close(got, expected):
        raise Fail(f"{expected:.9g} s for {nbytes:,} B on K = {k}", f"{got:.9g} s", HINT_RING)


def _check_timeline(solution: ModuleType, sizes: Sequence[int], buckets: list[list[int]], ready: Sequence[float],
                    ring: tuple[int, float, float], notes_step_s: float | None = None) -> None:
    k, alpha_s, beta = ring
    model = simulate_backward(list(ready), list(sizes), buckets,
                              lambda nbytes: ring_allreduce_time(k, nbytes, Link(alpha_s, beta)))
    spans = [(e.start_s, e.end_s) for e in model.comm_events()]
    got = function(solution, "timeline")(list(sizes), [list(b) for b in buckets], list(ready), k, alpha_s, beta)
    if not (isinstance(got, (list, tuple)) and len(got) == 3 and isinstance(got[0], (list, tuple))):
        raise Fail("a tuple (spans, step_end_s, exposed_s)", kind(got), HINT_TIMELINE)
    got_spans, got_step, got_exposed = got
    if len(got_spans) != len(spans) or not all(isinstance(s, (list, tuple)) and len(s) == 2 for s in got_spans):
        raise Fail(f"{len(spans)} spans (start_s, end_s), one per bucket", kind(got_spans), HINT_TIMELINE)
    for b, ((s, e), (gs, ge)) in enumerate(zip(spans, got_spans)):
        gs, ge = _number(gs, f"bucket {b}'s start", HINT_TIMELINE), _number(ge, f"bucket {b}'s end", HINT_TIMELINE)
        if not (_close(gs, s) and _close(ge, e)):
            raise Fail(f"bucket {b} all-reduce from {s * 1e3:.6g} to {e * 1e3:.6g} ms",
                       f"{gs * 1e3:.6g} to {ge * 1e3:.6g} ms", HINT_TIMELINE)
    step = _number(got_step, "the step end", HINT_EXPOSED)
    notes = f" (the notes: {notes_step_s * 1e3:g} ms)" if notes_step_s is not None else ""
    if not _close(step, model.step_s):
        raise Fail(f"step end {model.step_s * 1e3:.6g} ms{notes}", f"{step * 1e3:.6g} ms", HINT_EXPOSED)
    exposed = _number(got_exposed, "the exposed communication", HINT_EXPOSED)
    if not _close(exposed, model.exposed_comm_s):
        raise Fail(f"exposed communication {model.exposed_comm_s * 1e3:.6g} ms", f"{exposed * 1e3:.6g} ms",
                   HINT_EXPOSED)


# ---- the cases ------------------------------------------------------------------------------------
def exercise3(solution: ModuleType) -> None:
    _check_buckets(solution, EX3_SIZES, 12 * MB, None, HINT_SEAL, "{p4, p3}, {p2, p1, p0}")


def exactly_at_cap(solution: ModuleType) -> None:
    # reverse order: p3 + p2 = 4 B reaches the cap exactly and seals; then p1 + p0 = 4 B seals too
    _check_buckets(solution, [1, 3, 2, 2], 4, None, HINT_SEAL + " (>=, not >)")


def cap_zero(solution: ModuleType) -> None:
    _check_buckets(solution, [8, 16, 4, 32, 8], 0, None, HINT_SEAL + ": with cap 0 every parameter seals")


def one_bucket(solution: ModuleType) -> None:
    _check_buckets(solution, [8, 16, 4, 32, 8], 1000, None, HINT_SEAL)


def larger_than_cap(solution: ModuleType) -> None:
    _check_buckets(solution, [3, 100, 3], 10, None, HINT_SEAL + "; a large parameter joins the open bucket")


def first_bucket(solution: ModuleType) -> None:
    sizes = resnet50().param_bytes()
    _check_buckets(solution, sizes, 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES, HINT_FIRST)


def first_bucket_larger(solution: ModuleType) -> None:
    _check_buckets(solution, [4, 4, 4, 4, 4, 4], 4, 12, HINT_FIRST)


def random_buckets(solution: ModuleType) -> None:
    rng = random.Random(113)
    for _ in range(30):
        sizes = [rng.choice([1, 2, 4, 8, 64, 256]) * rng.randint(1, 4) for _ in range(rng.randint(1, 12))]
        cap = rng.choice([0, 1, 8, 64, 100, 512, 10_000])
        first = rng.choice([None, 0, 16, cap])
        _check_buckets(solution, sizes, cap, first, HINT_SEAL)


def ring_times(solution: ModuleType) -> None:
    for nbytes, k, alpha_s, beta in [(25 * MiB, 16, 10e-6, 10e9), (10 * MB, 2, 0.25e-3, 10e9),
                                     (1000, 3, 5e-6, 25e9), (0, 8, 5e-6, 25e9)]:
        _check_time(solution, nbytes, k, alpha_s, beta)


def ring_one_rank(solution: ModuleType) -> None:
    _check_time(solution, 64 * MB, 1, 5e-6, 25e9)


def exercise4(solution: ModuleType) -> None:
    _check_timeline(solution, EX3_SIZES, assign_buckets(EX3_SIZES, 12 * MB), EX4_READY_S, EX4_RING, 7.5e-3)


def no_overlap_possible(solution: ModuleType) -> None:
    sizes = [4 * MB, 4 * MB, 4 * MB, 4 * MB]
    _check_timeline(solution, sizes, assign_buckets(sizes, 8 * MB), [3e-3] * 4, EX4_RING)


def out_of_index_order(solution: ModuleType) -> None:
    # bucket 0 = {p3, p2} is ready at 3 ms, bucket 1 = {p1, p0} already at 1 ms: bucket 1 waits
    sizes = [4 * MB, 4 * MB, 4 * MB, 4 * MB]
    _check_timeline(solution, sizes, assign_buckets(sizes, 8 * MB), [1e-3, 1e-3, 3e-3, 3e-3], EX4_RING)


def resnet50_section3(solution: ModuleType) -> None:
    model = resnet50()
    ready = gradient_ready_times(model, ComputeModel())
    sizes = model.param_bytes()
    _check_timeline(solution, sizes, assign_buckets(sizes, 25 * MB), ready, S3_RING, 37.8e-3)


def cap_zero_timeline(solution: ModuleType) -> None:
    model = resnet50()
    ready = gradient_ready_times(model, ComputeModel())
    sizes = model.param_bytes()
    _check_timeline(solution, sizes, assign_buckets(sizes, 0), ready, S3_RING)


CASES = [
    Case("buckets: lecture 15 exercise 3, 10, 2, 8, 20, 4 MB, cap 12 MB (the notes: {p4, p3}, {p2, p1, p0})", exercise3, HINT_SEAL),
    Case("buckets: a bucket that reaches the cap exactly is sealed", exactly_at_cap, HINT_SEAL),
    Case("buckets: cap 0 gives a bucket per parameter", cap_zero, HINT_SEAL),
    Case("buckets: a cap above the total gives one bucket", one_bucket, HINT_SEAL),
    Case("buckets: a parameter larger than the cap", larger_than_cap, HINT_SEAL),
    Case("buckets: ResNet-50, first bucket 1 MiB, then 25 MiB", first_bucket, HINT_FIRST),
    Case("buckets: a first-bucket cap larger than the cap", first_bucket_larger, HINT_FIRST),
    Case("buckets: 30 random size lists and caps", random_buckets, HINT_SEAL, quick=False),
    Case("all-reduce time: ring α-β cost for K = 16, 2, 3, 8", ring_times, HINT_RING),
    Case("all-reduce time: one rank sends nothing", ring_one_rank, HINT_RING),
    Case("timeline: lecture 15 exercise 4, 0.5 ms + 0.1 ms/MB per all-reduce (the notes: step 7.5 ms)", exercise4, HINT_TIMELINE),
    Case("timeline: every gradient ready at once, no overlap possible", no_overlap_possible, HINT_TIMELINE),
    Case("timeline: bucket 1 ready before bucket 0 still waits", out_of_index_order, HINT_TIMELINE),
    Case("timeline: ResNet-50 in §3's setting, 16 ranks, 25 MB buckets (the notes: step 37.8 ms)", resnet50_section3, HINT_TIMELINE),
    Case("timeline: ResNet-50 with cap 0 (161 all-reduces)", cap_zero_timeline, HINT_TIMELINE, quick=False),
]
