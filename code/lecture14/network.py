"""The engine under collectives.py: K devices, a schedule of messages, bytes counted with numpy.

A collective is a `Schedule`: every message it sends (round, source, destination, chunk, add or
copy), listed as numpy arrays, one entry per message. `run_schedule` counts the bytes each device
sends and receives and, per round, the busiest device's bytes with a few numpy calls over the
whole table, so counting costs about the same per message whatever K is (K = 1024 ring all-reduce:
two million messages, a fraction of a second). Moving data (numeric or symbolic) takes a few numpy
calls per round. collectives_reference.py does the same one message at a time, as a check.

Model of a round: every message of a round is in flight at once, links are full duplex, and a
device may send and receive in the same round. Payloads are read before any is applied, so a
round's result does not depend on the order messages are listed in (several "add"s into the same
device are applied in the listed order). Pure numpy: no torch, no processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from common.costmodel.collectives import split_sizes


def chunk_bounds(n: int, k: int) -> list[slice]:
    """The K chunks of n elements at np.array_split boundaries (first n % K chunks one longer)."""
    return bounds_from_sizes(split_sizes(n, k))


def bounds_from_sizes(sizes: Sequence[int]) -> list[slice]:
    edges = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


# ---- the record of a run ---------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """One message: `nbytes` from `src` to `dst`, chunk index (None: the whole buffer), "add" or "copy".

    `payload` holds a copy of what was sent when the run kept its history, else None.
    """

    src: int
    dst: int
    chunk: int | None
    nbytes: int
    op: str
    payload: np.ndarray | None = None


@dataclass
class Round:
    """One round (one tick for the pipelined ones); `index` counts from 0 within its phase.

    The messages are arrays (src, dst, chunk with -1 for the whole buffer, nbytes); `transfers`
    lists them one by one. `state` and `payloads` are kept only with history=True.
    """

    phase: str
    index: int
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    nbytes: np.ndarray
    op: str
    state: list[np.ndarray] | None = None  # every device's buffer after the round
    payloads: list[np.ndarray] | None = None

    @property
    def transfers(self) -> list[Transfer]:
        payloads = self.payloads or [None] * len(self.src)
        return [Transfer(int(s), int(d), None if c < 0 else int(c), int(b), self.op, p)
                for s, d, c, b, p in zip(self.src, self.dst, self.chunk, self.nbytes, payloads)]


@dataclass
class Result:
    """What a simulated collective did. Devices are 0..K-1 (the parameter server adds device K).

    `busiest_per_round`: per round, the most bytes any one device sent or received in it (its link
    is the bottleneck of that round). `rounds` is the round-by-round record, kept whenever data
    moves; a count without data (collectives.traffic) leaves it empty.
    """

    name: str
    outputs: list[np.ndarray | None]
    sent: np.ndarray
    received: np.ndarray
    busiest_per_round: np.ndarray
    rounds: list[Round] = field(default_factory=list)
    bounds: list[slice] = field(default_factory=list)
    initial: list[np.ndarray] | None = None  # buffers before the first round (history=True)

    @property
    def n_rounds(self) -> int:
        return int(self.busiest_per_round.size)

    @property
    def busiest_sent(self) -> int:
        return int(self.sent.max()) if self.sent.size else 0

    @property
    def busiest_received(self) -> int:
        return int(self.received.max()) if self.received.size else 0

    @property
    def total_sent(self) -> int:
        return int(self.sent.sum())

    def round_bytes(self) -> list[int]:
        """Per round, the most bytes any one device sent or received in it."""
        return self.busiest_per_round.tolist()

    def time(self, link: Any) -> float:
        """α-β time (seconds) on `link` (anything with alpha_s, beta_Bps): Σ over rounds of α + busiest/β."""
        return float(np.sum(link.alpha_s + self.busiest_per_round / link.beta_Bps))


# ---- schedules -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    """Rounds 0 .. n_rounds-1 of one phase, all "add" or all "copy": message m goes in round
    index[m] (sorted), from src[m] to dst[m], carrying chunk[m] (-1: the whole buffer)."""

    name: str
    op: str
    n_rounds: int
    index: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray


class Schedule:
    """The messages of one collective, phase after phase. `add(name, index, src, dst, chunk, op)`
    takes arrays (or scalars, broadcast) with one entry per message; every round must carry at
    least one message. Messages listed in the same round keep their listed order."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []

    def add(self, name: str, index: Any, src: Any, dst: Any, chunk: Any, op: str) -> None:
        index = np.asarray(index, dtype=np.int64)
        if index.size == 0:
            return
        cols = [np.broadcast_to(np.asarray(a, dtype=np.int64), index.shape) for a in (src, dst, chunk)]
        if np.any(index[1:] < index[:-1]):
            order = np.argsort(index, kind="stable")
            index, cols = index[order], [c[order] for c in cols]
        self.phases.append(Phase(name, op, int(index[-1]) + 1, index, *cols))

    @property
    def n_rounds(self) -> int:
        return sum(p.n_rounds for p in self.phases)


def _per_round_max(index: np.ndarray, dev: np.ndarray, nbytes: np.ndarray, n_rounds: int,
                   n_dev: int) -> np.ndarray:
    """Per round, the most bytes one device sends (dev = sources) or receives (dev = destinations)."""
    key = index * n_dev + dev
    if n_rounds * n_dev <= 4 * index.size + (1 << 16):  # a dense table is cheap next to the messages
        per_key = np.zeros(n_rounds * n_dev, dtype=np.int64)
        np.add.at(per_key, key, nbytes)
        return per_key.reshape(n_rounds, n_dev).max(axis=1)
    keys, where = np.unique(key, return_inverse=True)  # few messages among many devices
    per_key = np.zeros(keys.size, dtype=np.int64)
    np.add.at(per_key, where, nbytes)
    out = np.zeros(n_rounds, dtype=np.int64)
    np.maximum.at(out, keys // n_dev, per_key)
    return out


def run_schedule(name: str, sched: Schedule, n_dev: int, bounds: list[slice], bufs: np.ndarray | None = None,
                 history: bool = False, itemsize: int = 1) -> tuple[Result, np.ndarray | None]:
    """Count a schedule's bytes (elements × itemsize) and rounds; if `bufs` (one row per device)
    is given, move the data round by round, in place. Returns the Result (outputs left empty for
    the caller) and the final buffers."""
    starts = np.array([b.start for b in bounds], dtype=np.int64)
    sizes = np.array([b.stop - b.start for b in bounds], dtype=np.int64)
    sent, received = np.zeros(n_dev, dtype=np.int64), np.zeros(n_dev, dtype=np.int64)
    busiest = []
    res = Result(name, [], sent, received, np.zeros(0, dtype=np.int64), [], bounds,
                 list(bufs.copy()) if history and bufs is not None else None)
    for ph in sched.phases:
        whole = ph.chunk < 0
        elems = np.where(whole, bounds[-1].stop, sizes[np.where(whole, 0, ph.chunk)])
        nbytes = elems * itemsize
        np.add.at(sent, ph.src, nbytes)
        np.add.at(received, ph.dst, nbytes)
        busiest.append(np.maximum(_per_round_max(ph.index, ph.src, nbytes, ph.n_rounds, n_dev),
                                  _per_round_max(ph.index, ph.dst, nbytes, ph.n_rounds, n_dev)))
        if bufs is not None:
            first = np.where(whole, 0, starts[np.where(whole, 0, ph.chunk)])
            _move(res, ph, bufs, elems, first, nbytes, history)
    res.busiest_per_round = np.concatenate(busiest) if busiest else np.zeros(0, dtype=np.int64)
    return res, bufs


def _move(res: Result, ph: Phase, bufs: np.ndarray, elems: np.ndarray, first: np.ndarray,
          nbytes: np.ndarray, history: bool) -> None:
    cuts = np.searchsorted(ph.index, np.arange(ph.n_rounds + 1))
    for i in range(ph.n_rounds):
        m = slice(cuts[i], cuts[i + 1])
        lengths = elems[m]
        if lengths.sum() >= 32 * lengths.size:  # long messages: a slice each (a memcpy) is cheapest
            spans = list(zip(ph.src[m].tolist(), ph.dst[m].tolist(), first[m].tolist(), lengths.tolist()))
            payloads = [bufs[s, a:a + n].copy() for s, _, a, n in spans]  # all read before any is applied
            for (_, d, a, n), payload in zip(spans, payloads):
                if ph.op == "add":
                    bufs[d, a:a + n] += payload
                else:
                    bufs[d, a:a + n] = payload
        else:  # many short messages: one entry per element moved (its message, its column)
            msg = np.repeat(np.arange(lengths.size), lengths)
            col = np.arange(msg.size) - (np.cumsum(lengths) - lengths)[msg] + first[m][msg]
            payload = bufs[ph.src[m][msg], col]  # every payload is read before any is applied
            if ph.op == "add":
                np.add.at(bufs, (ph.dst[m][msg], col), payload)
            else:
                bufs[ph.dst[m][msg], col] = payload
            payloads = np.split(payload, np.cumsum(lengths)[:-1]) if history else []
        res.rounds.append(Round(ph.name, i, ph.src[m], ph.dst[m], ph.chunk[m], nbytes[m], ph.op,
                                list(bufs.copy()) if history else None, payloads if history else None))
