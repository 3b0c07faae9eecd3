"""The collectives whose pieces may differ in size, on real ranks, with gloo's workarounds.

Inside a rank (after common.launcher.launch has joined the group):
    whole = all_gather_uneven(piece, sizes)              # rank r's piece is sizes[r] long
    mine, how = reduce_scatter_uneven(x, sizes)          # rank r gets its sizes[r] of the sum
    mine = scatter_uneven(whole_or_none, sizes, src=0)

gloo moves pieces of one shape only: all-gather and scatter pad every piece with zeros to the
longest and trim afterwards. An older gloo has no reduce_scatter: the same result then comes from
an all-reduce and the rank's own slice (2(K-1)/K·N per rank instead of (K-1)/K·N). Whether gloo
has it is asked once (common.capabilities), never found out by catching a failed call: that would
swallow a real failure of this rank or a peer. `record(torch_name, nbytes)`, where given, is called
before each torch.distributed call with the call's whole size N (collectives_def's convention):
cs336.comm.CommLog.add counts that way. Sizes along `dim` follow collectives_def.split_sizes
where a caller cuts a buffer evenly.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common.capabilities import gloo_lacks

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
