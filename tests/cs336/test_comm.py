"""cs336.comm.CommLog built on common.dist_count: what the counter saw, folded in at each call's size N."""

from __future__ import annotations

import pytest

from common.costmodel import collectives as cdef
from common.dist_count import Counts
from cs336.comm import CommLog


def test_counts_fold_in_at_the_calls_size() -> None:
    k = 4
    seen = Counts(sent_bytes=96, sends=2, receives=3, received_bytes=40,
                  tensors=[("all_gather", "float64", 80), ("reduce_scatter", "float64", 320),
                           ("all_reduce", "float64", 320), ("all_gather_into_tensor", "float32", 8)])
    log = CommLog(k)
    log.add_counts(seen)
    # an all-gather's input is one rank's piece: N = K × 80, and a ring sends (K-1)/K of N
    assert log.sent["all_gather"] == cdef.algorithm("ring all-gather").busiest_bytes(k, 320)
    assert log.sent["all_gather_into_tensor"] == cdef.algorithm("ring all-gather").busiest_bytes(k, 32)
    assert log.sent["reduce_scatter"] == cdef.algorithm("ring reduce-scatter").busiest_bytes(k, 320)
    assert log.sent["all_reduce"] == cdef.algorithm("ring all-reduce").busiest_bytes(k, 320)
    assert (log.calls["send"], log.sent["send"], log.calls["recv"]) == (2, 96, 3)
    assert "recv" not in log.sent                       # a receive sends nothing


def test_the_same_as_adding_by_hand() -> None:
    by_hand, folded = CommLog(3), CommLog(3)
    by_hand.add("all_gather", 3 * 24)
    by_hand.add("send", 16)
    folded.add_counts(Counts(sent_bytes=16, sends=1, tensors=[("all_gather", "float32", 24)]))
    assert (folded.calls, folded.sent) == (by_hand.calls, by_hand.sent)


def test_an_unpriced_collective_raises() -> None:
    with pytest.raises(ValueError, match="all_to_all"):
        CommLog(2).add_counts(Counts(tensors=[("all_to_all", "float32", 8)]))
