"""code/cs336/gloo_ran.py: what gloo ran, read from the profiler's gloo:* spans.

On real ranks, each collective is run twice: once inside gloo_ran.watching(), once inside a profiler
read here another way (FunctionEvents' names, shapes and dtypes; bytes from torch's own element
sizes, not gloo_ran's table). Both must agree, and both must show what gloo in torch 2.13 does: a
reduce_scatter_tensor runs as ONE all-reduce of the whole input, dist.reduce_scatter as an
all-reduce of each chunk, an all-gather's span holds one rank's piece. A gloo that gains a real
reduce-scatter fails this test, and with it the words of 07 and 09 that explain the difference.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.distributed as dist

from common.launch import launch
from cs336 import gloo_ran

ELEMENTS = 4000


def _calls(k: int) -> dict[str, Callable[[], None]]:
    """Each collective once on this rank, in a dtype of its own (the spans' dtypes are read too)."""
    def rs_tensor() -> None:
        dist.reduce_scatter_tensor(torch.empty(ELEMENTS // k, dtype=torch.float64),
                                   torch.ones(ELEMENTS, dtype=torch.float64))

    def rs_list() -> None:
        dist.reduce_scatter(torch.empty(ELEMENTS // k), list(torch.ones(ELEMENTS).chunk(k)))

    return {"reduce_scatter_tensor": rs_tensor, "reduce_scatter": rs_list,
            "all_reduce": lambda: dist.all_reduce(torch.ones(ELEMENTS, dtype=torch.bfloat16)),
            "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(
                torch.empty(ELEMENTS, dtype=torch.float16), torch.ones(ELEMENTS // k, dtype=torch.float16)),
            "broadcast": lambda: dist.broadcast(torch.ones(ELEMENTS, dtype=torch.int64), src=0)}


def _by_function_events(call: Callable[[], None]) -> list[tuple[str, int]]:
    """(gloo's operation, bytes of its input) read independently of gloo_ran: FunctionEvents, and
    each dtype's element size asked of torch."""
    sizes = {str(dt).removeprefix("torch."): torch.empty(0, dtype=dt).element_size()
             for dt in (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int64)}
    names = {"double": "float64", "float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16",
             "long int": "int64"}
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        call()
    spans = sorted((e for e in prof.function_events if e.name.startswith("gloo:")),
                   key=lambda e: e.time_range.start)
    return [(e.name.removeprefix("gloo:"),
             sum(torch.Size(s).numel() * sizes[names[d]] for s, d in zip(e.input_shapes, e.input_dtypes)))
            for e in spans]


def _both_readings(rank: int, world_size: int) -> dict[str, tuple[list, list]]:
    found = {}
    for name, call in _calls(world_size).items():
        with gloo_ran.watching(every_rank=True) as ran:
            call()
        found[name] = ([(op.name, op.input_bytes) for op in ran.ops], _by_function_events(call))
    return found


@pytest.mark.parametrize("k", [2, 4])
def test_what_gloo_ran_read_two_ways(k: int) -> None:
    for rank in launch(_both_readings, k, timeout_s=120):
        for name, (ours, theirs) in rank.items():
            assert sorted(ours) == sorted(theirs), (name, ours, theirs)
        piece = ELEMENTS // k
        assert rank["reduce_scatter_tensor"][0] == [("all_reduce", ELEMENTS * 8)]     # the whole input, once
        assert rank["reduce_scatter"][0] == [("all_reduce", piece * 4)] * k          # each chunk
        assert rank["all_reduce"][0] == [("all_reduce", ELEMENTS * 2)]
        assert rank["all_gather_into_tensor"][0] == [("all_gather", piece * 2)]      # this rank's piece
        assert rank["broadcast"][0] == [("broadcast", ELEMENTS * 8)]


def test_kinds_in_collectives_words_and_sizes() -> None:
    ran = gloo_ran.Ran([gloo_ran.GlooOp("all_gather", 100), gloo_ran.GlooOp("all_reduce", 400),
                        gloo_ran.GlooOp("all_reduce", 400), gloo_ran.GlooOp("barrier", 0)])
    assert ran.by_kind(4) == {"all-gather": (1, 400), "all-reduce": (2, 800), "barrier": (1, 0)}
    assert gloo_ran.per_step({"all-reduce": (6, 900)}, 3) == {"all-reduce": (2, 300)}
    assert gloo_ran.per_step({"all-reduce": (1, 900)}, 2) == {"all-reduce": (0.5, 450)}


def test_what_ran_in_place_of_what_was_handed() -> None:
    handed = {"all-gather": (8, 800), "reduce-scatter": (7, 700)}
    ran = {"all-gather": (8, 800), "all-reduce": (28, 700)}
    assert gloo_ran.substitutions(handed, ran) == ({"reduce-scatter": (7, 700)}, {"all-reduce": (28, 700)})
    assert gloo_ran.substitutions(ran, ran) == ({}, {})
    # one more all-reduce than handed (a collective no counter saw): the surplus only
    surplus = gloo_ran.substitutions({"all-reduce": (1, 8)}, {"all-reduce": (2, 40)})
    assert surplus == ({}, {"all-reduce": (1, 32)})
    assert gloo_ran.calls_short(ran) == "8 AG + 28 AR"
    assert gloo_ran.bytes_text(ran) == "all-gather 800 B; all-reduce 700 B"


def test_a_dtype_it_cannot_size_is_an_error() -> None:
    with pytest.raises(ValueError, match="c10::Float8"):
        gloo_ran._input_bytes([[4]], ["c10::Float8"], "gloo:all_reduce")


def _watched_where(rank: int, world_size: int) -> tuple[bool, object, bool]:
    with gloo_ran.watching() as ran:
        dist.all_reduce(torch.ones(4))
    return ran.watched, ran.by_kind(world_size), bool(ran.ops)


def test_only_rank_0_watches_and_the_others_say_they_did_not() -> None:
    """The profiler costs every rank CPU; the tables print rank 0's. A rank that did not watch says
    so (None), never 'gloo ran nothing'."""
    ranks = launch(_watched_where, 2, timeout_s=120)
    assert ranks[0] == (True, {"all-reduce": (1, 16)}, True)   # 4 float32
    assert ranks[1] == (False, None, False)
