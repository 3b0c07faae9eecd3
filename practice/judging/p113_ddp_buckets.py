"""Problem 113's cases: DDP's buckets, the ring all-reduce's α-β cost, the overlap timeline.

Expected values come from the suite's own models: lecture15.ddp_sim (PyTorch's bucket rule and the
one-stream timeline, itself tested against torch's `_compute_bucket_assignment_by_size`) and
common.costmodel.collectives (the ring's α-β time). Where a case is one of lecture 15's exercises, the notes'
answer is shown beside the model's. Every call's arguments come back with its result: a function
that changes its caller's lists fails. A hint names what differs: buckets that a common mistake
gives exactly (> for >=, a forward walk, the first cap misread) by that mistake, a span by its
start or its length, a ring time that is one phase or whole-tensor messages.
"""

from __future__ import annotations

import math
import numbers
import random
from types import ModuleType
from typing import Any

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.units import MB, MiB
from judging.engine import Case
from judging.messages import kind, show
from judging.sandbox import Fail, call
from lecture15.ddp_sim import (
    DEFAULT_FIRST_BUCKET_BYTES,
    ComputeModel,
    assign_buckets,
    assign_buckets_in_order,
    gradient_ready_times,
    simulate_backward,
)
from lecture15.models import resnet50

RING_ALLREDUCE = algorithm("ring all-reduce")

FUNCTIONS = ("assign_buckets", "allreduce_time", "timeline")
REL_TOL = 1e-9
EX3_SIZES = [10 * MB, 2 * MB, 8 * MB, 20 * MB, 4 * MB]        # lecture 15 exercise 3: p0 … p4
EX4_READY_S = [5e-3, 4e-3, 3e-3, 2e-3, 1e-3]                  # exercise 4: p4 ready at 1 ms … p0 at 5 ms
# Exercise 4's "0.5 ms + 0.1 ms/MB" per all-reduce is the ring's 2(K−1)(α + n/(Kβ)) at K = 2,
# α = 0.25 ms, β = 10 GB/s: 2α = 0.5 ms, n/β = 0.1 ms per 10^6 bytes.
EX4_RING = {"world_size": 2, "alpha_s": 0.25e-3, "beta_Bps": 10e9}
S3_RING = {"world_size": 16, "alpha_s": 10e-6, "beta_Bps": 10e9}   # lecture 15 §3: 16 ranks, 10 µs, 10 GB/s
RANDOM_SEED = 113

HINT_SEAL = "README hint 1: walk the parameters in reverse, seal AFTER adding once bytes >= the cap"
HINT_GE = HINT_SEAL + " (>=, not >: a bucket that lands exactly on the cap is sealed)"
HINT_REVERSE = "README hint 1: walk the parameters in REVERSE registration order (backward's order)"
HINT_FIRST = (
    "README hint 2: the first bucket has its own cap (0 counts: only None means none); later ones cap_bytes"
)
HINT_FIRST_ONLY = ("README hint 2: first_cap_bytes caps the first bucket only; after the first seal, "
                   "cap_bytes")
HINT_EVERY = ("README hint 1: every parameter in exactly one bucket; the bucket still open at the end is "
              "the last")
HINT_INSIDE = ("README hint 1: a bucket lists its indices in the order they were added (the last parameter "
               "first)")
HINT_RING = "README hint 3: 2(K − 1) messages of n/K bytes, each α + size/β; K = 1 sends nothing"
HINT_PHASES = "README hint 3: a reduce-scatter AND an all-gather, K − 1 steps each: 2(K − 1) messages"
HINT_CHUNK_BYTES = "README hint 3: each message carries one chunk, n/K bytes, not the whole n"
HINT_TIMELINE = "README hint 4: bucket b starts at max(its LATEST gradient's ready time, bucket b − 1's end)"
HINT_SPAN_COST = "README hint 3: a bucket's all-reduce lasts allreduce_time(the bucket's BYTES, K, α, β)"
HINT_STEP = "README hint 5: the step ends at the last gradient or the last all-reduce, whichever is later"
HINT_EXPOSED = ("README hint 5: exposed = step end − max(ready_s): a bucket still running when backward "
                "ends counts for the part after it")
HINT_ARGS = "leave the caller's lists as they were: work on a copy (reversed(...), list(...))"
HINT_DEADLOCK = "a loop that never ends? every loop over the parameters must stop at the last one"


# ---- in the solution's process -----------------------------------------------------------------------
def collect_buckets(solution: ModuleType, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    return [call(solution, "assign_buckets", *args) for args in inputs["calls"]]


def collect_time(solution: ModuleType, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    return [call(solution, "allreduce_time", *args) for args in inputs["calls"]]


def collect_timeline(solution: ModuleType, inputs: dict[str, Any]) -> dict[str, Any]:
    names = ("param_bytes", "buckets", "ready_s", "world_size", "alpha_s", "beta_Bps")
    return call(solution, "timeline", *(inputs[n] for n in names))


# ---- in the judge's process ------------------------------------------------------------------------------
def _unchanged(sent: list[Any], came_back: Any, names: tuple[str, ...], inputs: Any) -> None:
    for name, before, after in zip(names, sent, came_back):
        if before != after:
            raise Fail(f"{name} unchanged: {show(before)}", f"after the call: {show(after)}", HINT_ARGS,
                       inputs)


def _as_buckets(value: Any, hint: str, inputs: Any) -> list[list[int]]:
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(b, (list, tuple)) and all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                                             for i in b)
        for b in value)
    if not ok:
        raise Fail("a list of buckets, each a list of parameter indices (ints)", kind(value), hint, inputs)
    return [[int(i) for i in b] for b in value]


def _mistakes(sizes: list[int], cap: int, first: int | None) -> list[tuple[list[list[int]], str]]:
    """What the common mistakes give for one call, each with its hint: the model's own rule with
    one thing changed (> for >= is >= cap + 1, the sizes being ints)."""
    n = len(sizes)
    return [(assign_buckets(sizes, cap + 1, None if first is None else first + 1), HINT_GE),
            (assign_buckets_in_order(sizes, range(n), cap, first), HINT_REVERSE),
            (assign_buckets(sizes, cap, first or None), HINT_FIRST),
            (assign_buckets(sizes, cap), HINT_FIRST),
            (assign_buckets(sizes, cap if first is None else first, first), HINT_FIRST_ONLY)]


def bucket_hint(args: list[Any], expected: list[list[int]], got: list[list[int]]) -> str:
    """The hint for what differs: a known mistake that gives exactly `got`, else what is off."""
    sizes, cap, first = (list(args) + [None])[:3]
    for buckets, hint in _mistakes(sizes, cap, first):
        if got == buckets != expected:
            return hint
    if sorted(i for b in got for i in b) != list(range(len(sizes))):
        return HINT_EVERY
    if [sorted(b) for b in got] == [sorted(b) for b in expected]:
        return HINT_INSIDE
    wrong = next((b for b, (e, g) in enumerate(zip(expected, got)) if e != g), min(len(expected), len(got)))
    if first is not None and wrong <= 1:    # the first bucket wrong, or the one where the caps change
        return HINT_FIRST if wrong == 0 else HINT_FIRST_ONLY
    return HINT_SEAL


def check_buckets(inputs: dict[str, Any], data: list[dict[str, Any]], notes: str = "") -> None:
    for args, result in zip(inputs["calls"], data):
        shown = dict(zip(("param_bytes", "cap_bytes", "first_cap_bytes"), args))
        _unchanged(args, result["args"], ("param_bytes",), shown)
        expected = assign_buckets(*args)
        got = _as_buckets(result["returned"], HINT_SEAL, shown)
        if got != expected:
            raise Fail(show(expected) + (f" (the notes' answer: {notes})" if notes else ""), show(got),
                       bucket_hint(args, expected, got), shown)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-15)


def _number(value: Any, what: str, hint: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(float(value)):
        raise Fail(f"{what} as a float (seconds)", kind(value), hint)
    return float(value)


def check_time(inputs: dict[str, Any], data: list[dict[str, Any]]) -> None:
    for (nbytes, k, alpha_s, beta), result in zip(inputs["calls"], data):
        expected = RING_ALLREDUCE.time(k, nbytes, Link(alpha_s, beta))
        got = _number(result["returned"], "the all-reduce time", HINT_RING)
        if not _close(got, expected):
            # what it is instead chooses the hint: one phase of the two, or whole tensors as messages
            hint = (HINT_PHASES if _close(2 * got, expected) else HINT_CHUNK_BYTES
                    if _close(got, RING_ALLREDUCE.time(k, nbytes * k, Link(alpha_s, beta))) else HINT_RING)
            raise Fail(f"{expected!r} s for {nbytes:,} B on K = {k}", f"{got!r} s", hint)


def _model_spans(inputs: dict[str, Any]) -> Any:
    link = Link(inputs["alpha_s"], inputs["beta_Bps"])
    return simulate_backward(inputs["ready_s"], inputs["param_bytes"], inputs["buckets"],
                             lambda nbytes: RING_ALLREDUCE.time(inputs["world_size"], nbytes, link))


def _check_spans(inputs: dict[str, Any], got_spans: Any, spans: list[tuple[float, float]]) -> None:
    """Each bucket's (start, end): the start rule first, then the all-reduce's length."""
    if not (isinstance(got_spans, (list, tuple)) and len(got_spans) == len(spans)
            and all(isinstance(s, (list, tuple)) and len(s) == 2 for s in got_spans)):
        raise Fail(f"{len(spans)} spans (start_s, end_s), one per bucket, in bucket order", kind(got_spans),
                   HINT_TIMELINE)
    for b, ((s, e), (gs, ge)) in enumerate(zip(spans, got_spans)):
        gs = _number(gs, f"bucket {b}'s start", HINT_TIMELINE)
        ge = _number(ge, f"bucket {b}'s end", HINT_TIMELINE)
        if not (_close(gs, s) and _close(ge, e)):
            # what differs chooses the hint: when it starts, or how long it lasts
            hint = HINT_TIMELINE if not _close(gs, s) else HINT_SPAN_COST
            raise Fail(f"bucket {b} all-reduce from {s * 1e3:.6g} to {e * 1e3:.6g} ms",
                       f"{gs * 1e3:.6g} to {ge * 1e3:.6g} ms", hint)


def check_timeline(inputs: dict[str, Any], data: dict[str, Any], notes_step_s: float | None = None) -> None:
    _unchanged([inputs["param_bytes"], inputs["buckets"], inputs["ready_s"]], data["args"],
               ("param_bytes", "buckets", "ready_s"), None)
    model, got = _model_spans(inputs), data["returned"]
    if not (isinstance(got, (list, tuple)) and len(got) == 3):
        raise Fail("a tuple (spans, step_end_s, exposed_s)", kind(got), HINT_TIMELINE)
    got_spans, got_step, got_exposed = got
    _check_spans(inputs, got_spans, [(e.start_s, e.end_s) for e in model.comm_events()])
    step = _number(got_step, "the step end", HINT_STEP)
    notes = f" (the notes: {notes_step_s * 1e3:g} ms)" if notes_step_s is not None else ""
    if not _close(step, model.step_s):
        raise Fail(f"step end {model.step_s * 1e3:.6g} ms{notes}", f"{step * 1e3:.6g} ms", HINT_STEP)
    exposed = _number(got_exposed, "the exposed communication", HINT_EXPOSED)
    if not _close(exposed, model.exposed_comm_s):
        raise Fail(f"exposed communication {model.exposed_comm_s * 1e3:.6g} ms "
                   f"(backward ends at {max(inputs['ready_s']) * 1e3:.6g} ms)", f"{exposed * 1e3:.6g} ms",
                   HINT_EXPOSED)


# ---- the cases ---------------------------------------------------------------------------------------------
def bucket_case(name: str, calls: list[tuple], hint: str, notes: str = "", quick: bool = True) -> Case:
    return Case(name, {"calls": [list(c) for c in calls]}, collect_buckets,
                lambda inputs, data: check_buckets(inputs, data, notes), hint, quick)


def timeline_case(name: str, sizes: list[int], cap: int, ready_s: list[float], ring: dict[str, Any],
                  notes_step_s: float | None = None, quick: bool = True) -> Case:
    inputs = {"param_bytes": sizes, "buckets": assign_buckets(sizes, cap), "ready_s": ready_s, **ring}
    return Case(name, inputs, collect_timeline, lambda i, data: check_timeline(i, data, notes_step_s),
                HINT_TIMELINE, quick)


def random_calls(seed: int = RANDOM_SEED, count: int = 30) -> list[tuple]:
    """Seeded size lists and caps (a first cap of None, 0, 16 or the cap itself)."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        sizes = [rng.choice([1, 2, 4, 8, 64, 256]) * rng.randint(1, 4) for _ in range(rng.randint(1, 12))]
        cap = rng.choice([0, 1, 8, 64, 100, 512, 10_000])
        calls.append((sizes, cap, rng.choice([None, 0, 16, cap])))
    return calls


_RESNET = resnet50()
_RESNET_SIZES = _RESNET.param_bytes()
_RESNET_READY = gradient_ready_times(_RESNET, ComputeModel())
# Gradients ready out of index order inside each bucket: [[5, 4, 3], [2, 1, 0]] with the latest one
# in the middle (p4) and first added (p2): neither the last added nor the lowest index is the latest.
_MIXED_READY = [1e-3, 2e-3, 8e-3, 1e-3, 6e-3, 2e-3]
# Buckets [[3, 2], [1, 0]] of 8 MB (1.3 ms each at EX4_RING): bucket 0 runs 1 → 2.3 ms, across the
# backward's end at 2 ms; bucket 1 then waits for it, 2.3 → 3.6 ms. Exposed: 1.6 ms, not the 1.3 ms
# of the buckets that start after the backward, nor the 2.6 ms of those that end after it.
_ACROSS_READY = [2e-3, 1.5e-3, 1e-3, 1e-3]
_EX3 = "lecture 15 exercise 3, 10, 2, 8, 20, 4 MB, cap 12 MB (the notes: {p4, p3}, {p2, p1, p0})"

CASES = [
    bucket_case(f"buckets: {_EX3}", [(EX3_SIZES, 12 * MB)], HINT_SEAL, "{p4, p3}, {p2, p1, p0}"),
    bucket_case("buckets: a bucket that reaches the cap exactly is sealed", [([1, 3, 2, 2], 4)], HINT_GE),
    bucket_case("buckets: cap 0 gives a bucket per parameter", [([8, 16, 4, 32, 8], 0)],
                HINT_SEAL + ": with cap 0 every parameter seals"),
    bucket_case("buckets: a cap above the total gives one bucket", [([8, 16, 4, 32, 8], 1000)], HINT_EVERY),
    bucket_case("buckets: a parameter larger than the cap", [([3, 100, 3], 10)],
                HINT_SEAL + "; a large parameter joins the open bucket"),
    bucket_case("buckets: ResNet-50, first bucket 1 MiB, then 25 MiB",
                [(_RESNET_SIZES, 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES)], HINT_FIRST),
    bucket_case("buckets: a first-bucket cap larger than the cap", [([4, 4, 4, 4, 4, 4], 4, 12)], HINT_FIRST),
    bucket_case("buckets: a first-bucket cap of 0 is given: the first bucket seals after one parameter",
                [([4, 4, 4, 4], 8, 0)], HINT_FIRST),
    bucket_case(f"buckets: 30 random size lists and caps (seed {RANDOM_SEED})", random_calls(), HINT_SEAL,
                quick=False),
    Case("all-reduce time: ring α-β cost for K = 16, 2, 3, 8",
         {"calls": [[25 * MiB, 16, 10e-6, 10e9], [10 * MB, 2, 0.25e-3, 10e9], [1000, 3, 5e-6, 25e9],
                    [0, 8, 5e-6, 25e9]]}, collect_time, check_time, HINT_RING),
    Case("all-reduce time: one rank sends nothing", {"calls": [[64 * MB, 1, 5e-6, 25e9]]}, collect_time,
         check_time, HINT_RING),
    timeline_case("timeline: lecture 15 exercise 4, 0.5 ms + 0.1 ms/MB per all-reduce "
                  "(the notes: step 7.5 ms)", EX3_SIZES, 12 * MB, EX4_READY_S, EX4_RING, 7.5e-3),
    timeline_case("timeline: every gradient ready at once, no overlap possible", [4 * MB] * 4, 8 * MB,
                  [3e-3] * 4, EX4_RING),
    timeline_case("timeline: bucket 1 ready before bucket 0 still waits", [4 * MB] * 4, 8 * MB,
                  [1e-3, 1e-3, 3e-3, 3e-3], EX4_RING),
    timeline_case("timeline: inside a bucket, gradients ready out of index order (the latest one counts)",
                  [2 * MB] * 6, 6 * MB, _MIXED_READY, EX4_RING),
    timeline_case("timeline: a bucket still running when the backward ends (part of it exposed)",
                  [4 * MB] * 4, 8 * MB, _ACROSS_READY, EX4_RING),
    timeline_case("timeline: ResNet-50 in §3's setting, 16 ranks, 25 MB buckets (the notes: step 37.8 ms)",
                  _RESNET_SIZES, 25 * MB, _RESNET_READY, S3_RING, 37.8e-3),
    timeline_case("timeline: ResNet-50 with cap 0 (161 all-reduces)", _RESNET_SIZES, 0, _RESNET_READY,
                  S3_RING, quick=False),
]
