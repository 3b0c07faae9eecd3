"""The collectives simulator against independent references: np.sum, np.array_split chunk sizes,
the notes' printed ring states, and the closed forms of costmodel.collectives and lecture14.costmodel."""

from __future__ import annotations

import numpy as np
import pytest

from common.costmodel.collectives import algorithm, tree_depth
from common.costmodel.link import NOTES_LINK, Link
from lecture14 import collectives as col
from lecture14 import costmodel as cm
from lecture14.symbolic import Sym, format_chunks, symbolic_inputs, worker_name

BROADCAST = algorithm("pipelined ring broadcast")

RNG = np.random.default_rng(2024)
# Random (K, length) pairs with K in 1..17; lengths below K, not divisible by K, and zero included.
CASES = sorted({(int(k), int(n)) for k, n in zip(RNG.integers(1, 18, 25), RNG.integers(0, 60, 25))}
               | {(1, 0), (1, 5), (4, 3), (5, 7), (7, 7), (16, 64), (17, 3)})
LINKS = [NOTES_LINK, Link(10e-6, 10e9), Link(0.0, 3.125e9)]


def random_inputs(k: int, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1000 * k + n)
    return [rng.standard_normal(n) for _ in range(k)]


def int_inputs(k: int, n: int) -> list[np.ndarray]:
    """Small integers as float64: every summation order gives the same, exact result."""
    rng = np.random.default_rng(k * 100 + n)
    return [rng.integers(-1000, 1000, n).astype(np.float64) for _ in range(k)]


@pytest.mark.parametrize("k,n", CASES)
def test_every_allreduce_equals_np_sum(k: int, n: int) -> None:
    xs = random_inputs(k, n)
    ref = np.sum(np.stack(xs), axis=0) if n else np.zeros(0)
    for res in (col.ring_allreduce(xs), col.tree_allreduce(xs), col.naive_allreduce(xs), col.allreduce(xs),
                col.allreduce(xs, "tree all-reduce"), col.parameter_server(xs)):
        assert len(res.outputs) >= k
        for out in res.outputs:
            np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    exact = int_inputs(k, n)
    ref_exact = np.sum(np.stack(exact), axis=0) if n else np.zeros(0)
    assert all(np.array_equal(o, ref_exact) for o in col.ring_allreduce(exact).outputs)


@pytest.mark.parametrize("k,n", CASES)
def test_primitives_equal_numpy(k: int, n: int) -> None:
    xs = random_inputs(k, n, seed=1)
    ref = np.sum(np.stack(xs), axis=0) if n else np.zeros(0)
    root = (k * 7 + n) % k
    assert all(np.array_equal(o, xs[root]) for o in col.broadcast(xs, root).outputs)
    red = col.reduce(xs, root).outputs
    np.testing.assert_allclose(red[root], ref, rtol=1e-12, atol=1e-12)
    assert all(o is None for r, o in enumerate(red) if r != root)
    pieces = col.reduce_scatter(xs).outputs
    for piece, want in zip(pieces, np.array_split(ref, k)):
        np.testing.assert_allclose(piece, want, rtol=1e-12, atol=1e-12)
    uneven = [np.arange(r % 3 + (n % 2), dtype=float) + r for r in range(k)]  # lengths differ
    for out in col.all_gather(uneven).outputs:
        assert np.array_equal(out, np.concatenate(uneven))


@pytest.mark.parametrize("k,n", CASES)
def test_identities_in_the_simulator(k: int, n: int) -> None:
    xs = int_inputs(k, n)
    direct = col.allreduce(xs).outputs
    summed = col.reduce(xs, 0).outputs[0]
    via_root = col.broadcast([summed] + xs[1:], 0).outputs
    via_chunks = col.all_gather(col.reduce_scatter(xs).outputs).outputs
    for a, b, c in zip(direct, via_root, via_chunks):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    params = np.arange(n, dtype=float)
    ps = col.parameter_server(xs, params=params, lr=0.5)
    want = params - 0.5 * np.sum(np.stack(xs), axis=0) / k if n else params
    assert all(np.allclose(o, want) for o in ps.outputs)


def test_ring_bytes_per_device_when_k_divides_n() -> None:
    for k in (2, 3, 4, 8, 16, 64):
        n = 4 * k * 37
        res = col.ring_allreduce([np.zeros(n, dtype=np.float32)] * k)
        nbytes = 4 * n
        assert res.sent.tolist() == [2 * (k - 1) * nbytes // k] * k
        assert res.received.tolist() == res.sent.tolist()
        assert res.sent[0] == algorithm("ring all-reduce").busiest_bytes(k, nbytes)
        assert res.n_rounds == 2 * (k - 1)


@pytest.mark.parametrize("k,n", [(3, 10), (4, 7), (5, 3), (8, 61), (16, 1000), (7, 0)])
def test_ring_bytes_exact_chunk_sums_when_not_divisible(k: int, n: int) -> None:
    sizes = [len(c) * 4 for c in np.array_split(np.zeros(n, dtype=np.float32), k)]
    res = col.ring_allreduce([np.zeros(n, dtype=np.float32)] * k)
    for r in range(k):
        # Reduce-scatter sends every chunk but (r+1) mod K; all-gather every chunk but (r+2) mod K.
        assert res.sent[r] == 2 * 4 * n - sizes[(r + 1) % k] - sizes[(r + 2) % k]
    assert res.sent.sum() == res.received.sum()


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8, 13, 16])
@pytest.mark.parametrize("link", LINKS)
def test_traffic_rounds_and_time_match_closed_forms(k: int, link: Link) -> None:
    n_elems = 16 * 3 * 5 * 7 * 13  # divisible by every K above
    nbytes = 4 * n_elems
    xs = [np.ones(n_elems, dtype=np.float32)] * k
    sims = {"ring": col.ring_allreduce(xs), "tree": col.tree_allreduce(xs),
            "naive": col.naive_allreduce(xs), "parameter server": col.parameter_server(xs)}
    closed = {name: algorithm(name if name == "parameter server" else f"{name} all-reduce") for name in sims}
    for name, res in sims.items():
        busiest, total = closed[name].busiest_bytes(k, nbytes), closed[name].total_bytes(k, nbytes)
        assert res.busiest_sent == busiest and res.total_sent == total, name
        assert res.busiest_received == busiest, name
    assert sims["tree"].n_rounds == 2 * tree_depth(k)
    assert sims["ring"].n_rounds == 2 * (k - 1)
    assert sims["naive"].n_rounds == (2 if k > 1 else 0) and sims["parameter server"].n_rounds == 2
    for name, res in sims.items():
        assert res.time(link) == pytest.approx(closed[name].time(k, nbytes, link), rel=1e-12), name


@pytest.mark.parametrize("k", [2, 3, 4, 8, 11])
@pytest.mark.parametrize("segments", [1, 2, 5, 16, 64])
def test_pipelined_broadcast_ticks_and_time(k: int, segments: int) -> None:
    nbytes = 64 * 5 * 10**4  # divisible by every S above
    res = col.pipelined_ring_broadcast(nbytes, k, segments)
    assert res.n_rounds == k - 2 + segments
    for link in LINKS:
        assert res.time(link) == pytest.approx(BROADCAST.time(k, nbytes, link, segments), rel=1e-12)
    assert res.received.tolist() == [0] + [nbytes] * (k - 1)  # every non-root gets N, once
    data = np.arange(23, dtype=np.float32)  # real data, segments not dividing it, another root
    moved = col.pipelined_ring_broadcast(data, k, segments, root=k - 1)
    assert moved.n_rounds == k - 2 + segments
    assert all(np.array_equal(out, data) for out in moved.outputs)
    # No link carries more than one segment per tick.
    for rnd in moved.rounds:
        assert len({t.src for t in rnd.transfers}) == len(rnd.transfers)


def test_best_segments_by_simulation_matches_costmodel() -> None:
    k, n = 8, 64_000_000
    times = {2**i: col.pipelined_ring_broadcast(n, k, 2**i).time(NOTES_LINK) for i in range(11)}
    assert min(times, key=times.get) == cm.best_broadcast_segments(k, n, NOTES_LINK) == 64


def test_symbolic_ring_k4_matches_the_notes() -> None:
    res = col.ring_allreduce(symbolic_inputs(4), history=True)
    after_rs = [r for r in res.rounds if r.phase == "reduce-scatter"][-1].state
    assert format_chunks(after_rs[0], res.bounds) == ["a0", "a1+b1+c1+d1", "a2+c2+d2", "a3+d3"]
    assert format_chunks(after_rs[1], res.bounds)[:3] == ["a0+b0", "b1", "a2+b2+c2+d2"]
    full = ["a0+b0+c0+d0", "a1+b1+c1+d1", "a2+b2+c2+d2", "a3+b3+c3+d3"]
    assert all(format_chunks(out, res.bounds) == full for out in res.outputs)
    # The notes' chunk indices: round i, device r sends (r - i) mod K, then (r + 1 - i) mod K.
    for rnd in res.rounds:
        offset = 0 if rnd.phase == "reduce-scatter" else 1
        assert [t.chunk for t in rnd.transfers] == [(t.src - rnd.index + offset) % 4 for t in rnd.transfers]
        assert all(t.dst == (t.src + 1) % 4 for t in rnd.transfers)


def test_symbolic_ring_k3_matches_exercise_3() -> None:
    res = col.ring_allreduce(symbolic_inputs(3), history=True)
    first = [format_chunks(s, res.bounds) for s in res.rounds[0].state]
    assert first == [["a0", "a1", "a2+c2"], ["a0+b0", "b1", "b2"], ["c0", "b1+c1", "c2"]]
    second = res.rounds[1].state
    assert [str(second[0][1]), str(second[1][2]), str(second[2][0])] == ["a1+b1+c1", "a2+b2+c2", "a0+b0+c0"]


@pytest.mark.parametrize("k", [1, 2, 5, 9, 27, 30])
def test_symbolic_every_term_exactly_once(k: int) -> None:
    length = k + 3  # chunks of unequal size
    full = [Sym([(w, j) for w in range(k)]) for j in range(length)]
    for fn in (col.ring_allreduce, col.tree_allreduce, col.naive_allreduce):
        for out in fn(symbolic_inputs(k, length)).outputs:
            assert list(out) == full


def test_worker_names_and_sym() -> None:
    assert [worker_name(r) for r in (0, 1, 25, 26, 27, 51, 52)] == ["a", "b", "z", "aa", "ab", "az", "ba"]
    s = Sym([(2, 1)]) + Sym([(0, 1)])
    assert str(s) == "a1+c1" and str(Sym()) == "0" and sum([s], Sym()) == s
    assert str(s + Sym([(0, 1)])) == "a1+a1+c1"  # adding twice shows


def test_round_semantics_and_errors() -> None:
    # All messages of a round are in flight together: a 2-device ring sends and receives at once.
    res = col.ring_allreduce([np.array([1.0, 2.0]), np.array([10.0, 20.0])], history=True)
    assert [t.payload.tolist() for t in res.rounds[0].transfers] == [[1.0], [20.0]]
    with pytest.raises(ValueError):
        col.ring_allreduce([np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError):
        col.broadcast([np.zeros(3)] * 2, root=2)
    with pytest.raises(ValueError):
        col.pipelined_ring_broadcast(100, 4, 0)
    with pytest.raises(ValueError):
        col.allreduce([np.zeros(3)], algorithm="butterfly")
    with pytest.raises(ValueError):    # one spelling per algorithm: the definition's, not "ring"
        col.allreduce([np.zeros(3)], algorithm="ring")
    with pytest.raises(ValueError):
        col.ring_allreduce([])
