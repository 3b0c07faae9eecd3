"""The notes' table of the seven collectives (CS336 lecture 8) as data, and the per-rank send
volumes it quotes, counted three ways: the notes' formula, costmodel's ring closed form, and the
simulator's byte count (lecture14.collectives.traffic). Pure: no torch, no processes.

    v = volumes(4, 1001)["all-reduce"]
    v.notes, v.closed, v.sent, v.busiest   # 1501.5, [1501.5] * 4, [1502, 1502, 1501, 1501], 1502

N is the buffer that gets cut into p chunks, as in `traffic`: every rank's buffer for broadcast,
reduce and all-reduce (the notes' S = N); the root's whole for scatter, the gathered whole for
gather and all-gather, every rank's input for reduce-scatter (S = N/p). Where p does not divide N,
pieces follow np.array_split (the first N mod p one byte longer).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.costmodel import collectives as cdef
from lecture14 import collectives as col

ROOT = 0                    # the root of broadcast, scatter, gather, reduce
NOTES_P, NOTES_N = 4, 4000  # the notes' p = 4 and a buffer p divides, as their formulas assume

# The simulator's ring algorithm for each primitive (broadcast and reduce: a chain round the ring).
SIM_ALGORITHM = {c.name: c.ring for c in cdef.COLLECTIVES.values()}

# Whose sends each entry of the notes' volume column describes: the root's for broadcast and scatter
# ("S (root sends)"), the busiest rank's for the others (every rank's, in their words).
WHOSE_SENDS = {"broadcast": "root", "scatter": "root", "gather": "busiest", "reduce": "busiest",
               "all-gather": "busiest", "reduce-scatter": "busiest", "all-reduce": "busiest"}


def notes_volume(primitive: str, p: int, piece: float) -> float:
    """The notes' per-rank send volume, evaluated: S for the rooted four, (p-1)/p·pS, 2(p-1)/p·S."""
    if primitive in ("all-gather", "reduce-scatter"):
        return (p - 1) / p * p * piece
    if primitive == "all-reduce":
        return 2 * (p - 1) / p * piece
    return float(piece)


@dataclass(frozen=True)
class Volume:
    """One primitive on p ranks: S, the notes' figure, and every rank's bytes (rank order)."""

    piece: float           # the notes' S
    notes: float           # the notes' formula at S
    closed: list[float]    # common.costmodel.collectives: the ring's bytes_sent, by rank
    sent: list[int]        # the simulator's count, by rank
    messages: list[int]    # messages each rank sends
    direct: str            # the rooted ones sent straight to / from the root: "root 3S" etc.

    @property
    def busiest(self) -> int:
        return max(self.sent)

    @property
    def within(self) -> bool:
        """Every rank's count within one byte per message it sends of the closed form (equal
        where p divides N: the pieces then are exactly S)."""
        return all(abs(s - c) < m or s == c for s, c, m in zip(self.sent, self.closed, self.messages))


def volumes(p: int, nbytes: int) -> dict[str, Volume]:
    """The seven primitives' per-rank send volumes on p ranks for a buffer of `nbytes` (N)."""
    out = {}
    for name, alg in SIM_ALGORITHM.items():
        piece = cdef.collective(name).piece_bytes(p, nbytes)
        chunks = 1 if cdef.algorithm(alg).segmented else p  # a chain moves the whole buffer
        by_position = cdef.algorithm(alg).bytes_sent(p, cdef.collective(name).nbytes_of_piece(p, piece))
        closed = [by_position[(r - ROOT) % p] for r in range(p)]
        sent = col.traffic(alg, p, nbytes, root=ROOT).sent.tolist()
        messages = col.traffic(alg, p, chunks, root=ROOT).sent.tolist()  # one byte per message
        direct = ""
        if name in ("scatter", "gather"):
            star = cdef.algorithm(f"direct {name}").bytes_sent(p, cdef.collective(name).nbytes_of_piece(p, 1))
            direct = ("the root sends " if name == "scatter" else "each other rank sends ") + \
                f"{max(star):g}S"
        out[name] = Volume(piece, notes_volume(name, p, piece), closed, sent, messages, direct)
    return out


def expected_lengths(primitive: str, p: int, n: int) -> list[tuple[int | None, int | None]]:
    """(elements in, elements out) on each rank, by the notes' table, for n numbers per rank
    (None: the rank passes or gets nothing). Pieces of n follow np.array_split."""
    pieces = cdef.split_sizes(n, p)
    root = [r == ROOT for r in range(p)]
    return [{
        "broadcast": (n, n), "reduce": (n, n), "all-reduce": (n, n),  # reduce: the others keep scratch
        "scatter": (n if root[r] else None, pieces[r]),
        "gather": (n, p * n if root[r] else None),
        "all-gather": (n, p * n), "reduce-scatter": (n, pieces[r]),
    }[primitive] for r in range(p)]


def lengths_text(per_rank: list[list[int | None]]) -> str:
    """Per rank [in, out] element counts as 'in → out': '5 each', 'rank 0: 20', or one per rank."""
    def one(values: list[int | None]) -> str:
        present = [v for v in values if v is not None]
        if len(present) == len(values) and len(set(present)) == 1:
            return f"{present[0]} each"
        if len(present) == 1 and values[ROOT] is not None:
            return f"rank {ROOT}: {values[ROOT]}"
        return " ".join("-" if v is None else str(v) for v in values)
    return f"{one([r[0] for r in per_rank])} → {one([r[1] for r in per_rank])}"


def shape_text(before: list[int | None], after: list[int | None], defined: list[bool]) -> str:
    """One run's shapes in the notes' words, "rank 0: p·S → each: S": who holds something before and
    who holds a result after (`defined`: the ranks whose result is defined and right), and how much
    in units of S, the smaller of the two (mean element counts, so uneven pieces still read S)."""
    p = len(before)
    holders_in = [r for r, c in enumerate(before) if c is not None]
    holders_out = [r for r, ok in enumerate(defined) if ok]
    if not holders_in or not holders_out:
        return "nothing"
    mean_in = sum(before[r] for r in holders_in) / len(holders_in)
    mean_out = sum(after[r] for r in holders_out) / len(holders_out)
    piece = min(mean_in, mean_out)

    def side(holders: list[int], mean: float) -> str:
        who = "each" if len(holders) == p else f"rank {holders[0]}" if len(holders) == 1 else \
            "ranks " + " ".join(map(str, holders))
        amount = ("S" if abs(mean - piece) < 1e-9
                  else "p·S" if abs(mean - p * piece) < 1e-9 else f"{mean / piece:g}·S")
        return f"{who}: {amount}"
    return f"{side(holders_in, mean_in)} → {side(holders_out, mean_out)}"


def chain_order(p: int, way: int) -> list[int]:
    """The ranks of a reduce round the ring into the root, first to last: way = 1 goes
    ROOT+1, ROOT+2, ..., ROOT (clockwise), way = -1 the other way round."""
    return [(ROOT + way * i) % p for i in range(1, p)] + [ROOT]


# ---- the tables the script prints (rows of text and numbers) ----------------------------------

def column(values: list[float]) -> list[str]:
    """Bytes as text, two decimals where not whole, right-aligned to each other."""
    texts = [f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}" for v in values]
    return [t.rjust(max(map(len, texts))) for t in texts]


def _columns(rows: list[list[float]]) -> list[list[str]]:
    return [list(r) for r in zip(*(column(list(c)) for c in zip(*rows)))]


def volume_rows(p: int, nbytes: int) -> list[list]:
    """Per primitive: the notes' figure, costmodel's and the simulator's busiest rank (bytes,
    as text), every rank's count, and whether each is within a byte per message of costmodel."""
    vols = volumes(p, nbytes)
    numbers = _columns([[v.notes, max(v.closed), v.busiest] for v in vols.values()])
    return [[name, *nums, " ".join(map(str, v.sent[:8])) + (" …" if p > 8 else ""), "yes" if v.within
             else "NO"]
            for (name, v), nums in zip(vols.items(), numbers)]


def split_rows(ps: list[int], nbytes: int) -> list[list]:
    """Per p: bytes per rank of reduce-scatter (sent) and all-gather (received), their bound
    (p-1)/p·N, the ring all-reduce's (average and busiest) and the notes' 2(p-1)/p·N."""
    rows = []
    for p in ps:
        rs, ag, ar = (
            col.traffic(a, p, nbytes) for a in ("ring reduce-scatter", "ring all-gather", "ring all-reduce")
        )
        rows.append([rs.sent.mean(), ag.received.mean(), (p - 1) / p * nbytes, ar.sent.mean(),
                     ar.busiest_sent, 2 * (p - 1) / p * nbytes])
    return [[p, *cells] for p, cells in zip(ps, _columns(rows))]


def lower_bound_rows(p: int, nbytes: int) -> list[list]:
    """Ring, tree and naive all-reduce: bytes sent in all and by the busiest rank, over N, beside
    the fewest possible (2(p-1) per element) and its average per rank, 2(p-1)/p."""
    rows = []
    for label in ("ring", "tree", "naive"):
        res = col.traffic(f"{label} all-reduce", p, nbytes)
        rows.append([label, res.total_sent / nbytes, 2 * (p - 1), res.busiest_sent / nbytes, 2 * (p - 1) / p])
    return rows
