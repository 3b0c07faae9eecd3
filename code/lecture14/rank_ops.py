"""Collectives on real ranks, shared by the scripts that run them (lecture14/02_primitives.py,
cs336/01_collectives.py): readable rank data, and the calls whose pieces may differ in size.

Inside a rank (after common.launcher.launch has joined the group):
    x = rank_data(rank, n, rank_device())       # 10(r+1), 10(r+1)+1, ...: sums exact in float32
    piece, how = reduce_scatter_real(x, world_size)
    whole = all_gather_real(piece, sizes)        # pieces of unequal size: padded, then trimmed
    mine = scatter_real(whole_or_none, sizes, src=0)

Pieces follow torch.tensor_split, i.e. np.array_split and lecture14.collectives.chunk_bounds: the
first n % K are one element longer. In the parent: `all_inputs` (the same data as numpy, for the
simulator) and `show` (a buffer as a short line of numbers).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from common.capabilities import gloo_lacks

SHOWN = 16  # numbers printed per buffer; longer buffers are cut with "…"


def rank_data(rank: int, n: int, device: torch.device | None = None) -> torch.Tensor:
    """Rank r's numbers 10(r+1) + j: readable sums, exact in float32."""
    return torch.arange(n, dtype=torch.float32, device=device) + 10 * (rank + 1)


def op_data(rank: int, n: int) -> torch.Tensor:
    """Numbers from ±1, ±2 (a pattern that differs by rank and position): sums, minima, maxima and
    products of up to 127 ranks are exact in float32, so any order of any of them gives one answer."""
    return torch.tensor([1.0, 2.0, -1.0, -2.0])[(rank * rank + torch.arange(n)) % 4]


def all_inputs(world_size: int, n: int) -> list[np.ndarray]:
    """Every rank's rank_data, as numpy arrays (what the simulator gets)."""
    return [rank_data(r, n).numpy() for r in range(world_size)]


def piece_sizes(n: int, world_size: int) -> list[int]:
    """Sizes of the K pieces of n elements (torch.tensor_split = np.array_split boundaries)."""
    q, extra = divmod(n, world_size)
    return [q + 1 if r < extra else q for r in range(world_size)]


def reduce_scatter_real(x: torch.Tensor, world_size: int) -> tuple[torch.Tensor, str]:
    """Rank r gets chunk r of the sum (torch.tensor_split = np.array_split boundaries)."""
    chunks = list(x.tensor_split(world_size))
    if dist.get_backend() == "gloo" and gloo_lacks("reduce_scatter"):
        # older gloo builds: the same result from an all-reduce, N·2(K-1)/K per device more
        total = x.clone()
        dist.all_reduce(total)
        return total.tensor_split(world_size)[dist.get_rank()].clone(), "all_reduce + own slice (gloo lacks reduce_scatter)"
    out = torch.empty_like(chunks[dist.get_rank()])
    dist.reduce_scatter(out, chunks)  # gloo has it on CPU in torch 2.13, chunks of unequal size too
    return out, f"dist.reduce_scatter ({dist.get_backend()})"


def all_gather_real(piece: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Concatenate every rank's piece. gloo's all_gather needs equal sizes: pad to the largest, trim."""
    longest = max(sizes)
    padded = torch.zeros(longest, dtype=piece.dtype, device=piece.device)
    padded[:piece.numel()] = piece
    gathered = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(gathered, padded)
    return torch.cat([g[:s] for g, s in zip(gathered, sizes)])


def scatter_real(whole: torch.Tensor | None, sizes: Sequence[int], src: int, device: torch.device) -> torch.Tensor:
    """Rank r gets piece r of `whole` (held by rank `src`; None elsewhere). dist.scatter needs
    pieces of one size: the root pads each to the largest, every rank trims its own."""
    rank, longest = dist.get_rank(), max(sizes)
    mine = torch.zeros(longest, dtype=torch.float32, device=device)
    pieces = None
    if rank == src:
        pieces = [torch.zeros(longest, dtype=whole.dtype, device=device) for _ in sizes]
        for p, chunk in zip(pieces, whole.split(list(sizes))):
            p[:chunk.numel()] = chunk
    dist.scatter(mine, pieces, src=src)
    return mine[:sizes[rank]].clone()


def allreduce_two_routes(x: torch.Tensor) -> dict[str, list[float]]:
    """The sum on every rank two ways: dist.all_reduce, and reduce-scatter then all-gather."""
    direct = x.clone()
    dist.all_reduce(direct)
    world_size = dist.get_world_size()
    piece, _ = reduce_scatter_real(x, world_size)
    split = all_gather_real(piece, piece_sizes(x.numel(), world_size))
    return {"all_reduce": direct.tolist(), "rs_ag": split.tolist()}


def reduce_copy(x: torch.Tensor, dst: int, op: dist.ReduceOp) -> list[float]:
    """dist.reduce with `op` on a copy of x; what this rank holds afterwards (scratch off `dst`)."""
    buf = x.clone()
    dist.reduce(buf, dst=dst, op=op)
    return buf.tolist()


def chain_reduce(x: torch.Tensor, order: Sequence[int], subtract: bool = False) -> list[float] | None:
    """A reduce written by hand with send/recv along `order` (every rank once, the destination
    last): the first sends its buffer, each next one combines what arrives with its own
    (partial + own, or partial - own) and passes it on. The last rank returns the result, the
    others None. A chain, not a cycle: blocking send/recv cannot deadlock."""
    at = list(order).index(dist.get_rank())
    if at == 0:
        dist.send(x.contiguous(), order[1])
        return None
    partial = torch.empty_like(x)
    dist.recv(partial, order[at - 1])
    combined = partial - x if subtract else partial + x
    if at < len(order) - 1:
        dist.send(combined, order[at + 1])
        return None
    return combined.tolist()


# ---- for the parent -------------------------------------------------------------------------

def show(values: Sequence[float] | np.ndarray | None, shown: int = SHOWN) -> str:
    """A buffer as numbers separated by spaces, cut after `shown` with "…"; None as "-"."""
    if values is None:
        return "-"
    if len(values) == 0:
        return "(empty)"
    vals = [f"{v:g}" for v in list(values)[:shown]]
    return " ".join(vals) + (" …" if len(values) > shown else "")


def yes(flag: bool) -> str:
    return "yes" if flag else "NO"
