"""Collectives on real ranks, shared by the scripts that run them (lecture14/02_primitives.py,
cs336/01_collectives.py): readable rank data, and the calls whose pieces may differ in size
(the others: common.collectives_real's all_gather_uneven, scatter_uneven).

Inside a rank (after common.launch.launch has joined the group):
    x = rank_data(rank, n, rank_device())       # 10(r+1), 10(r+1)+1, ...: sums exact in float32
    piece, how = reduce_scatter_real(x, world_size)   # rank r's chunk of the sum, split_sizes' pieces

Pieces follow torch.tensor_split, i.e. np.array_split and lecture14.collectives.chunk_bounds: the
first n % K are one element longer (common.costmodel.collectives.split_sizes). In the parent:
`all_inputs` (the same data as numpy, for the simulator) and `show` (a buffer as a short line of
numbers).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from common.collectives_real import all_gather_uneven, reduce_scatter_uneven
from common.costmodel.collectives import split_sizes

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


def reduce_scatter_real(x: torch.Tensor, world_size: int) -> tuple[torch.Tensor, str]:
    """Rank r gets chunk r of the sum (torch.tensor_split = np.array_split boundaries)."""
    return reduce_scatter_uneven(x, split_sizes(x.numel(), world_size))




def allreduce_two_routes(x: torch.Tensor) -> dict[str, list[float]]:
    """The sum on every rank two ways: dist.all_reduce, and reduce-scatter then all-gather."""
    direct = x.clone()
    dist.all_reduce(direct)
    world_size = dist.get_world_size()
    piece, _ = reduce_scatter_real(x, world_size)
    split = all_gather_uneven(piece, split_sizes(x.numel(), world_size))
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
