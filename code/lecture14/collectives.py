"""A round-by-round simulator of collectives on K devices. Pure numpy: no torch, no processes.

    res = ring_allreduce(symbolic_inputs(4), history=True)
    res.rounds[-1].state[0]      # what worker 0 holds at the end: a0+b0+c0+d0, a1+b1+c1+d1, ...
    res.sent, res.received       # bytes each device sent / received
    res.time(link)               # α-β time: each round costs α + (busiest device's bytes)/β
    traffic("ring all-reduce", 1024, 64_000_000)   # bytes and rounds only, no data moved

Each algorithm is a schedule: every message it sends (round, source, destination, chunk, add or
copy) as numpy arrays, built in one go; lecture14.network counts bytes and rounds over that table
with a few numpy calls and moves data a round at a time, so K = 1024 takes a fraction of a second.
collectives_reference.py simulates the same collectives one message at a time; tests compare them.

One code path serves two kinds of data:
  numeric   one 1-D numpy array per device; any K >= 1 and any length, also not divisible by K;
  symbolic  `symbolic_inputs(K)`: object arrays whose elements are `Sym` sums in the notes'
            notation (worker letters a, b, c, ..., element digits: `a1+b1+c1+d1`). Symbolic sums
            grow with K (a full sum has K terms): readable, and affordable, for small K only.
A buffer of n elements is cut into K chunks at np.array_split boundaries (the first n % K chunks are
one element longer; with n < K some chunks are empty), so the same code runs any length.

Rounds: every message of a round is in flight at once, links are full duplex (network.py says
more). A symbolic element counts as SYMBOL_BYTES bytes (as if a float32); in `traffic`, one byte.

Public API (stable; other scripts use it):
  symbolic_inputs, Sym, worker_name, chunk_bounds, format_chunks
  broadcast, reduce, allreduce, reduce_scatter, all_gather     the five primitives (NCCL's)
  scatter, gather                                              root to all / all to root, ring
  ring_allreduce, tree_allreduce, naive_allreduce, parameter_server, pipelined_ring_broadcast,
  pipelined_ring_reduce, traffic (counts only, any algorithm by name: costmodel.collectives.SIMULATED)
  Result (outputs, sent, received, rounds, bounds, initial, time(), n_rounds, ...), Round, Transfer
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from common.costmodel import collectives as cdef
from lecture14.network import Result, Schedule, bounds_from_sizes, chunk_bounds, run_schedule
from lecture14.symbolic import Sym

SYMBOL_BYTES = 4  # a symbolic element is charged like one float32


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
    return arrs


def _itemsize(arr: np.ndarray) -> int:
    return SYMBOL_BYTES if arr.dtype == object else arr.itemsize


def _stack(arrs: Sequence[np.ndarray], n_dev: int | None = None) -> np.ndarray:
    """One row per device; rows beyond the inputs (the server) start as zeros / empty sums."""
    stacked = np.stack(arrs)
    extra = (len(arrs) if n_dev is None else n_dev) - len(arrs)
    if extra <= 0:
        return stacked
    blank = np.zeros((extra, stacked.shape[1]), dtype=stacked.dtype)
    if stacked.dtype == object:
        blank.flat[:] = [Sym() for _ in range(blank.size)]
    return np.concatenate([stacked, blank])


# ---- the algorithms' schedules (ring positions v = (rank - root) mod K) ----------------------

def _ring_rounds(sched: Schedule, phase: str, k: int, offset: int, op: str) -> None:
    # Round i: device r sends chunk (r - i + offset) mod K to r + 1. reduce-scatter (op "add") with
    # offset 0 is the notes' schedule: afterwards device r holds the full sum of chunk (r + 1) mod K.
    # all-gather (op "copy"): device r starts out owning chunk (r + offset) mod K.
    i, r = np.repeat(np.arange(k - 1), k), np.tile(np.arange(k), k - 1)
    sched.add(phase, i, r, (r + 1) % k, (r - i + offset) % k, op)


def _tree_rounds(sched: Schedule, k: int, root: int, up: bool) -> None:
    # Binomial tree on positions v: going up (reduce), in round j every v with v mod 2^(j+1) = 2^j
    # sends its partial sum to v - 2^j; going down (broadcast), the reverse, in the reverse order.
    # ceil(log2 K) rounds each way; every message is the whole buffer.
    depth = (k - 1).bit_length()
    index, src, dst = [], [], []
    for j in range(depth):
        step = 1 << (j if up else depth - 1 - j)
        senders = np.arange(step, k, 2 * step) if up else np.arange(0, k - step, 2 * step)
        index.append(np.full(senders.size, j))
        src.append(senders)
        dst.append(senders - step if up else senders + step)
    if depth:
        v_src, v_dst = np.concatenate(src), np.concatenate(dst)
        sched.add("reduce" if up else "broadcast", np.concatenate(index), (v_src + root) % k,
                  (v_dst + root) % k, -1, "add" if up else "copy")


def _chain_rounds(sched: Schedule, phase: str, k: int, root: int, segments: int, into_root: bool) -> None:
    # A pipelined chain round the ring: link p (0 .. K-2) carries segment s in tick p + s, so the
    # first segment needs K - 1 ticks and each further one arrives a tick later: K - 2 + S ticks.
    # Out of the root (broadcast): positions 0 -> 1 -> ... -> K-1, copying. Into the root (reduce):
    # positions 1 -> 2 -> ... -> K-1 -> 0, each adding its own part before passing it on.
    p, s = np.meshgrid(np.arange(k - 1), np.arange(segments), indexing="ij")
    p, s = p.ravel(), s.ravel()
    v = p + 1 if into_root else p
    sched.add(phase, p + s, (v + root) % k, (v + 1 + root) % k, s, "add" if into_root else "copy")


def _server_rounds(sched: Schedule, k: int, push: bool) -> None:
    # Workers 0..K-1 and a server, device K: in one round every worker pushes its whole buffer to
    # the server, which adds them in worker order; in another the server sends its buffer back.
    workers = np.arange(k)
    if push:
        sched.add("push", np.zeros(k), workers, k, -1, "add")
    else:
        sched.add("pull", np.zeros(k), k, workers, -1, "copy")


def _scatter_rounds(sched: Schedule, k: int, root: int) -> None:
    # Ring scatter: the root sends the farthest position's piece first; every device passes on,
    # one piece a round, the pieces that are not its own. In round t the device at position v
    # sends the piece of position K-1+v-t (for v <= t <= K-2). K - 1 rounds; position v sends
    # K-1-v pieces, so the root sends K-1 of its K pieces.
    t, v = np.meshgrid(np.arange(k - 1), np.arange(k - 1), indexing="ij")
    t, v = t[v <= t], v[v <= t]
    sched.add("scatter", t, (v + root) % k, (v + 1 + root) % k, (k - 1 + v - t + root) % k, "copy")


def _gather_rounds(sched: Schedule, k: int, root: int) -> None:
    # Ring gather, the mirror image: pieces travel 1 -> 2 -> ... -> K-1 -> root. In round t the
    # device at position v >= 1 sends the piece of position v - t (its own in round 0). K - 1
    # rounds; position v sends v pieces, so the root's left neighbour sends K - 1 of them.
    t, v = np.meshgrid(np.arange(k - 1), np.arange(1, k), indexing="ij")
    t, v = t[t < v], v[t < v]
    sched.add("gather", t, (v + root) % k, (v + 1 + root) % k, (v - t + root) % k, "copy")


def _naive_rounds(sched: Schedule, k: int) -> None:
    # device 0 adds the arrivals in rank order: ((x0 + x1) + x2) + ..., then sends the sum back
    sched.add("gather", np.zeros(k - 1), np.arange(1, k), 0, -1, "add")
    sched.add("broadcast", np.zeros(k - 1), 0, np.arange(1, k), -1, "copy")


def _server_step(sched: Schedule, k: int) -> None:
    _server_rounds(sched, k, push=True)
    _server_rounds(sched, k, push=False)


def _tree_all_reduce_rounds(sched: Schedule, k: int, root: int) -> None:
    _tree_rounds(sched, k, root, up=True)
    _tree_rounds(sched, k, root, up=False)


def _ring_all_reduce_rounds(sched: Schedule, k: int) -> None:
    _ring_rounds(sched, "reduce-scatter", k, 0, "add")
    _ring_rounds(sched, "all-gather", k, 1, "copy")


# Each algorithm of common.costmodel.collectives that the simulator runs: (its schedule on K devices from
# `root` in S `segments`; devices beyond K: the parameter server). Names and closed forms live there.
_BUILDERS: dict[str, tuple[Callable[[Schedule, int, int, int], None], int]] = {
    "ring all-reduce": (lambda sc, k, root, s: _ring_all_reduce_rounds(sc, k), 0),
    # reduce-scatter shifted by one: device r ends owning chunk r
    "ring reduce-scatter": (lambda sc, k, root, s: _ring_rounds(sc, "reduce-scatter", k, -1, "add"), 0),
    "ring all-gather": (lambda sc, k, root, s: _ring_rounds(sc, "all-gather", k, 0, "copy"), 0),
    "tree all-reduce": (lambda sc, k, root, s: _tree_all_reduce_rounds(sc, k, root), 0),
    "tree reduce": (lambda sc, k, root, s: _tree_rounds(sc, k, root, up=True), 0),
    "tree broadcast": (lambda sc, k, root, s: _tree_rounds(sc, k, root, up=False), 0),
    "naive all-reduce": (lambda sc, k, root, s: _naive_rounds(sc, k), 0),
    "parameter server": (lambda sc, k, root, s: _server_step(sc, k), 1),  # workers 0..K-1, server K
    "pipelined ring broadcast": (lambda sc, k, root, s: _chain_rounds(sc, "tick", k, root, s, False), 0),
    "pipelined ring reduce": (lambda sc, k, root, s: _chain_rounds(sc, "tick", k, root, s, True), 0),
    "ring scatter": (lambda sc, k, root, s: _scatter_rounds(sc, k, root), 0),
    "ring gather": (lambda sc, k, root, s: _gather_rounds(sc, k, root), 0),
}


def check_schedules(simulated: Sequence[str]) -> None:
    """ImportError unless every simulated algorithm of the definition has its schedule here."""
    if set(_BUILDERS) != set(simulated):
        differ = sorted(set(_BUILDERS) ^ set(simulated))
        raise ImportError(f"schedules and common.costmodel.collectives disagree: {differ}")


check_schedules(cdef.SIMULATED)  # a new algorithm in common.costmodel.collectives needs its schedule here


def _schedule(algorithm: str, k: int, root: int = 0, segments: int = 1) -> tuple[Schedule, int, int]:
    """(schedule, devices, chunks the buffer is cut into) of `algorithm` on K devices."""
    alg = cdef.algorithm(algorithm)  # ValueError for an unknown name
    if algorithm not in _BUILDERS:
        raise ValueError(f"{algorithm!r} is not simulated; one of {', '.join(cdef.SIMULATED)}")
    build, extra_devices = _BUILDERS[algorithm]
    sched = Schedule()
    build(sched, k, root, segments)
    return sched, k + extra_devices, segments if alg.segmented else k


def traffic(algorithm: str, k: int, nbytes: int, root: int = 0, segments: int = 1) -> Result:
    """Bytes and rounds of one collective on K devices, without moving data (outputs are None).

    `nbytes` is the buffer that gets cut into chunks (K chunks, or S segments for the pipelined
    ones), one element = one byte: each device's buffer for the all-reduces, reduce, broadcast and
    reduce-scatter (its input); the gathered whole for all-gather and gather (K pieces); the root's
    whole buffer for scatter. `root` matters for broadcast, reduce, scatter, gather and the
    pipelined chains, `segments` for the pipelined chains only (elsewhere they are ignored).
    Cost: a few numpy calls over the schedule's messages.
    """
    if int(k) != k or k < 1 or not 0 <= root < k:
        raise ValueError(f"need K >= 1 devices and a root in 0..K-1, got K = {k}, root = {root}")
    if int(segments) != segments or segments < 1 or int(nbytes) != nbytes or nbytes < 0:
        raise ValueError(f"segments must be an integer >= 1 and nbytes >= 0, got {segments}, {nbytes}")
    sched, n_dev, n_chunks = _schedule(algorithm, int(k), root, int(segments))
    res, _ = run_schedule(algorithm, sched, n_dev, chunk_bounds(int(nbytes), n_chunks), None, False, 1)
    res.outputs = [None] * n_dev
    return res


def _simulate(algorithm: str, bufs: list[np.ndarray], history: bool, root: int = 0, segments: int = 1,
              bounds: list[slice] | None = None) -> tuple[Result, np.ndarray]:
    sched, n_dev, n_chunks = _schedule(algorithm, len(bufs), root, segments)
    stacked = _stack(bufs, n_dev)
    bounds = chunk_bounds(stacked.shape[1], n_chunks) if bounds is None else bounds
    return run_schedule(algorithm, sched, n_dev, bounds, stacked, history, _itemsize(stacked))


# ---- the algorithms --------------------------------------------------------------------------

def ring_allreduce(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Ring all-reduce: reduce-scatter then all-gather, K - 1 rounds each, N/K bytes per message.

    Round i of reduce-scatter: device r sends chunk (r - i) mod K; of all-gather: (r + 1 - i) mod K.
    Each device sends 2(K-1)/K·N bytes when K divides N (exactly: all chunks but one, twice).
    """
    res, bufs = _simulate("ring all-reduce", _check_inputs(inputs), history)
    res.outputs = [b.copy() for b in bufs]
    return res


def tree_allreduce(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Binary (binomial) tree all-reduce: reduce up to device 0, broadcast back down.

    2·ceil(log2 K) rounds, each message the whole N; device 0 receives ceil(log2 K)·N and sends as much.
    """
    res, bufs = _simulate("tree all-reduce", _check_inputs(inputs), history)
    res.outputs = [b.copy() for b in bufs]
    return res


def naive_allreduce(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Naive all-reduce (not used in practice): everyone sends to device 0, it sums, sends back.

    2 rounds, but device 0's link carries (K-1)·N each way: it is the bottleneck.
    """
    res, bufs = _simulate("naive all-reduce", _check_inputs(inputs), history)
    res.outputs = [b.copy() for b in bufs]
    return res


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
    if params is not None:
        params = np.asarray(params)
        if params.shape != grads[0].shape:
            raise ValueError(f"params shape {params.shape} differs from the gradients' {grads[0].shape}")
    push, pull = Schedule(), Schedule()
    _server_rounds(push, k, push=True)
    _server_rounds(pull, k, push=False)
    bufs = _stack(grads, k + 1)
    bounds = chunk_bounds(bufs.shape[1], k)
    first, bufs = run_schedule("parameter server", push, k + 1, bounds, bufs, history, _itemsize(bufs))
    if params is not None:
        bufs[k] = params - lr * bufs[k] / k
    second, bufs = run_schedule("parameter server", pull, k + 1, bounds, bufs, history, _itemsize(bufs))
    return Result("parameter server", [b.copy() for b in bufs], first.sent + second.sent,
                  first.received + second.received,
                  np.concatenate([first.busiest_per_round, second.busiest_per_round]),
                  first.rounds + second.rounds, bounds, first.initial)


def pipelined_ring_broadcast(data: np.ndarray | int, k: int, segments: int = 1, root: int = 0,
                             history: bool = False) -> Result:
    """Broadcast round a ring of K devices, cut into S segments, tick by tick.

    In each tick every link (device at ring position p -> p + 1) moves at most one segment: the
    next one its neighbour lacks. The first segment needs K - 1 ticks, each further one arrives a
    tick later: K - 2 + S ticks (0 for K = 1). `data` is a 1-D array (moved for real; outputs hold
    each device's copy) or an int number of bytes (counted only, as `traffic`: outputs are None,
    no round-by-round record), which keeps a 64 MB sweep over many S cheap. Segments follow
    np.array_split boundaries. Every device but the last in the chain sends N.
    """
    if k < 1 or not 0 <= root < k:
        raise ValueError(f"need K >= 1 devices and a root in 0..K-1, got K = {k}, root = {root}")
    if int(segments) != segments or segments < 1:
        raise ValueError(f"segments must be an integer >= 1, got {segments}")
    if not isinstance(data, np.ndarray):
        if int(data) < 0:
            raise ValueError(f"size must be >= 0, got {data}")
        return traffic("pipelined ring broadcast", k, int(data), root, segments)
    if data.ndim != 1:
        raise ValueError("data must be a 1-D array")
    blank = np.empty(data.size, dtype=object) if data.dtype == object else np.zeros_like(data)
    bufs = [data if r == root else blank for r in range(k)]
    res, out = _simulate("pipelined ring broadcast", bufs, history, root, int(segments))
    res.outputs = [b.copy() for b in out]
    return res


def pipelined_ring_reduce(inputs: Sequence[np.ndarray], segments: int = 1, root: int = 0,
                          history: bool = False) -> Result:
    """Reduce into the root along the ring, cut into S segments: the pipelined broadcast reversed.

    Positions 1 -> 2 -> ... -> K-1 -> root; each adds its own part to a segment before passing it
    on, one segment per link per tick: K - 2 + S ticks. Every device but the root sends N once
    (S segments of N/S). outputs[root] is the sum (added in chain order), the others None.
    """
    if int(segments) != segments or segments < 1:
        raise ValueError(f"segments must be an integer >= 1, got {segments}")
    res, bufs = _simulate(
        "pipelined ring reduce", _check_inputs(inputs, root=root), history, root, int(segments)
    )
    res.outputs = [bufs[r].copy() if r == root else None for r in range(len(bufs))]
    return res


# ---- the primitives --------------------------------------------------------------------------

def broadcast(inputs: Sequence[np.ndarray], root: int = 0, history: bool = False) -> Result:
    """Every device ends with the root's buffer (binomial tree, ceil(log2 K) rounds of N bytes).

    Every device passes a buffer of the same length, as in NCCL; the non-roots' contents are overwritten.
    """
    res, bufs = _simulate("tree broadcast", _check_inputs(inputs, root=root), history, root)
    res.outputs = [b.copy() for b in bufs]
    return res


def reduce(inputs: Sequence[np.ndarray], root: int = 0, history: bool = False) -> Result:
    """The root ends with the elementwise sum (binomial tree); other outputs are None (undefined in NCCL)."""
    res, bufs = _simulate("tree reduce", _check_inputs(inputs, root=root), history, root)
    res.outputs = [bufs[r].copy() if r == root else None for r in range(len(bufs))]
    return res


def allreduce(inputs: Sequence[np.ndarray], algorithm: str = "ring all-reduce",
              history: bool = False) -> Result:
    """Every device ends with the elementwise sum; `algorithm` by the definition's name (one spelling
    per algorithm, common/costmodel/collectives.py): "ring all-reduce" (default), "tree all-reduce" or
    "naive all-reduce"."""
    algorithms: dict[str, Callable[..., Result]] = {"ring all-reduce": ring_allreduce,
                                                    "tree all-reduce": tree_allreduce,
                                                    "naive all-reduce": naive_allreduce}
    if algorithm not in algorithms:
        raise ValueError(f"algorithm must be one of {sorted(algorithms)}, got {algorithm!r}")
    return algorithms[algorithm](inputs, history=history)


def reduce_scatter(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Device r ends with chunk r of the sum (array_split boundaries: sizes differ by at most one).

    Ring schedule shifted by one against the notes' so that device r owns chunk r: round i, device r
    sends chunk (r - 1 - i) mod K. K - 1 rounds; each device sends N - (its last chunk's size).
    """
    res, bufs = _simulate("ring reduce-scatter", _check_inputs(inputs), history)
    res.outputs = [bufs[r][res.bounds[r]].copy() for r in range(len(bufs))]
    return res


def _placed(pieces: list[np.ndarray]) -> tuple[list[np.ndarray], list[slice]]:
    """Each device's piece at its place in a buffer of the concatenated length (elsewhere 0 / None)."""
    bounds = bounds_from_sizes([p.size for p in pieces])
    bufs = []
    for r, piece in enumerate(pieces):
        buf = np.empty(bounds[-1].stop,
                       dtype=object) if piece.dtype == object else np.zeros(bounds[-1].stop, piece.dtype)
        buf[bounds[r]] = piece
        bufs.append(buf)
    return bufs, bounds


def all_gather(inputs: Sequence[np.ndarray], history: bool = False) -> Result:
    """Every device ends with the concatenation of all inputs (which may differ in length).
    Ring, K - 1 rounds."""
    bufs, bounds = _placed(_check_inputs(inputs, same_length=False))
    res, out = _simulate("ring all-gather", bufs, history, bounds=bounds)
    res.outputs = [b.copy() for b in out]
    return res


def scatter(inputs: Sequence[np.ndarray], root: int = 0, history: bool = False) -> Result:
    """Device r ends with piece r of the root's buffer (K pieces at np.array_split boundaries).

    Ring implementation (see _scatter_rounds): K - 1 rounds of one piece per link. Every device
    passes a buffer of the same length, as for broadcast; only the root's contents are sent.
    Bytes sent, with S = N/K the piece size: the root (K-1)·S, position v (K-1-v)·S, the last 0;
    K(K-1)/2·S in all. (Sending straight from the root instead: the root (K-1)·S, the others 0.)
    """
    res, bufs = _simulate("ring scatter", _check_inputs(inputs, root=root), history, root)
    res.outputs = [bufs[r][res.bounds[r]].copy() for r in range(len(bufs))]
    return res


def gather(inputs: Sequence[np.ndarray], root: int = 0, history: bool = False) -> Result:
    """The root ends with the concatenation of every device's input (lengths may differ); the
    other outputs are None. Ring implementation (see _gather_rounds): K - 1 rounds.

    Bytes sent, with S each device's piece: position v sends v·S (its own and those of the v - 1
    before it), so the root's left neighbour sends (K-1)·S, the root 0; K(K-1)/2·S in all; the
    root receives (K-1)·S. (Sending straight to the root instead: every non-root S, the root
    receives (K-1)·S in one round.)
    """
    pieces = _check_inputs(inputs, same_length=False, root=root)
    bufs, bounds = _placed(pieces)
    res, out = _simulate("ring gather", bufs, history, root, bounds=bounds)
    res.outputs = [out[r].copy() if r == root else None for r in range(len(pieces))]
    return res
