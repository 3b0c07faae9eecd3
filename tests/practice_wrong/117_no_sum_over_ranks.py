"""WRONG on purpose (problem 117): dL/dx from this rank's columns only, the sum over ranks forgotten."""

from __future__ import annotations

import torch
import torch.distributed as dist

from cs336.mlp import gelu_grad


def tp_backward(inputs: list[torch.Tensor], pre: list[torch.Tensor], ws: list[torch.Tensor],
                grad_output: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
    rank = dist.get_rank()
    start = sum(widths[:rank])
    grad_out = grad_output[:, start:start + widths[rank]]
    grads: list[torch.Tensor] = [torch.empty(0)] * len(ws)
    for layer in reversed(range(len(ws))):
        dz = grad_out * gelu_grad(pre[layer])
        grads[layer] = inputs[layer].T @ dz
        if layer > 0:
            grad_out = (dz @ ws[layer].T)[:, start:start + widths[rank]]   # my term only: no reduce-scatter
    return grads
