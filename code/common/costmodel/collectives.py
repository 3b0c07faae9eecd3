"""Every collective and every algorithm for one, defined once. Pure Python: no torch, no numpy.

    from common.costmodel.collectives import algorithm, collective
    collective("all-reduce").torch_name                   # "all_reduce", what torch.distributed calls it
    ring = algorithm("ring all-reduce")
    ring.bytes_sent(4, 1000)                              # [1500.0] * 4: what each ring position sends
    ring.rounds(4), ring.time(4, 1000, link)              # 6, 6(α + 250/β)
    collective("broadcast").ring                          # "pipelined ring broadcast"
    collective("broadcast").algorithms                    # ... "tree broadcast", "direct broadcast"

A *collective* is what the ranks end up holding (the seven of NCCL and torch.distributed); an
*algorithm* is one way to move the bytes for it (a ring, a pipelined chain round the ring, a
binomial tree, straight to or from the root, ...). One spelling each: collectives are written
with hyphens ("all-reduce"), torch's names with underscores only where torch uses them
(`torch_name`), and an algorithm's name always says how ("tree broadcast", "pipelined ring
broadcast"), so no word means two schedules. An unknown name raises ValueError.

Sizes: N (`nbytes`) is the buffer the algorithm cuts into pieces, the nccl-tests "size": each
rank's buffer for broadcast, reduce and all-reduce; each rank's input for reduce-scatter; the
gathered whole for gather and all-gather; the root's whole buffer for scatter. The notes' piece S
is N for those three and N/K for the other four (`Collective.whole`). Bytes are listed by ring
position v = (rank - root) mod K, the root at 0 (for unrooted collectives, position = rank); the
parameter server's list has K + 1 entries, the server last.

Positions that send alike are written once (`same(bytes, count)`, a run of equal positions), so
a ring all-reduce's, reduce-scatter's or all-gather's busiest and total bytes (every collective's
counted form but scatter's and gather's) cost a few operations at any K: K = 10^9 lists nothing.
The trees and the rooted rings send differently at every position; they and `bytes_sent` are O(K).

Time: every round of these algorithms loads the busiest link alike, so the α-β time is rounds ×
(α + round_bytes / β): what lecture14.collectives measures round by round, written once here.
Exact where K (and S) divide N; the simulator counts uneven pieces byte by byte.

Where the rest lives: the real calls whose pieces differ in size, with gloo's workarounds, are in
common.collectives_real (torch, ranks only); a call's counted form, the bytes a rank is charged for
torch's `torch_name` of size N, is its ring's busiest bytes,
`algorithm(by_torch_name(name).ring).busiest_bytes(k, N)` (what cs336.comm.CommLog counts). A
collective's time and bytes have these methods as their one public name each (Algorithm.time,
Algorithm.busiest_bytes with its views bytes_sent and total_bytes); tests/common/test_collectives.py
fails when another module defines a second. Adding a collective or an algorithm: its
entry here, its schedule in lecture14/collectives.py (import fails until it has one), its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable


@dataclass(frozen=True)
class Runs:
    """Bytes by position, run-length encoded: (bytes, count) for each run of positions in a row
    that send alike. `same(x, k)` is [x] * k without the list; runs add like lists."""

    runs: tuple[tuple[Any, int], ...]

    def __add__(self, other: Runs) -> Runs:
        return Runs(self.runs + other.runs)

    def expand(self) -> list[Any]:
        return [value for value, count in self.runs for _ in range(count)]


def same(value: Any, count: int) -> Runs:
    """`count` positions in a row that each send `value` (none when count is 0)."""
    return Runs(((value, count),))


def _runs(positions: list[Any] | Runs) -> tuple[tuple[Any, int], ...]:
    """A definition's positions as runs: a plain list (one value per position) is runs of one."""
    return positions.runs if isinstance(positions, Runs) else tuple((value, 1) for value in positions)


# (K, N) -> bytes by position; generic in N's type: floats to use, Fractions for exact totals
Positions = Callable[[int, Any], "list[Any] | Runs"]


def check_size(k: int, nbytes: float) -> None:
    """ValueError unless K is a whole number >= 1 and N >= 0."""
    if int(k) != k or k < 1:
        raise ValueError(f"number of devices must be an integer >= 1, got {k}")
    if nbytes < 0:
        raise ValueError(f"size must be >= 0 bytes, got {nbytes}")


def check_segments(segments: int) -> None:
    if int(segments) != segments or segments < 1:
        raise ValueError(f"segments must be an integer >= 1, got {segments}")


def split_sizes(n: int, parts: int) -> list[int]:
    """How n elements are cut into `parts` pieces, as torch.tensor_split and np.array_split cut
    them: n // parts each, the first n % parts one more (with n < parts some are empty)."""
    if int(parts) != parts or parts < 1:
        raise ValueError(f"number of pieces must be an integer >= 1, got {parts}")
    q, extra = divmod(int(n), parts)
    return [q + 1 if i < extra else q for i in range(parts)]


def padded_shard_elements(n: int, parts: int) -> int:
    """Elements of each of `parts` equal shards when the n-element flat buffer is padded with zeros
    to a multiple of `parts`: ⌈n/parts⌉ (ZeRO's flat buffer as cs336/05_parallel.py shards it for
    gloo, whose collectives want equal shapes), where split_sizes leaves the pieces uneven."""
    if int(parts) != parts or parts < 1:
        raise ValueError(f"number of pieces must be an integer >= 1, got {parts}")
    if int(n) != n or n < 0:   # a count of elements (13e9 is one; 10.5 is not, and flooring it hid that)
        raise ValueError(f"number of elements must be a whole number >= 0, got {n}")
    return -(-int(n) // int(parts))


def tree_depth(k: int) -> int:
    """ceil(log2 K): the rounds one way up (or down) a binary tree of K devices."""
    return (int(k) - 1).bit_length()


def _tree_down_sends(k: int, v: int) -> int:
    # Going down a binomial tree, position v sends in the round of step 2^i when v is a multiple
    # of 2^(i+1) and v + 2^i exists (lecture14.collectives._tree_rounds lists the same messages).
    return sum(1 for i in range(tree_depth(k)) if v % (2 << i) == 0 and v + (1 << i) < k)


# ---- what each position sends, by algorithm (N as in the module doc) -----------------------------

def _ring_all_reduce(k: int, n: Any) -> Runs:
    return same(2 * (k - 1) * n / k, k)        # reduce-scatter then all-gather, N/K a round


def _ring_one_phase(k: int, n: Any) -> Runs:
    return same((k - 1) * n / k, k)            # reduce-scatter or all-gather: all pieces but one


def _tree_up(k: int, n: Any) -> Runs:
    return same(0, 1) + same(n, k - 1)  # every non-root sends its partial sum once


def _tree_down(k: int, n: Any) -> list[Any]:
    return [_tree_down_sends(k, v) * n for v in range(k)]


def _tree_all_reduce(k: int, n: Any) -> list[Any]:
    return [a + b for a, b in zip(_tree_up(k, n).expand(), _tree_down(k, n))]


ALGORITHM_BYTES: dict[str, Positions] = {
    "ring all-reduce": _ring_all_reduce,
    "ring reduce-scatter": _ring_one_phase,
    "ring all-gather": _ring_one_phase,
    # scatter passes on the pieces beyond it, (K-1-v)·N/K; gather the v pieces behind it, v·N/K
    "ring scatter": lambda k, n: [(k - 1 - v) * n / k for v in range(k)],
    "ring gather": lambda k, n: [v * n / k for v in range(k)],
    # a chain round the ring: every link carries all of N once, whatever the segments
    "pipelined ring broadcast": lambda k, n: same(n, k - 1) + same(0, 1),
    "pipelined ring reduce": lambda k, n: same(0, 1) + same(n, k - 1),
    "tree broadcast": _tree_down,
    "tree reduce": _tree_up,
    "tree all-reduce": _tree_all_reduce,
    # everyone to device 0, which adds and sends the sum back to each: its link carries (K-1)·N
    "naive all-reduce": lambda k, n: same((k - 1) * n, 1) + same(n, k - 1),
    "parameter server": lambda k, n: same(n, k) + same(k * n, 1),
    # straight from / to the root, one message per other rank (what the CS336 table counts for
    # gather and reduce): the root's link carries (K-1)·S
    "direct broadcast": lambda k, n: same((k - 1) * n, 1) + same(0, k - 1),
    "direct scatter": lambda k, n: same((k - 1) * n / k, 1) + same(0, k - 1),
    "direct gather": lambda k, n: same(0, 1) + same(n / k, k - 1),
    "direct reduce": lambda k, n: same(0, 1) + same(n, k - 1),
}


@dataclass(frozen=True)
class Algorithm:
    """One way to run a collective: its rounds and what a round's busiest link carries."""

    name: str
    collective: str
    rounds_of: Callable[[int, int], int]           # (K, segments) -> rounds
    round_bytes_of: Callable[[int, float, int], float]  # (K, N, segments) -> busiest link's bytes a round
    simulated: bool = True                          # lecture14.collectives has its schedule
    segmented: bool = False                         # cut into S segments that follow each other

    def bytes_sent(self, k: int, nbytes: float) -> list[float]:
        """Bytes each device sends, by ring position (module doc); it receives as much in all."""
        check_size(k, nbytes)
        return [float(b) for value, count in _runs(ALGORITHM_BYTES[self.name](int(k), nbytes))
                for b in [value] * count]

    def busiest_bytes(self, k: int, nbytes: float) -> float:
        """The most any one device sends: max(bytes_sent), read off the runs of equal positions."""
        check_size(k, nbytes)
        return max(float(value) for value, count in _runs(ALGORITHM_BYTES[self.name](int(k), nbytes))
                   if count > 0)

    def total_bytes(self, k: int, nbytes: float) -> float:
        """Bytes all devices send together (and receive). Added up in fractions and rounded once:
        exactly 2(K-1)·N for every all-reduce, not K rounded shares added up."""
        check_size(k, nbytes)
        return float(sum(value * count for value, count in
                         _runs(ALGORITHM_BYTES[self.name](int(k), Fraction(nbytes)))))

    def rounds(self, k: int, segments: int = 1) -> int:
        check_size(k, 0)
        check_segments(segments)
        return self.rounds_of(int(k), int(segments) if self.segmented else 1)

    def round_bytes(self, k: int, nbytes: float, segments: int = 1) -> float:
        check_size(k, nbytes)
        return float(self.round_bytes_of(int(k), nbytes, int(segments) if self.segmented else 1))

    def time(self, k: int, nbytes: float, link: Any, segments: int = 1) -> float:
        """α-β seconds on `link` (alpha_s, beta_Bps): rounds × (α + round_bytes / β)."""
        # The lambdas directly, checked once: DDP sweeps call this for every bucket.
        check_size(k, nbytes)
        check_segments(segments)
        k, s = int(k), int(segments) if self.segmented else 1
        rounds = self.rounds_of(k, s)
        if rounds == 0:
            return 0.0
        return rounds * (link.alpha_s + self.round_bytes_of(k, nbytes, s) / link.beta_Bps)


def _ring(k: int, s: int) -> int:
    return k - 1


def _chain(k: int, s: int) -> int:
    return 0 if k == 1 else k - 2 + s          # the first segment K-1 hops, each next one a tick later


def _one_round(k: int, s: int) -> int:
    return int(k > 1)


def _per_piece(k: int, n: float, s: int) -> float:
    return n / k


def _whole(k: int, n: float, s: int) -> float:
    return n


def _all_but_one(k: int, n: float, s: int) -> float:
    return (k - 1) * n


def _all_but_one_piece(k: int, n: float, s: int) -> float:
    return (k - 1) * n / k


_ALGORITHMS = [
    Algorithm("ring all-reduce", "all-reduce", lambda k, s: 2 * (k - 1), _per_piece),
    Algorithm("tree all-reduce", "all-reduce", lambda k, s: 2 * tree_depth(k), _whole),
    Algorithm("naive all-reduce", "all-reduce", lambda k, s: 2 * _one_round(k, s), _all_but_one),
    Algorithm("parameter server", "all-reduce", lambda k, s: 2, lambda k, n, s: k * n),
    Algorithm("ring reduce-scatter", "reduce-scatter", _ring, _per_piece),
    Algorithm("ring all-gather", "all-gather", _ring, _per_piece),
    Algorithm("ring scatter", "scatter", _ring, _per_piece),
    Algorithm("ring gather", "gather", _ring, _per_piece),
    Algorithm("pipelined ring broadcast", "broadcast", _chain, lambda k, n, s: n / s, segmented=True),
    Algorithm("pipelined ring reduce", "reduce", _chain, lambda k, n, s: n / s, segmented=True),
    Algorithm("tree broadcast", "broadcast", lambda k, s: tree_depth(k), _whole),
    Algorithm("tree reduce", "reduce", lambda k, s: tree_depth(k), _whole),
    Algorithm("direct broadcast", "broadcast", _one_round, _all_but_one, simulated=False),
    Algorithm("direct scatter", "scatter", _one_round, _all_but_one_piece, simulated=False),
    Algorithm("direct gather", "gather", _one_round, _all_but_one_piece, simulated=False),
    Algorithm("direct reduce", "reduce", _one_round, _all_but_one, simulated=False),
]
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in _ALGORITHMS}
SIMULATED = tuple(a.name for a in _ALGORITHMS if a.simulated)


@dataclass(frozen=True)
class Collective:
    """What every rank holds after the call, and the algorithms that get it there."""

    name: str
    torch_name: str      # torch.distributed's function (and common.dist_count's counted name)
    rooted: bool         # one rank is the source or destination (`src=` / `dst=`)
    whole: bool          # the notes' S is all of N (else N/K)
    ring: str            # the algorithm on a ring: what the cost model and the counters charge
    bus_factor_defined: bool = True  # nccl-tests reports a bus bandwidth for it

    @property
    def algorithms(self) -> tuple[str, ...]:
        return tuple(a.name for a in _ALGORITHMS if a.collective == self.name)

    def piece_bytes(self, k: int, nbytes: float) -> float:
        """The notes' S for a call of N bytes."""
        return nbytes if self.whole else nbytes / k

    def nbytes_of_piece(self, k: int, piece_bytes: float) -> float:
        """N for a call whose piece S is `piece_bytes`."""
        return piece_bytes if self.whole else piece_bytes * k

    def nbytes_of_input(self, k: int, input_bytes: float) -> float:
        """N for a call whose input tensors on a rank hold `input_bytes` (what common.dist_count
        records): an all-gather's input is one rank's piece, N/K; every other input is all of N."""
        return input_bytes * k if self.name == "all-gather" else input_bytes


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("broadcast", "broadcast", True, True, "pipelined ring broadcast"),
    Collective("scatter", "scatter", True, False, "ring scatter", bus_factor_defined=False),
    Collective("gather", "gather", True, False, "ring gather", bus_factor_defined=False),
    Collective("reduce", "reduce", True, True, "pipelined ring reduce"),
    Collective("all-gather", "all_gather", False, False, "ring all-gather"),
    Collective("reduce-scatter", "reduce_scatter", False, False, "ring reduce-scatter"),
    Collective("all-reduce", "all_reduce", False, True, "ring all-reduce"),
)}
BY_TORCH_NAME: dict[str, Collective] = {c.torch_name: c for c in COLLECTIVES.values()}
# torch's tensor-in, tensor-out spellings of the same two collectives (common.dist_count names them)
BY_TORCH_NAME.update({"all_gather_into_tensor": COLLECTIVES["all-gather"],
                      "reduce_scatter_tensor": COLLECTIVES["reduce-scatter"]})


def collective(name: str) -> Collective:
    """The collective called `name` ("all-reduce"); ValueError for any other spelling."""
    if name not in COLLECTIVES:
        hint = f" (torch's name for {BY_TORCH_NAME[name].name!r})" if name in BY_TORCH_NAME else ""
        raise ValueError(f"unknown collective {name!r}{hint}; one of {', '.join(COLLECTIVES)}")
    return COLLECTIVES[name]


def by_torch_name(name: str) -> Collective:
    """The collective torch.distributed calls `name` ("all_reduce"); ValueError otherwise."""
    if name not in BY_TORCH_NAME:
        raise ValueError(f"unknown collective {name!r}; one of {', '.join(BY_TORCH_NAME)}")
    return BY_TORCH_NAME[name]


def algorithm(name: str) -> Algorithm:
    """The algorithm called `name` ("ring all-reduce"); ValueError for a collective's bare name."""
    if name not in ALGORITHMS:
        hint = (f" ({name!r} is a collective; its algorithms: {', '.join(COLLECTIVES[name].algorithms)})"
                if name in COLLECTIVES else "")
        raise ValueError(f"unknown algorithm {name!r}{hint}; one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def bus_factor(name: str, k: int) -> float:
    """nccl-tests' busbw / algbw: the ring's busiest-rank bytes per byte of N (0 for K = 1)."""
    coll = collective(name)
    if not coll.bus_factor_defined:
        raise ValueError(f"nccl-tests reports no bus bandwidth for {name!r}")
    return algorithm(coll.ring).busiest_bytes(k, 1.0)
