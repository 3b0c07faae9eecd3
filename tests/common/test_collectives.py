"""A collective is defined once (common.costmodel.collectives): the simulator's counts equal the
definition's for every algorithm at K = 1…9, every consumer reads the definition (patch it and they
all follow), no other module writes a ring formula of its own, and an unknown name raises. (That nothing else
names its time or bytes: tests/suite/test_one_name.py.)"""

from __future__ import annotations

import io
import math
import re
import tokenize
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from costmodel_buffers import buffers, pieces

from common.costmodel import collectives as cdef
from common.costmodel.link import NOTES_LINK, Link, ring_alpha_beta_from_line
from common.costmodel.steps import CollectiveCall, zero_step_bytes_per_device
from cs336 import busbw
from cs336.first_order import ring_allreduce_terms
from lecture14 import collectives as col

ROOT = Path(__file__).resolve().parents[2]
LINKS = [NOTES_LINK, Link(10e-6, 10e9), Link(0.0, 3.125e9)]


@pytest.mark.parametrize("name", cdef.SIMULATED)
def test_every_simulated_count_equals_the_definition(name: str) -> None:
    alg = cdef.algorithm(name)
    for k in range(1, 10):
        for root in sorted({0, k // 2, k - 1}) if cdef.collective(alg.collective).rooted else [0]:
            for segments in (1, 3) if alg.segmented else (1,):
                for nbytes in (0, 12 * k * segments, 5040 * segments):  # K and S divide N
                    res = col.traffic(name, k, nbytes, root=root, segments=segments)
                    by_position = alg.bytes_sent(k, nbytes)
                    by_rank = by_position if name == "parameter server" else \
                        [by_position[(r - root) % k] for r in range(k)]
                    assert res.sent.tolist() == by_rank, (name, k, root, nbytes)
                    assert res.total_sent == alg.total_bytes(k, nbytes) == res.received.sum()
                    assert res.busiest_sent == alg.busiest_bytes(k, nbytes)
                    assert res.n_rounds == alg.rounds(k, segments), (name, k)
                    if res.n_rounds:
                        assert max(res.round_bytes()) == alg.round_bytes(k, nbytes, segments)
                    for link in LINKS:
                        assert res.time(link) == pytest.approx(alg.time(k, nbytes, link, segments),
                                                               rel=1e-12, abs=1e-15)


def test_each_collective_names_its_algorithms_and_torch_call() -> None:
    for coll in cdef.COLLECTIVES.values():
        assert coll.ring in coll.algorithms and cdef.algorithm(coll.ring).simulated
        assert cdef.by_torch_name(coll.torch_name) is coll
    # broadcast is two algorithms with two names, never one word for both
    assert cdef.collective("broadcast").algorithms == ("pipelined ring broadcast", "tree broadcast",
                                                       "direct broadcast")
    from common import dist_count  # torch: the counter knows every collective under torch's name
    counted = {name for name, _ in dist_count.METHODS.values()}
    assert {c.torch_name for c in cdef.COLLECTIVES.values()} <= counted


@pytest.mark.parametrize("call", [
    lambda: cdef.collective("all_reduce"), lambda: cdef.collective("ring"),
    lambda: cdef.by_torch_name("all-reduce"), lambda: cdef.algorithm("broadcast"),
    lambda: cdef.algorithm("ring all_reduce"), lambda: col.traffic("all-gather", 4, 8),
    lambda: col.traffic("direct scatter", 4, 8), lambda: CollectiveCall("allreduce", "x", 1, 8),
    lambda: cdef.algorithm("direct all-reduce"), lambda: busbw.bus_factor("scatter", 4),
    lambda: cdef.algorithm("butterfly all-reduce"),
])
def test_an_unknown_name_raises(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        call()


def test_every_consumer_reads_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the ring all-reduce send 7 bytes per byte and take 5 rounds: every public number built
    on it follows, which it could not if any of them kept a formula of its own."""
    from cs336.comm import CommLog

    monkeypatch.setitem(cdef.ALGORITHM_BYTES, "ring all-reduce", lambda k, n: [7 * n] * k)
    ring = cdef.ALGORITHMS["ring all-reduce"]
    patched = cdef.Algorithm(ring.name, ring.collective, lambda k, s: 5, lambda k, n, s: Fraction(n))
    monkeypatch.setitem(cdef.ALGORITHMS, "ring all-reduce", patched)
    k, n, link = 4, 1000, Link(1.0, 1000.0)
    assert cdef.algorithm("ring all-reduce").busiest_bytes(k, n) == 7000
    assert cdef.algorithm("ring all-reduce").bytes_sent(k, n) == [7000.0] * k
    assert cdef.algorithm("ring all-reduce").total_bytes(k, n) == 28000
    assert CollectiveCall("all-reduce", "g", 2, n).ring.busiest_bytes(k, n) == 7000
    assert zero_step_bytes_per_device("DDP", k, n) == 7000
    assert busbw.bus_factor("all-reduce", k) == 7
    log = CommLog(k)
    log.add("all_reduce", n)
    assert log.sent["all_reduce"] == 7000
    assert CollectiveCall("all-reduce", "g", 1, n).ring.rounds(k) == 5
    assert cdef.algorithm("ring all-reduce").time(k, n, link) == 5 * 2.0
    assert ring_allreduce_terms(k, n, link)[0] == 5.0
    assert ring_alpha_beta_from_line(k, 10.0, 1.0)[0] == 2.0
    with pytest.raises(ImportError):  # and the simulator refuses to disagree: no schedule for a new one
        col.check_schedules(cdef.SIMULATED + ("butterfly all-reduce",))


# Shapes of a ring's closed forms in code (strings and comments left out; tokens joined by one
# space): 2(K−1)…, (K−1)/K, (K−1)·N/K, K−2+S, ceil(log2 K). Only the definition, the simulator's
# schedules and the independent message-by-message reference may hold them; the notes' own
# formulas, evaluated to be held against ours, are counted where they stand.
FORMULAS = [re.compile(p) for p in (r"\b2 \* \( (\w+) - 1 \)", r"\( (\w+) - 1 \) / \1\b",
                                    r"\( (\w+) - 1 \) \* \w+ / \1\b", r"\b(\w+) - 2 \+ \w+",
                                    r"\( (\w+) - 1 \) \. bit_length\b")]
ALLOWED = {"code/common/costmodel/collectives.py": None, "code/lecture14/collectives.py": None,
           "code/lecture14/collectives_reference.py": None,
           "code/cs336/primitives.py": 9,        # the notes' volume column and bounds, beside ours
           "code/cs336/01_collectives.py": 1,    # the notes' identity (p−1)/p·p·S = (p−1)·S
           "code/lecture14/costmodel.py": 1}     # ring-tree crossover, solved from the two times


def _code_only(text: str) -> str:
    """The file's tokens without strings (f-strings included) and comments, one space apart."""
    return " ".join(tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                    if tok.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER))


def test_no_second_definition_of_a_ring_formula() -> None:
    found = {}
    for path in sorted([*ROOT.glob("code/**/*.py"), *ROOT.glob("practice/judging/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        code = _code_only(path.read_text(encoding="utf-8"))
        hits = sum(len(f.findall(code)) for f in FORMULAS)
        if hits and ALLOWED.get(rel, 0) is not None and hits != ALLOWED.get(rel, 0):
            found[rel] = hits
    assert not found, f"collective formulas outside common/costmodel/collectives.py: {found}"


def test_the_formula_search_finds_a_formula() -> None:
    code = _code_only("t = 2 * (k - 1) * (alpha + n / (k * beta))  # '2 * (p - 1)' in a string is text\n")
    assert sum(len(f.findall(code)) for f in FORMULAS) == 1


def test_every_collective_has_its_real_call() -> None:
    """Adding a collective to the definition without its torch call (and gloo's workarounds) fails here."""
    from common import collectives_real as real

    assert list(real.REAL_CALLS) == list(cdef.COLLECTIVES)
    with pytest.raises(ValueError):
        real.run_collective("allreduce", None, 0)  # type: ignore[arg-type]  # no rank needed: refused first


# ---- the α-β times against the rounds they stand for ----------------------------------------------
RING_ALLREDUCE = cdef.algorithm("ring all-reduce")


def ring_by_rounds(k: int, n: float, link: Link) -> float:
    """Reduce-scatter then all-gather: 2(K-1) rounds, each one message of N/K bytes."""
    return sum(link.message_time(n / k) for _ in range(2 * (k - 1)))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13, 64])
@pytest.mark.parametrize("link", [NOTES_LINK, Link(10e-6, 10e9), Link(1e-6, 3e9), Link(50e-6, 100e9)])
def test_ring_equals_its_rounds(k: int, link: Link) -> None:
    for n in (1.0, 1000.0, 12345.0, 64e6):
        assert RING_ALLREDUCE.time(k, n, link) == pytest.approx(ring_by_rounds(k, n, link), rel=1e-12)


def test_tree_depth_is_ceil_log2() -> None:
    for k in range(1, 300):
        assert cdef.tree_depth(k) == math.ceil(math.log2(k)) if k > 1 else cdef.tree_depth(k) == 0


def test_ring_bytes_per_device() -> None:
    assert RING_ALLREDUCE.busiest_bytes(4, 1000) == 1500
    assert RING_ALLREDUCE.busiest_bytes(1, 1000) == 0


def test_padded_shards_are_equal_and_pad_less_than_one_shard() -> None:
    """ZeRO's padded flat buffer: k shards of c elements hold the n, with fewer than k zeros, at the
    padded length of numpy's own split into k equal parts."""
    for k in range(1, 10):
        for n in range(0, 60):
            c = cdef.padded_shard_elements(n, k)
            assert 0 <= c * k - n < k and c == math.ceil(n / k)
            assert {len(s) for s in np.split(np.zeros(c * k), k)} == {c}
    for bad in (0, 1.5):
        with pytest.raises(ValueError):
            cdef.padded_shard_elements(10, bad)
    assert cdef.padded_shard_elements(13e9, 4) == 3_250_000_000      # a whole count written as a float
    for bad_n in (10.5, -1):                                          # not a count of elements
        with pytest.raises(ValueError):
            cdef.padded_shard_elements(bad_n, 2)


def test_times_reject_bad_device_counts() -> None:
    with pytest.raises(ValueError):
        RING_ALLREDUCE.time(0, 10, NOTES_LINK)
    with pytest.raises(ValueError):
        cdef.algorithm("pipelined ring broadcast").time(4, 10, NOTES_LINK, 0)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("link", [Link(5e-6, 50 * 2**30), Link(1e-6, 450e9), Link(0.0, 10e9),
                                  Link(20e-6, 1e9)])
def test_reduce_scatter_and_all_gather_equal_their_rounds(k: int, link: Link) -> None:
    n = 840 * k  # K divides N: every chunk N/K
    rs, ag = col.reduce_scatter(buffers(k, n)), col.all_gather(pieces(k, n))
    for res, ring in ((rs, cdef.algorithm("ring reduce-scatter")), (ag, cdef.algorithm("ring all-gather"))):
        assert res.n_rounds == k - 1
        assert ring.time(k, n, link) == pytest.approx(res.time(link), rel=1e-12, abs=1e-18)
        assert all(s == ring.busiest_bytes(k, n) for s in res.sent)


@pytest.mark.parametrize("k,n", [(3, 1000), (4, 1001), (7, 50), (5, 3)])
def test_uneven_chunks_stay_within_one_element_per_round(k: int, n: int) -> None:
    link = Link(1e-6, 1e9)
    res = col.reduce_scatter(buffers(k, n))
    assert res.total_sent == (k - 1) * n  # each chunk travels K-1 hops, whatever its size
    formula = cdef.algorithm("ring reduce-scatter").time(k, n, link)
    assert formula <= res.time(link) + 1e-15 <= formula + (k - 1) / link.beta_Bps + 1e-12
