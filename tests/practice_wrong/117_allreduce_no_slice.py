"""WRONG on purpose (problem 117): all-reduces dL/dx and keeps the whole B x d result (forgets to take
own columns)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from cs336.mlp import gelu_grad


def tp_backward(inputs: list[torch.Tensor], pre: list[torch.Tensor], ws: list[torch.Tensor],
                grad_output: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
    rank = dist.get_rank()
    start = sum(widths[:rank])
    grad_out = grad_output[:, start:start + widths[rank]]     # dL/dy, my columns only
    grads: list[torch.Tensor] = [torch.empty(0)] * len(ws)
    for layer in reversed(range(len(ws))):
        dz = grad_out * gelu_grad(pre[layer])                 # through gelu, my columns
        grads[layer] = inputs[layer].T @ dz                   # (full input)ᵀ · my slice of dL/dz
        if layer > 0:                                         # the first layer's input is data
            # dL/dx = Σ_r dz_r · W_rᵀ; the layer below owns the same columns: reduce-scatter
            grad_out = dz @ ws[layer].T
            dist.all_reduce(grad_out)
    return grads
