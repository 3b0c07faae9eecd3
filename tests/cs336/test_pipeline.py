"""CS336 pipeline parallelism: the schedule simulator (cs336/pipeline.py) against closed forms and an
independent check of every event."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from cs336 import pipeline as pp

GRID = [(s, m) for s in (1, 2, 3, 4, 5, 8) for m in (1, 2, 3, 4, 7, 8, 16)]


def check_events(run: pp.PipelineRun, t_f: list[float], t_b: list[float], p2p: float = 0.0) -> None:
    """From the events alone: each pass ran once, for its duration; no device ran two at once; every
    pass started after its inputs (+ p2p across devices), and as early as those and its device allow."""
    tol = 1e-9 * max(1.0, run.makespan)
    v, n_v = run.virtual, run.stages * run.virtual
    events = list(run.events())
    ends = {(e.kind, e.chunk, e.index): e.end_s for e in events}
    assert len(ends) == len(events) == 2 * n_v * run.micro_batches
    assert set(ends) == {(k, j, m) for k in "FB" for j in range(n_v) for m in range(run.micro_batches)}
    by_device = defaultdict(list)
    for e in events:
        assert e.row == e.chunk % run.stages
        assert e.end_s - e.start_s == pytest.approx((t_f if e.kind == "F" else t_b)[e.row] / v, abs=tol)
        by_device[e.row].append(e)
    for evs in by_device.values():
        evs.sort(key=lambda e: e.start_s)
        for before, after in zip(evs, evs[1:]):
            assert after.start_s >= before.end_s - tol, (before, after)          # one pass at a time
    for device, evs in by_device.items():
        free = 0.0
        for e in sorted(evs, key=lambda e: e.start_s):
            if e.kind == "F":
                # An input from another device arrives p2p later.
                hop = p2p if (e.chunk - 1) % run.stages != device else 0
                deps = [ends[("F", e.chunk - 1, e.index)] + hop] if e.chunk > 0 else []
            else:
                deps = [ends[("F", e.chunk, e.index)]]
                if e.chunk < n_v - 1:
                    hop = p2p if (e.chunk + 1) % run.stages != device else 0
                    deps.append(ends[("B", e.chunk + 1, e.index)] + hop)
            for dep in deps:
                assert e.start_s >= dep - tol, e                                 # after its inputs
            assert e.start_s == pytest.approx(max([free] + deps), abs=tol), e     # and no later
            free = e.end_s
    assert run.makespan == pytest.approx(max(e.end_s for e in events), abs=tol)


def peak_from_events(run: pp.PipelineRun) -> list[float]:
    """Most activations held at once per device, from the times: held from a forward's end until
    the matching backward's end (a backward ending frees before a forward ending at the same time adds)."""
    peaks = []
    for d in range(run.stages):
        marks = []
        for e in run.events():
            if e.row == d:
                marks.append((e.end_s, 0 if e.kind == "B" else 1, -1 if e.kind == "B" else 1))
        held = peak = 0
        for _, _, delta in sorted(marks):
            held += delta
            peak = max(peak, held)
        peaks.append(peak / run.virtual)
    return peaks


# ---- the simulator --------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_bubble_is_the_closed_form(schedule: str, ratio: float) -> None:
    t_f = 0.01
    t_b = ratio * t_f
    for s, m in GRID + [(16, 64), (32, 5)]:
        run = pp.run_schedule(schedule, s, m, t_f, t_b)
        ideal = (s - 1) * (t_f + t_b) / (m * (t_f + t_b) + (s - 1) * (t_f + t_b))   # = (S-1)/(M+S-1)
        assert run.bubble_fraction == pytest.approx(ideal, rel=1e-12, abs=1e-15), (s, m)
        assert run.bubble_fraction == pytest.approx((s - 1) / (m + s - 1), rel=1e-12, abs=1e-15)
        assert run.makespan == pytest.approx((m + s - 1) * (t_f + t_b), rel=1e-12)
        assert all(b == pytest.approx(m * (t_f + t_b)) for b in run.busy)


def test_p2p_costs_gpipe_one_fill_and_one_drain() -> None:
    for s, m in GRID:
        gpipe = pp.run_schedule("GPipe", s, m, 1.0, 2.0, p2p_s=0.25)
        assert gpipe.makespan == pytest.approx((m + s - 1) * 3.0 + 2 * (s - 1) * 0.25)
        assert pp.run_schedule("1F1B", s, m, 1.0, 2.0, p2p_s=0.25).makespan >= gpipe.makespan - 1e-9


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_every_event_respects_its_dependencies(schedule: str) -> None:
    rng = random.Random(1)
    for s, m in GRID:
        check_events(pp.run_schedule(schedule, s, m, 1.0, 2.0), [1.0] * s, [2.0] * s)
        t_f = [rng.uniform(0.5, 3) for _ in range(s)]
        t_b = [rng.uniform(0.5, 6) for _ in range(s)]
        check_events(pp.run_schedule(schedule, s, m, t_f, t_b, p2p_s=0.3), t_f, t_b, p2p=0.3)


@pytest.mark.parametrize("s,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 2), (4, 8, 3), (8, 16, 2), (3, 9, 4),
                                   (4, 4, 2)])
def test_interleaved_respects_dependencies_and_divides_the_bubble_by_v(s: int, m: int, v: int) -> None:
    run = pp.run_schedule("interleaved", s, m, 1.0, 2.0, virtual=v)
    check_events(run, [1.0] * s, [2.0] * s)
    plain = pp.run_schedule("1F1B", s, m, 1.0, 2.0)
    assert run.makespan == pytest.approx(m * 3.0 + (s - 1) * 3.0 / v)              # Narayanan et al.
    assert max(run.idle) == pytest.approx(max(plain.idle) / v)
    assert peak_from_events(run) == pytest.approx(run.peak_activations)
    t_f = [1.0, 2.5, 0.7, 1.2][:s] + [1.0] * max(0, s - 4)
    check_events(pp.run_schedule("interleaved", s, m, t_f, 2.0, p2p_s=0.2, virtual=v), t_f, [2.0] * s,
                 p2p=0.2)


def test_activation_peaks() -> None:
    for s, m in GRID:
        gpipe, ofob = pp.run_schedule("GPipe", s, m, 1.0, 2.0), pp.run_schedule("1F1B", s, m, 1.0, 2.0)
        assert gpipe.peak_activations == [m] * s
        assert all(p <= s - d for d, p in enumerate(ofob.peak_activations))
        assert ofob.peak_activations == [min(s - d, m) for d in range(s)]
        assert peak_from_events(gpipe) == gpipe.peak_activations
        assert peak_from_events(ofob) == ofob.peak_activations


def _one_more(schedule: str, s: int, m: int, t_f: list[float], t_b: list[float]) -> float:
    """How much longer the schedule runs with m + 1 micro-batches than with m."""
    return (pp.run_schedule(schedule, s, m + 1, t_f, t_b).makespan
            - pp.run_schedule(schedule, s, m, t_f, t_b).makespan)


def test_unbalanced_stages_are_bounded_by_the_slowest() -> None:
    rng = random.Random(7)
    for _ in range(60):
        s, m = rng.randint(1, 7), rng.randint(1, 20)
        t_f = [rng.uniform(1, 5) for _ in range(s)]
        t_b = [rng.uniform(1, 10) for _ in range(s)]
        slowest = max(a + b for a, b in zip(t_f, t_b))
        for schedule in ("GPipe", "1F1B"):
            run = pp.run_schedule(schedule, s, m, t_f, t_b)
            assert run.makespan >= m * slowest - 1e-9
            assert run.makespan >= sum(t_f) + sum(t_b) - 1e-9            # one micro-batch's whole path
        # Once settled, one more micro-batch costs the slowest stage's time (1F1B) ...
        big = 20 * s
        assert _one_more("1F1B", s, big, t_f, t_b) == pytest.approx(slowest)
        # ... and GPipe's forward and backward phases each run at their slowest stage's pace.
        assert _one_more("GPipe", s, big, t_f, t_b) == pytest.approx(max(t_f) + max(t_b))


@pytest.mark.parametrize("s", [2, 3, 4, 8, 16])
def test_one_slow_stage_sets_the_pace_from_m_equal_s(s: int) -> None:
    for factor in (1.1, 2.0, 3.0):
        for slow in {0, s // 2, s - 1}:
            t_f = [10.0 * (factor if d == slow else 1) for d in range(s)]
            t_b = [20.0 * (factor if d == slow else 1) for d in range(s)]
            for m in (s, 2 * s + 1):
                assert _one_more("1F1B", s, m, t_f, t_b) == pytest.approx(30.0 * factor)


def test_bad_orders_and_inputs_are_refused() -> None:
    deadlock = pp.one_f_one_b_order(2, 2)
    deadlock[0] = [("B", 0, 0), ("F", 0, 0), ("F", 1, 0), ("B", 1, 0)]   # a backward before its forward
    with pytest.raises(ValueError, match="deadlock"):
        pp.simulate(deadlock, 2, 1.0, 2.0)
    missing = pp.gpipe_order(2, 2)
    missing[1] = missing[1][:-1]
    with pytest.raises(ValueError):
        pp.simulate(missing, 2, 1.0, 2.0)
    with pytest.raises(ValueError, match="multiple"):
        pp.interleaved_order(4, 6, 2)
    with pytest.raises(ValueError):
        pp.run_schedule("1F1B", 3, 4, [1.0, 2.0], 1.0)
    with pytest.raises(ValueError):
        pp.run_schedule("1F1B", 0, 4, 1.0, 1.0)


def test_smallest_micro_batches_for_five_percent() -> None:
    for s in (2, 4, 8, 16, 33):
        real = pp.smallest_micro_batches(s, 0.05 + 1e-12, lambda m, s=s: pp.bubble_fraction_closed_form(s, m))
        assert real == 19 * (s - 1)
        notes = pp.smallest_micro_batches(s, 0.05 + 1e-12,
                                          lambda m, s=s: pp.notes_bubble_share(s, m, 1.0, 2.0))
        assert notes == -(-19 * (s - 1) // 3)                     # ceil(19(S-1)/3)
        assert (pp.notes_bubble_share(s, notes, 1.0, 2.0) <= 0.05 + 1e-12
                < pp.notes_bubble_share(s, notes - 1, 1.0, 2.0))
    assert pp.notes_bubble_share(8, 44, 0.01, 0.02) == pytest.approx(7 / 139)     # the notes' 44: 5.04 %


def test_ascii_chart() -> None:
    rows, how = pp.ascii_chart(pp.run_schedule("GPipe", 4, 8, 0.010, 0.020))
    assert rows[0] == "stage 0 |0011223344556677" + "." * 18 + "aaaabbbbccccddddeeeeffffgggghhhh|"
    assert rows[3] == "stage 3 |......0011223344556677aaaabbbbccccddddeeeeffffgggghhhh............|"
    assert "5 ms" in how
    rows, how = pp.ascii_chart(pp.run_schedule("1F1B", 4, 8, 0.010, 0.020))
    assert rows[0].startswith("stage 0 |00112233" + "." * 12 + "aaaa44bbbb")
    for s, m in [(64, 1024), (16, 64), (128, 3), (1, 1)]:
        rows, how = pp.ascii_chart(pp.run_schedule("1F1B", s, m, 0.010, 0.020))
        assert all(len(r) <= 98 for r in rows) and len(rows) <= 17
        if s * m > 100:
            assert how.startswith("scaled")
            assert set("".join(r.split("|")[1] for r in rows if "|" in r)) <= set("#+-.")
