"""The reference for collectives.py: the same collectives, simulated one message at a time.

collectives.py lists every message of an algorithm as numpy arrays and counts them in bulk. This
module does the obvious thing instead: plain Python loops that send one message after another,
with each schedule written out again from its description (the pipelined ones and scatter/gather
by their greedy rules: each link passes on, every tick, the next piece its neighbour still needs).
Tests check that both give the same bytes, rounds and data. The scripts do not use it: a K = 1024
ring all-reduce is two million Python steps here, a few numpy calls there.

    ref = reference("ring all-reduce", k=5, nbytes=1003)            # counts only: 1 element = 1 byte
    ref = reference("ring gather", inputs=[np.arange(3.0)] * 4, root=2)  # moves the data too
    ref.sent, ref.received, ref.round_bytes, ref.outputs
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class Reference:
    sent: list[int]            # bytes each device sent
    received: list[int]        # bytes each device received
    round_bytes: list[int]     # per round, the most bytes one device sent or received in it
    outputs: list[np.ndarray | None] | None  # None when only counting


class _Network:
    def __init__(self, n_dev: int, bounds: list[slice], bufs: list[np.ndarray] | None, itemsize: int) -> None:
        self.bounds, self.bufs, self.itemsize = bounds, bufs, itemsize
        self.whole = slice(0, bounds[-1].stop)
        self.sent, self.received, self.round_bytes = [0] * n_dev, [0] * n_dev, []

    def round(self, messages: list[tuple[int, int, int | None, str]]) -> None:
        """(src, dst, chunk or None for the whole buffer, "add" or "copy"), all in flight at once."""
        if not messages:
            return
        slices = [self.whole if chunk is None else self.bounds[chunk] for _, _, chunk, _ in messages]
        payloads = [None if self.bufs is None else self.bufs[src][sl].copy()  # read all before writing
                    for (src, _, _, _), sl in zip(messages, slices)]
        out: dict[int, int] = {}  # bytes each device sends / receives in this round
        into: dict[int, int] = {}
        for (src, dst, _, op), sl, payload in zip(messages, slices, payloads):
            nbytes = (sl.stop - sl.start) * self.itemsize
            self.sent[src] += nbytes
            self.received[dst] += nbytes
            out[src] = out.get(src, 0) + nbytes
            into[dst] = into.get(dst, 0) + nbytes
            if payload is not None:
                self.bufs[dst][sl] = self.bufs[dst][sl] + payload if op == "add" else payload
        self.round_bytes.append(max(max(out.values()), max(into.values())))


def _ring(net: _Network, k: int, offset: int, op: str) -> None:
    for i in range(k - 1):
        net.round([(r, (r + 1) % k, (r - i + offset) % k, op) for r in range(k)])


def _tree(net: _Network, k: int, root: int, up: bool) -> None:
    depth = (k - 1).bit_length()
    for j in range(depth):
        step = 1 << (j if up else depth - 1 - j)
        if up:
            msgs = [((v + root) % k, (v - step + root) % k, None, "add") for v in range(step, k, 2 * step)]
        else:
            msgs = [((v + root) % k, (v + step + root) % k, None, "copy") for v in range(0, k, 2 * step)
                    if v + step < k]
        net.round(msgs)


def _chain(net: _Network, k: int, root: int, segments: int, into_root: bool) -> None:
    # The greedy rule, tick by tick: chain[j] passes segment have[j+1] on when it has more.
    chain = [(v + root) % k for v in (list(range(1, k)) + [0] if into_root else range(k))]
    have = [segments] + [0] * (k - 1)  # segments complete at each chain node, in order
    while have[-1] < segments:
        moves = [j for j in range(k - 1) if have[j] > have[j + 1]]  # decided at the tick's start
        net.round([(chain[j], chain[j + 1], have[j + 1], "add" if into_root else "copy") for j in moves])
        for j in moves:
            have[j + 1] += 1


def _pass_along(net: _Network, k: int, root: int, queues: list[list[int]], to_root: bool) -> None:
    # Every round, each device with pieces to pass on sends its first one to the next device;
    # a piece that reaches its destination stays there (scatter: position = the piece's own;
    # gather: the root). queues[v] lists piece positions, position v = (rank - root) mod K.
    while any(queues):
        moves = [(v, queues[v].pop(0)) for v in range(k) if queues[v]]
        net.round([((v + root) % k, (v + 1 + root) % k, (piece + root) % k, "copy") for v, piece in moves])
        for v, piece in moves:
            nxt = (v + 1) % k
            arrived = nxt == 0 if to_root else piece == nxt
            if not arrived:
                queues[nxt].append(piece)


def _slices(sizes: Sequence[int]) -> list[slice]:
    """Consecutive slices of the given sizes."""
    edges = np.cumsum([0] + list(sizes))
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _starting_buffers(algorithm: str, inputs: Sequence[np.ndarray], root: int
                      ) -> tuple[list[np.ndarray], int, list[slice] | None]:
    """Each device's buffer before the first message, the item size, and (all-gather and gather
    only: each piece at its place in the whole) the pieces' slices."""
    arrs = [np.asarray(x) for x in inputs]
    itemsize = 4 if arrs[0].dtype == object else arrs[0].itemsize
    if algorithm in ("ring all-gather", "ring gather"):  # each piece at its place in the whole
        bounds = _slices([a.size for a in arrs])
        bufs = [np.zeros(bounds[-1].stop, dtype=arrs[0].dtype) for _ in arrs]
        for buf, sl, a in zip(bufs, bounds, arrs):
            buf[sl] = a
        return bufs, itemsize, bounds
    bufs = [a.copy() for a in arrs]
    if algorithm == "pipelined ring broadcast":
        bufs = [a if r == root else np.zeros_like(a) for r, a in enumerate(bufs)]
    return bufs, itemsize, None


def _send_messages(net: _Network, algorithm: str, k: int, root: int, segments: int) -> None:
    """The algorithm's rounds of messages, as collectives.py schedules them."""
    if algorithm == "ring all-reduce":
        _ring(net, k, 0, "add")
        _ring(net, k, 1, "copy")
    elif algorithm in ("ring reduce-scatter", "ring all-gather"):
        scatter = algorithm == "ring reduce-scatter"
        _ring(net, k, -1 if scatter else 0, "add" if scatter else "copy")
    elif algorithm in ("tree all-reduce", "tree reduce", "tree broadcast"):
        if algorithm != "tree broadcast":
            _tree(net, k, root, up=True)
        if algorithm != "tree reduce":
            _tree(net, k, root, up=False)
    elif algorithm == "naive all-reduce":
        net.round([(r, 0, None, "add") for r in range(1, k)])
        net.round([(0, r, None, "copy") for r in range(1, k)])
    elif algorithm == "parameter server":
        net.round([(r, k, None, "add") for r in range(k)])
        net.round([(k, r, None, "copy") for r in range(k)])
    elif algorithm.startswith("pipelined ring"):
        _chain(net, k, root, segments, into_root=algorithm.endswith("reduce"))
    elif algorithm == "ring scatter":  # the root holds every piece, the farthest first
        _pass_along(net, k, root, [list(range(k - 1, 0, -1))] + [[] for _ in range(k - 1)], to_root=False)
    elif algorithm == "ring gather":  # everyone but the root starts with its own piece
        _pass_along(net, k, root, [[]] + [[v] for v in range(1, k)], to_root=True)
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}")


def _outputs(algorithm: str, bufs: list[np.ndarray], bounds: list[slice], root: int
             ) -> list[np.ndarray | None]:
    """What each device ends with: its piece (reduce-scatter, scatter), the whole, or None off the
    root for the collectives whose result lands on the root alone."""
    at_root = algorithm in ("tree reduce", "ring gather", "pipelined ring reduce")
    outputs = [b[bounds[r]] if algorithm in ("ring reduce-scatter", "ring scatter") else b
               for r, b in enumerate(bufs)]
    return [o if not at_root or r == root else None for r, o in enumerate(outputs)]


def reference(algorithm: str, k: int | None = None, nbytes: int | None = None,
              inputs: Sequence[np.ndarray] | None = None, root: int = 0, segments: int = 1) -> Reference:
    """Run `algorithm` (a name in costmodel.collectives.SIMULATED) message by message: on `inputs` (moving
    data; for all-gather and gather each device's piece) or on K devices and `nbytes` (counts
    only), cut and numbered as in collectives.py."""
    k = len(inputs) if inputs is not None else k
    n_chunks = segments if algorithm.startswith("pipelined") else k
    bufs, itemsize, bounds = None, 1, None
    if inputs is not None:
        bufs, itemsize, bounds = _starting_buffers(algorithm, inputs, root)
        nbytes = bufs[0].size
    if bounds is None:
        bounds = _slices([len(part) for part in np.array_split(np.zeros(nbytes, dtype=np.int8), n_chunks)])
    server = algorithm == "parameter server"
    if server and bufs is not None:
        bufs.append(np.zeros_like(bufs[0]))
    net = _Network(k + server, bounds, bufs, itemsize)
    _send_messages(net, algorithm, k, root, segments)
    outputs = None if bufs is None else _outputs(algorithm, bufs, bounds, root)
    return Reference(net.sent, net.received, net.round_bytes, outputs)
