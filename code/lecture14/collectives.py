"""A round-by-round simulator of collectives on K devices. Pure numpy: no torch, no processes.

    res = ring_allreduce(symbolic_inputs(4), history=True)
    res.rounds[-1].state[0]      # what worker 0 holds at the end: a0+b0+c0+d0, a1+b1+c1+d1, ...
    res.sent, res.received       # bytes each device sent / received, counted message by message
    res.time(link)               # α-β time: each round costs α + (busiest device's bytes)/β

One code path serves two kinds of data:
  numeric   one 1-D numpy array per device; any K >= 1 and any length, also not divisible by K;
  symbolic  `symbolic_inputs(K)`: object arrays whose elements are `Sym` sums in the notes'
            notation (worker letters a, b, c, ..., element digits: `a1+b1+c1+d1`).
A buffer of n elements is cut into K chunks at np.array_split boundaries (the first n % K chunks are
one element longer; with n < K some chunks are empty), so the same code runs any length.

Model of a round: every message of a round is in flight at once, links are full duplex, and a
device may send and receive in the same round. Payloads are read before any is applied, so a
round's result does not depend on the order messages are listed in. A symbolic element counts as
SYMBOL_BYTES bytes (as if it were a float32).

Public API (stable; other scripts use it):
  symbolic_inputs, Sym, worker_name, chunk_bounds, format_chunks
  broadcast, reduce, allreduce, reduce_scatter, all_gather     the five primitives
  ring_allreduce, tree_allreduce, naive_allreduce, parameter_server, pipelined_ring_broadcast
  Result (outputs, sent, received, rounds, bounds, initial, time(), n_rounds, ...), Round, Transfer
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

SYMBOL_BYTES = 4  # a symbolic element is charged like one float32


# ---- symbolic values -------------------------------------------------------------------------

def worker_name(rank: int) -> str:
    """a, b, ..., z, then aa, ab, ... (spreadsheet columns) for workers beyond 26."""
    if rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    name, r = "", rank + 1
    while r:
        r, rem = divmod(r - 1, 26)
        name = chr(ord("a") + rem) + name
    return name


class Sym:
    """A sum of named elements, such as a2+c2+d2; terms kept sorted by (worker, element).

    Sym() is the empty sum (printed "0"). A term that appears twice is kept twice (a1+a1), so a
    simulator that adds something twice shows it.
    """

    __slots__ = ("terms",)

    def __init__(self, terms: Sequence[tuple[int, int]] = ()) -> None:
        self.terms = tuple(sorted(terms))

    def __add__(self, other: Any) -> Sym:
        if isinstance(other, Sym):
            return Sym(self.terms + other.terms)
        if isinstance(other, (int, float)) and other == 0:  # sum() and np.sum start from 0
            return self
        return NotImplemented

    __radd__ = __add__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(self.terms)

    def __str__(self) -> str:
        return "+".join(f"{worker_name(w)}{j}" for w, j in self.terms) or "0"

    __repr__ = __str__


def symbolic_inputs(k: int, length: int | None = None) -> list[np.ndarray]:
    """K object arrays: worker r holds <name r>0, <name r>1, ... (length defaults to K, as in the notes)."""
    if k < 1:
        raise ValueError(f"need at least one worker, got {k}")
    length = k if length is None else length
    out = []
    for r in range(k):
        arr = np.empty(length, dtype=object)
        for j in range(length):
            arr[j] = Sym(((r, j),))
        out.append(arr)
    return out


def chunk_bounds(n: int, k: int) -> list[slice]:
    """The K chunks of n elements at np.array_split boundaries (first n % K chunks one longer)."""
    q, extra = divmod(n, k)
    sizes = [q + 1 if i < extra else q for i in range(k)]
    return _bounds_from_sizes(sizes)


def _bounds_from_sizes(sizes: Sequence[int]) -> list[slice]:
    edges = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def format_chunks(buffer: np.ndarray | None, bounds: Sequence[slice]) -> list[str]:
    """One string per chunk, elements separated by spaces ("-" for an empty or undefined chunk)."""
    if buffer is None:
        return ["-" for _ in bounds]
    out = []
    for sl in bounds:
        part = buffer[sl]
        out.append(" ".join("-" if v is None else (str(v) if isinstance(v, Sym) else f"{v:g}")
                            for v in part) or "-")
    return out


def _nbytes(arr: np.ndarray) -> int:
    return int(arr.size * (SYMBOL_BYTES if arr.dtype == object else arr.itemsize))


def _zeros_like(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == object:
        out = np.empty(arr.shape, dtype=object)
        for i in range(out.size):
            out[i] = Sym()
        return out
    return np.zeros_like(arr)


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
    """One round (one tick for the pipelined broadcast); `index` counts from 0 within its phase."""

    phase: str
    index: int
    transfers: list[Transfer]
    state: list[np.ndarray] | None = None  # every device's buffer after the round (history=True)


@dataclass
class Result:
    """What a simulated collective did. Devices are 0..K-1 (the parameter server adds device K)."""

    name: str
    outputs: list[np.ndarray | None]
    sent: np.ndarray
    received: np.ndarray
    rounds: list[Round] = field(default_factory=list)
    bounds: list[slice] = field(default_factory=list)
    initial: list[np.ndarray] | None = None  # buffers before the first round (history=True)

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

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
        """Per round, the most bytes any one device sent or received in it (its link is the bottleneck)."""
        out = []
        for rnd in self.rounds:
            per_dev: dict[tuple[str, int], int] = {}
            for t in rnd.transfers:
                per_dev[("s", t.src)] = per_dev.get(("s", t.src), 0) + t.nbytes
                per_dev[("r", t.dst)] = per_dev.get(("r", t.dst), 0) + t.nbytes
            out.append(max(per_dev.values()) if per_dev else 0)
        return out

    def time(self, link: Any) -> float:
        """α-β time (seconds) on `link` (anything with alpha_s, beta_Bps): Σ over rounds of α + busiest/β."""
        return sum(link.alpha_s + b / link.beta_Bps for b in self.round_bytes())


class _Network:
    """Carries messages between device buffers, round by round, counting bytes.

    With `sizes_only_for` = K there are no buffers: a message of chunk c counts len(bounds[c]) bytes.
    """

    def __init__(self, name: str, bufs: list[np.ndarray], bounds: list[slice], history: bool,
                 sizes_only_for: int = 0) -> None:
        self.name, self.bufs, self.bounds, self.history = name, bufs, bounds, history
        n_devices = sizes_only_for or len(bufs)
        self.sent = np.zeros(n_devices, dtype=np.int64)
        self.received = np.zeros(n_devices, dtype=np.int64)
        self.rounds: list[Round] = []
        self.initial = [b.copy() for b in bufs] if history else None

    def exchange(self, phase: str, index: int, messages: list[tuple[int, int, int | None, str]]) -> None:
        """One round: (src, dst, chunk or None, "add"/"copy") messages, all in flight together."""
        if not messages:
            return
        # Read every payload first: a device that sends and receives the same chunk in one round
        # sends what it held at the start of the round.
        sizes_only = not self.bufs
        payloads = [None if sizes_only else self.bufs[src][self._slice(chunk)].copy() for src, _, chunk, _ in messages]
        transfers = []
        for (src, dst, chunk, op), payload in zip(messages, payloads):
            sl = self._slice(chunk)
            if payload is None:  # sizes only: the chunk's length is its byte count
                nbytes = sl.stop - sl.start
            else:
                nbytes = _nbytes(payload)
                self.bufs[dst][sl] = self.bufs[dst][sl] + payload if op == "add" else payload
            self.sent[src] += nbytes
            self.received[dst] += nbytes
            transfers.append(Transfer(src, dst, chunk, nbytes, op, payload if self.history else None))
        state = [b.copy() for b in self.bufs] if self.history else None
        self.rounds.append(Round(phase, index, transfers, state))

    def _slice(self, chunk: int | None) -> slice:
        return slice(None) if chunk is None else self.bounds[chunk]

    def result(self, outputs: list[np.ndarray | None]) -> Result:
        return Result(self.name, outputs, self.sent, self.received, self.rounds, self.bounds, self.initial)


def _check_inputs(inputs: Sequence[np.ndarray], same_length: bool = True, root: int = 0) -> list[np.ndarray]:
    if len(inputs) < 1:
        raise ValueError("need at least one device")
    if not 0 <= root < len(inputs):
        raise ValueError(f"root must be in 0..{len(inputs) - 1}, got {root}")
    arrs = [np.asarray(x) for x in inputs]
    if any(a.ndim != 1 for a in arrs):
        raise ValueError("each device's buffer must be a 1-D array")
    if same_length and len({a.size for a in arrs}) > 1:
        raise ValueError(f"every device needs the same buffer length, got {[a.size for a in arrs]}")
    return [a.copy() for a in arrs]


# ---- ring building blocks (the notes' §3.2 chunk indices, with an offset) -------------------

def _ring_reduce_scatter(net: _Network, k: int, offset: int) -> None:
    # Round i: device r sends chunk (r - i + offset) mod K to r + 1, which adds it to its own.
    # offset 0 is the notes' schedule: afterwards device r holds the full sum of chunk (r + 1) mod K.
    for i in range(k - 1):
        net.exchange("reduce-scatter", i, [(r, (r + 1) % k, (r - i + offset) % k, "add") for r in range(k)])


def _ring_all_gather(net: _Network, k: int, offset: int) -> None:
    # Round i: device r sends chunk (r - i + offset) mod K, already complete, and its right
    # neighbour overwrites its copy. Device r starts out owning chunk (r + offset) mod K.
    for i in range(k - 1):
        net.exchange("all-gather", i, [(r, (r + 1) % k, (r - i + offset) % k, "copy") for r in range(k)])


def ring_allreduce(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Ring all-reduce: reduce-scatter then all-gather, K - 1 rounds each, N/K bytes per message.

    Round i of reduce-scatter: device r sends chunk (r - i) mod K; of all-gather: (r + 1 - i) mod K.
    Each device sends 2(K-1)/K·N bytes when K divides N (exactly: all chunks but one, twice).
    """
    bufs = _check_inputs(inputs)
    k = len(bufs)
    net = _Network("ring all-reduce", bufs, chunk_bounds(bufs[0].size, k), history)
    _ring_reduce_scatter(net, k, offset=0)
    _ring_all_gather(net, k, offset=1)
    return net.result([b.copy() for b in bufs])


# ---- binomial tree building blocks -----------------------------------------------------------

def _tree_reduce(net: _Network, k: int, root: int) -> None:
    # Binomial tree on virtual ranks v = (r - root) mod K: in round j, v with v mod 2^(j+1) = 2^j
    # sends its partial sum to v - 2^j. ceil(log2 K) rounds; the root receives one message a round.
    depth = (k - 1).bit_length()
    for j in range(depth):
        step = 1 << j
        msgs = [((v + root) % k, (v - step + root) % k, None, "add")
                for v in range(step, k, 2 * step)]
        net.exchange("reduce", j, msgs)


def _tree_broadcast(net: _Network, k: int, root: int) -> None:
    # The reverse: in round j, every v that already has the data (v mod 2·step = 0) sends to v + step.
    depth = (k - 1).bit_length()
    for j in range(depth):
        step = 1 << (depth - 1 - j)
        msgs = [((v + root) % k, (v + step + root) % k, None, "copy")
                for v in range(0, k, 2 * step) if v + step < k]
        net.exchange("broadcast", j, msgs)


def tree_allreduce(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Binary (binomial) tree all-reduce: reduce up to device 0, broadcast back down.

    2·ceil(log2 K) rounds, each message the whole N; device 0 receives ceil(log2 K)·N and sends as much.
    """
    bufs = _check_inputs(inputs)
    k = len(bufs)
    net = _Network("tree all-reduce", bufs, chunk_bounds(bufs[0].size, k), history)
    _tree_reduce(net, k, 0)
    _tree_broadcast(net, k, 0)
    return net.result([b.copy() for b in bufs])


def naive_allreduce(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Naive all-reduce (not used in practice): everyone sends to device 0, it sums, sends back.

    2 rounds, but device 0's link carries (K-1)·N each way: it is the bottleneck.
    """
    bufs = _check_inputs(inputs)
    k = len(bufs)
    net = _Network("naive all-reduce", bufs, chunk_bounds(bufs[0].size, k), history)
    # Device 0 adds the arrivals in rank order: ((x0 + x1) + x2) + ...
    net.exchange("gather", 0, [(r, 0, None, "add") for r in range(1, k)])
    net.exchange("broadcast", 0, [(0, r, None, "copy") for r in range(1, k)])
    return net.result([b.copy() for b in bufs])


def parameter_server(gradients: Sequence[np.ndarray], params: np.ndarray | None = None,
                     lr: float = 1.0, history: bool = False) -> Result:
    """One parameter-server step: K workers (devices 0..K-1) and a server (device K).

    Push: every worker sends its gradient to the server, which sums them in worker order. Update:
    new = params - lr · sum / K (numeric only); with params=None the server keeps the plain sum,
    which makes the step an all-reduce through a server. Pull: the server sends the result to every
    worker. 2 rounds; the server receives K·N and sends K·N. outputs[K] is the server's buffer.
    """
    grads = _check_inputs(gradients)
    k = len(grads)
    bufs = grads + [_zeros_like(grads[0])]
    net = _Network("parameter server", bufs, chunk_bounds(grads[0].size, k), history)
    net.exchange("push", 0, [(r, k, None, "add") for r in range(k)])
    if params is not None:
        params = np.asarray(params)
        if params.shape != grads[0].shape:
            raise ValueError(f"params shape {params.shape} differs from the gradients' {grads[0].shape}")
        bufs[k][:] = params - lr * bufs[k] / k
    net.exchange("pull", 0, [(k, r, None, "copy") for r in range(k)])
    return net.result([b.copy() for b in bufs])


# ---- the five primitives ---------------------------------------------------------------------

def broadcast(inputs: Sequence[np.ndarray], root: int = 0, history: bool = False) -> Result:
    """Every device ends with the root's buffer (binomial tree, ceil(log2 K) rounds of N bytes).

    Every device passes a buffer of the same length, as in NCCL; the non-roots' contents are overwritten.
    """
    bufs = _check_inputs(inputs, root=root)
    k = len(bufs)
    net = _Network("broadcast", bufs, chunk_bounds(bufs[0].size, k), history)
    _tree_broadcast(net, k, root)
    return net.result([b.copy() for b in bufs])


def reduce(inputs: Sequence[np.ndarray], root: int = 0, history: bool = False) -> Result:
    """The root ends with the elementwise sum (binomial tree); other outputs are None (undefined in NCCL)."""
    bufs = _check_inputs(inputs, root=root)
    k = len(bufs)
    net = _Network("reduce", bufs, chunk_bounds(bufs[0].size, k), history)
    _tree_reduce(net, k, root)
    return net.result([bufs[r].copy() if r == root else None for r in range(k)])


def allreduce(inputs: Sequence[np.ndarray], algorithm: str = "ring", history: bool = False) -> Result:
    """Every device ends with the elementwise sum; algorithm "ring" (default), "tree" or "naive"."""
    algorithms = {"ring": ring_allreduce, "tree": tree_allreduce, "naive": naive_allreduce}
    if algorithm not in algorithms:
        raise ValueError(f"algorithm must be one of {sorted(algorithms)}, got {algorithm!r}")
    return algorithms[algorithm](inputs, history=history)


def reduce_scatter(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Device r ends with chunk r of the sum (array_split boundaries: sizes differ by at most one).

    Ring schedule shifted by one against the notes' so that device r owns chunk r: round i, device r
    sends chunk (r - 1 - i) mod K. K - 1 rounds; each device sends N - (its last chunk's size).
    """
    bufs = _check_inputs(inputs)
    k = len(bufs)
    net = _Network("reduce-scatter", bufs, chunk_bounds(bufs[0].size, k), history)
    _ring_reduce_scatter(net, k, offset=-1)
    return net.result([bufs[r][net.bounds[r]].copy() for r in range(k)])


def all_gather(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Every device ends with the concatenation of all inputs (which may differ in length). Ring, K - 1 rounds."""
    pieces = _check_inputs(inputs, same_length=False)
    k = len(pieces)
    bounds = _bounds_from_sizes([p.size for p in pieces])
    total = bounds[-1].stop
    bufs = []
    for r, piece in enumerate(pieces):
        buf = np.empty(total, dtype=piece.dtype) if piece.dtype == object else np.zeros(total, dtype=piece.dtype)
        buf[bounds[r]] = piece
        bufs.append(buf)
    net = _Network("all-gather", bufs, bounds, history)
    _ring_all_gather(net, k, offset=0)
    return net.result([b.copy() for b in bufs])


# ---- pipelined ring broadcast (the notes' §3.1) ----------------------------------------------

def pipelined_ring_broadcast(data: np.ndarray | int, k: int, segments: int = 1, root: int = 0,
                             history: bool = False) -> Result:
    """Broadcast round a ring of K devices, cut into S segments, tick by tick.

    In each tick every link (device at ring position p -> p + 1) moves at most one segment: the
    next one its neighbour lacks. The first segment needs K - 1 ticks, each further one arrives a
    tick later: K - 2 + S ticks (0 for K = 1). `data` is a 1-D array (moved for real; outputs hold
    each device's copy) or an int number of bytes (only segment sizes move; outputs are None), which
    keeps a 64 MB sweep over many S cheap. Segments follow np.array_split boundaries.
    """
    if k < 1 or not 0 <= root < k:
        raise ValueError(f"need K >= 1 devices and a root in 0..K-1, got K = {k}, root = {root}")
    if int(segments) != segments or segments < 1:
        raise ValueError(f"segments must be an integer >= 1, got {segments}")
    real = isinstance(data, np.ndarray)
    if real and data.ndim != 1:
        raise ValueError("data must be a 1-D array")
    n = data.size if real else int(data)
    if n < 0:
        raise ValueError(f"size must be >= 0, got {n}")
    seg_bounds = chunk_bounds(n, segments)
    bufs: list[np.ndarray] = []
    if real:
        blank = np.empty(n, dtype=object) if data.dtype == object else np.zeros_like(data)
        bufs = [data.copy() if r == root else blank.copy() for r in range(k)]
    net = _Network("pipelined ring broadcast", bufs, seg_bounds, history and real, sizes_only_for=0 if real else k)
    have = [segments] + [0] * (k - 1)  # segments held, by ring position from the root (in order)
    tick = 0
    while have[-1] < segments:
        moves = [p for p in range(k - 1) if have[p] > have[p + 1]]  # decided on the tick's start
        net.exchange("tick", tick, [((p + root) % k, (p + 1 + root) % k, have[p + 1], "copy") for p in moves])
        for p in moves:
            have[p + 1] += 1
        tick += 1
        if tick > k + segments:  # cannot happen while every link moves a segment when it can
            raise RuntimeError("pipelined broadcast did not finish")
    return net.result([b.copy() for b in bufs] if real else [None] * k)
