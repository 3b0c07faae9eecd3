"""CS336 lecture 8's volume table (cs336/primitives.py) against costmodel's closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from common.costmodel import collectives as cdef
from cs336 import primitives as prim
from lecture14 import collectives as col


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("n", [1001, 7, 1, 4000])
def test_volumes_against_the_closed_forms(p: int, n: int) -> None:
    nbytes = n * p if n == 4000 else n  # 4000·p: p divides N and N/p
    vols = prim.volumes(p, nbytes)
    for name, v in vols.items():
        piece = nbytes if name in ("broadcast", "reduce", "all-reduce") else nbytes / p
        assert v.piece == piece
        coll = cdef.collective(name)  # ROOT = 0: positions = ranks
        assert v.closed == cdef.algorithm(coll.ring).bytes_sent(p, coll.nbytes_of_piece(p, piece))
        assert v.within, (name, p, n)
        if name not in ("scatter", "gather"):  # every byte of N travels p-1 hops (all-reduce: twice)
            assert sum(v.sent) == (2 if name == "all-reduce" else 1) * (p - 1) * nbytes, name
        if nbytes % p == 0:
            assert v.sent == v.closed, (name, p)  # p divides N: exactly the closed form
    # independent of costmodel: the ring's totals and the notes' formulas
    assert vols["scatter"].sent[0] == nbytes - len(np.array_split(np.zeros(nbytes), p)[0])
    assert vols["all-reduce"].notes == pytest.approx(2 * (p - 1) / p * nbytes)
    assert vols["all-gather"].notes == pytest.approx((p - 1) * nbytes / p)
    assert vols["broadcast"].notes == vols["reduce"].notes == nbytes


def test_notes_entries_that_differ_at_p4() -> None:
    p = prim.NOTES_P
    vols = prim.volumes(p, prim.NOTES_N)
    differs = set()
    for name, v in vols.items():
        who = prim.WHOSE_SENDS[name]
        ours = v.sent[prim.ROOT] if who == "root" else v.busiest
        if ours != v.notes:
            differs.add(name)
    assert differs == {"scatter", "gather"}
    assert vols["scatter"].sent[0] == vols["gather"].busiest == 3 * prim.NOTES_N / p
    # straight to / from the root: gather's S per rank holds, scatter's root still sends (p-1)·S
    assert cdef.algorithm("direct gather").bytes_sent(p, 10 * p) == [0, 10, 10, 10]
    assert cdef.algorithm("direct scatter").bytes_sent(p, 10 * p) == [30, 0, 0, 0]
    with pytest.raises(ValueError):
        cdef.algorithm("direct all-reduce")


@pytest.mark.parametrize("p,n", [(2, 1001), (3, 1001), (4, 1001), (8, 7), (4, 4000)])
def test_split_and_lower_bound_rows(p: int, n: int) -> None:
    (row,) = prim.split_rows([p], n)
    values = [float(c.replace(",", "")) for c in row[1:]]
    bound = (p - 1) / p * n
    assert values[0] == pytest.approx(bound, abs=0.005) and values[1] == pytest.approx(bound, abs=0.005)
    assert values[2] == pytest.approx(bound, abs=0.005) and values[3] == pytest.approx(2 * bound, abs=0.005)
    assert values[4] == col.traffic("ring all-reduce", p, n).busiest_sent
    for label, total, fewest, busiest, avg in prim.lower_bound_rows(p, n):
        assert total == fewest == 2 * (p - 1), label  # every algorithm moves the fewest bytes in all
        assert busiest >= avg - 1e-12
    ring = prim.lower_bound_rows(p, n)[0]
    if n % p == 0:
        assert ring[3] == ring[4]  # the ring's busiest rank sends only the average


def test_shapes_helpers() -> None:
    assert prim.expected_lengths("scatter", 4, 5) == [(5, 2), (None, 1), (None, 1), (None, 1)]
    assert prim.expected_lengths("gather", 3, 2) == [(2, 6), (2, None), (2, None)]
    assert prim.lengths_text([[5, 2], [None, 1], [None, 1], [None, 1]]) == "rank 0: 5 → 2 1 1 1"
    assert prim.lengths_text([[5, 20], [5, 20]]) == "5 each → 20 each"
    assert prim.chain_order(4, 1) == [1, 2, 3, 0] and prim.chain_order(4, -1) == [3, 2, 1, 0]
    # the notes' words from element counts: uneven pieces still read S, a wrong result drops its rank
    assert prim.shape_text([5, None, None, None], [2, 1, 1, 1], [True] * 4) == "rank 0: p·S → each: S"
    assert prim.shape_text([5] * 4, [5] * 4, [True, False, False, False]) == "each: S → rank 0: S"
    assert prim.shape_text([5] * 3, [15] * 3, [True, False, True]) == "each: S → ranks 0 2: p·S"
