"""WRONG on purpose (problem 117): the loop stops above the first layer ("its input is data"), so the
first layer's dL/dW_r is never returned: one gradient too few."""

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
    for layer in reversed(range(1, len(ws))):              # WRONG: layer 0 has a weight too
        dz = grad_out * gelu_grad(pre[layer])
        grads.insert(0, inputs[layer].T @ dz)
        grad_out = comm.reduce_scatter_columns(dz @ ws[layer].T, widths, log)
    return grads
