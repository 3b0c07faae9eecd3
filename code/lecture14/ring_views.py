"""How 03_ring_allreduce.py Part 1 shows a ring all-reduce: every round with symbols for small K,
only the end of each phase (term counts) for medium K, and counted totals for large K.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from common.costmodel.collectives import algorithm
from common.output import Report
from lecture14 import collectives as col
from lecture14.network import Result

MAX_PRINTED_K = 8  # beyond this a round's table is too wide to read: only phase ends are printed
MAX_COUNTED_K = 16  # beyond this even the phase ends (K columns of counts) are too wide: totals only
SEED = 0


def show_rounds(rep: Report, res: Result, k: int, cells: Callable[[np.ndarray], list]) -> None:
    """Every round (symbolic, small K), or the end of each phase only (term counts, larger K)."""
    every_round = k <= MAX_PRINTED_K
    headers = ["worker"] + [f"chunk {c}" if every_round else str(c) for c in range(k)]

    def show(state: list[np.ndarray], name: str) -> None:
        rep.table(headers, [[str(r)] + cells(buf) for r, buf in enumerate(state)], name=name)

    rep.line("  before:")
    show(res.initial, "before")
    for n, rnd in enumerate(res.rounds):
        last_of_phase = n + 1 == len(res.rounds) or res.rounds[n + 1].phase != rnd.phase
        if every_round:
            # what each chunk holds is in the table before: the line says only who sends which
            moves = ", ".join(f"{t.src}→{t.dst} chunk {t.chunk}" for t in rnd.transfers)
            rep.line(f"  {rnd.phase} round i = {rnd.index}: {moves}")
        elif last_of_phase:
            rep.line(f"  after {rnd.phase} (round i = {rnd.index}, the last of {rnd.phase}):")
        if every_round or last_of_phase:
            show(rnd.state, f"{rnd.phase} {rnd.index}")


def many_workers(rep: Report, k: int) -> tuple[Result, bool]:
    """K > 8: symbols would fill the screen (a full sum has K terms), so numbers stand in for them."""
    rep.note(f"K = {k} > {MAX_PRINTED_K}: the round-by-round view with symbols is shown for K <= "
             f"{MAX_PRINTED_K} only;\n'each term once' is checked with numbers: worker r's elements are "
             "random 64-bit integers,\nand every output must equal np.sum of the inputs exactly (integer "
             "sums wrap alike in any\norder); a missing or doubled term would change a sum (except with "
             "probability ~2^-64)")
    values = np.random.default_rng(SEED).integers(-2**63, 2**63 - 1, (k, k), dtype=np.int64)  # row = worker
    res, want = col.ring_allreduce(list(values)), np.sum(values, axis=0)
    done = all(np.array_equal(out, want) for out in res.outputs)
    if k <= MAX_COUNTED_K:
        rep.note(f"only the end of each phase is printed, and each cell shows how many workers'\n"
                 f"elements the chunk sums ({k} = complete)")
        counts = col.ring_allreduce([np.ones(k, dtype=np.int64)] * k, history=True)
        show_rounds(rep, counts, k, lambda buf: buf.tolist())
        return counts, done and all(np.all(out == k) for out in counts.outputs)
    item = values.itemsize  # the integer run's counts: one 8-byte element per chunk, N = 8K bytes
    rep.note(f"K > {MAX_COUNTED_K}: no tables of K columns; the totals counted in that run,\n"
             f"one {item}-byte integer per chunk (N = {item}K B):")
    rep.table(["quantity", "counted", "closed form", "formula"], [
        ["rounds", res.n_rounds, algorithm("ring all-reduce").rounds(k), "2(K - 1)"],
        ["bytes each worker sends (fewest, most)", f"{res.sent.min():,}, {res.sent.max():,}",
         f"{algorithm('ring all-reduce').busiest_bytes(k, item * k):,.0f}", "2(K - 1)/K · N"],
        ["largest message (B)", int(res.busiest_per_round.max()), item, "N/K"],
    ], name="ring_counts")
    return res, done
