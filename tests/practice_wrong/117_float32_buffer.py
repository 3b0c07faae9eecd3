"""WRONG on purpose (problem 117): the sum over ranks is all-reduced in a buffer made with
torch.zeros(B, d), float32 by default, so every layer below the top is float32 (and off by ~1e-8)."""

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
            full = torch.zeros(grad_output.shape)          # WRONG: float32, whatever the inputs are
            full += dz @ ws[layer].T
            dist.all_reduce(full)
            grad_out = full[:, start:start + widths[rank]]
    return grads
