"""WRONG on purpose (problem 117): the right gradients, appended as the backward finds them (top layer
first), so the list comes back in reverse layer order."""

from __future__ import annotations

import torch
import torch.distributed as dist

from cs336 import comm
from cs336.mlp import gelu_grad


def tp_backward(inputs: list[torch.Tensor], pre: list[torch.Tensor], ws: list[torch.Tensor],
                grad_output: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
    rank = dist.get_rank()
    start = sum(widths[:rank])
    grad_out = grad_output[:, start:start + widths[rank]]
    log = comm.CommLog(dist.get_world_size())
    grads = []
    for layer in reversed(range(len(ws))):
        dz = grad_out * gelu_grad(pre[layer])
        grads.append(inputs[layer].T @ dz)                 # WRONG: the top layer's lands first
        if layer > 0:
            grad_out = comm.reduce_scatter_columns(dz @ ws[layer].T, widths, log)
    return grads
