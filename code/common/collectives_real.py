"""The collectives whose pieces may differ in size, on real ranks, with gloo's workarounds.

Inside a rank (after common.launch.launch has joined the group):
    whole = all_gather_uneven(piece, sizes)              # rank r's piece is sizes[r] long
    mine, how = reduce_scatter_uneven(x, sizes)          # rank r gets its sizes[r] of the sum
    mine = scatter_uneven(whole_or_none, sizes, src=0)
    given, held = run_collective("all-gather", x, root=0)  # any of costmodel.collectives' seven, by name

gloo moves pieces of one shape only: all-gather and scatter pad every piece with zeros to the
longest and trim afterwards. An older gloo has no reduce_scatter: the same result then comes from
an all-reduce and the rank's own slice (2(K-1)/K·N per rank instead of (K-1)/K·N). Whether gloo
has it is asked once (common.launch.capabilities), never found out by catching a failed call: that would
swallow a real failure of this rank or a peer. `record(torch_name, nbytes)`, where given, is called
before each torch.distributed call with the call's whole size N (common.costmodel.collectives' convention):
cs336.comm.CommLog.add counts that way. Sizes along `dim` follow common.costmodel.collectives.split_sizes
where a caller cuts a buffer evenly.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common.costmodel import collectives as cdef
from common.launch import gloo_lacks

Record = Callable[[str, int], None]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _pad_to(piece: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    """`piece` with zeros after its end along `dim`, `length` long there."""
    dim = dim % piece.dim()
    pad = [0, 0] * (piece.dim() - 1 - dim) + [0, length - piece.shape[dim]]  # F.pad lists the last dim first
    return F.pad(piece, pad).contiguous()


def all_gather_uneven(piece: torch.Tensor, sizes: Sequence[int], dim: int = 0,
                      record: Record | None = None) -> torch.Tensor:
    """Every rank's piece (rank r's sizes[r] long along `dim`), concatenated in rank order.
    gloo gathers equal shapes only: pad each to the longest, gather, trim."""
    padded = _pad_to(piece, max(sizes), dim)
    parts = [torch.empty_like(padded) for _ in sizes]
    if record:
        record("all_gather", len(sizes) * _nbytes(padded))
    dist.all_gather(parts, padded)
    return torch.cat([p.narrow(dim, 0, s) for p, s in zip(parts, sizes)], dim=dim)


def reduce_scatter_uneven(x: torch.Tensor, sizes: Sequence[int], dim: int = 0,
                          record: Record | None = None) -> tuple[torch.Tensor, str]:
    """(rank r's sizes[r] of the sum over ranks along `dim`, how it was done)."""
    rank = dist.get_rank()
    if dist.get_backend() == "gloo" and gloo_lacks("reduce_scatter"):
        # an older gloo: the whole sum from an all-reduce, N·2(K-1)/K per rank, counted as such
        total = x.contiguous().clone()
        if record:
            record("all_reduce", _nbytes(total))
        dist.all_reduce(total)
        mine = total.split(list(sizes), dim=dim)[rank].clone(memory_format=torch.contiguous_format)
        return mine, "all_reduce + own slice (gloo lacks reduce_scatter)"
    chunks = [c.contiguous() for c in x.split(list(sizes), dim=dim)]
    out = torch.empty_like(chunks[rank])
    if record:
        record("reduce_scatter", _nbytes(x))
    dist.reduce_scatter(out, chunks)  # gloo has it on CPU in torch 2.13, chunks of unequal size too
    return out, f"dist.reduce_scatter ({dist.get_backend()})"


def scatter_uneven(whole: torch.Tensor | None, sizes: Sequence[int], src: int,
                   device: torch.device) -> torch.Tensor:
    """Rank r gets piece r of the 1-D `whole` (held by rank `src`; None elsewhere). dist.scatter
    needs pieces of one size: the root pads each to the longest, every rank trims its own."""
    rank, longest = dist.get_rank(), max(sizes)
    mine = torch.zeros(longest, dtype=torch.float32, device=device)  # the other ranks know no dtype: float32
    pieces = None
    if rank == src:
        pieces = [_pad_to(chunk, longest, 0) for chunk in whole.split(list(sizes))]
    dist.scatter(mine, pieces, src=src)
    return mine[:sizes[rank]].clone()


# ---- each of costmodel.collectives' collectives once, by its name --------------------------------------
# A rank's 1-D buffer x in, pieces as costmodel.collectives.split_sizes cuts it; each returns (what this
# rank put in, what it holds after), None where nothing: the root alone gives to broadcast and
# scatter; only the root holds a gather's result.
Given = tuple[torch.Tensor | None, torch.Tensor | None]


def _broadcast(x: torch.Tensor, root: int) -> Given:
    buf = x.clone()
    dist.broadcast(buf, src=root)  # in place: every other rank's buffer is overwritten
    return (x if dist.get_rank() == root else None, buf)


def _scatter(x: torch.Tensor, root: int) -> Given:
    whole = x if dist.get_rank() == root else None
    return (whole, scatter_uneven(whole, cdef.split_sizes(x.numel(), dist.get_world_size()), root, x.device))


def _gather(x: torch.Tensor, root: int) -> Given:
    is_root = dist.get_rank() == root
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())] if is_root else None
    dist.gather(x, gathered, dst=root)  # only the root passes a list to receive into
    return (x, torch.cat(gathered) if gathered is not None else None)


def _reduce(x: torch.Tensor, root: int) -> Given:
    buf = x.clone()
    dist.reduce(buf, dst=root)  # the sum on the root; other buffers are scratch afterwards
    return (x, buf)


def _all_gather(x: torch.Tensor, root: int) -> Given:
    return (x, all_gather_uneven(x, [x.numel()] * dist.get_world_size()))


def _reduce_scatter(x: torch.Tensor, root: int) -> Given:
    return (x, reduce_scatter_uneven(x, cdef.split_sizes(x.numel(), dist.get_world_size()))[0])


def _all_reduce(x: torch.Tensor, root: int) -> Given:
    buf = x.clone()
    dist.all_reduce(buf)
    return (x, buf)


REAL_CALLS: dict[str, Callable[[torch.Tensor, int], Given]] = {
    "broadcast": _broadcast, "scatter": _scatter, "gather": _gather, "reduce": _reduce,
    "all-gather": _all_gather, "reduce-scatter": _reduce_scatter, "all-reduce": _all_reduce}


def run_collective(name: str, x: torch.Tensor, root: int = 0) -> Given:
    """Collective `name` (costmodel.collectives' name) once on this rank's 1-D `x`, rooted ones at `root`:
    (what this rank put in, what it holds after). An unknown name raises ValueError; a collective
    defined without its call here, KeyError naming it."""
    cdef.collective(name)
    if name not in REAL_CALLS:
        raise KeyError(f"common.costmodel.collectives' {name!r} has no real call in common.collectives_real")
    return REAL_CALLS[name](x, root)
