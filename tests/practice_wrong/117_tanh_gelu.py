"""WRONG on purpose (problem 117): GELU's derivative from the tanh approximation, where the model uses
the exact GELU (Φ(z) + z·φ(z), cs336.mlp.gelu_grad): off by ~1e-4 from the top layer on."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from cs336 import comm


def _tanh_gelu_grad(z: torch.Tensor) -> torch.Tensor:       # WRONG: the approximation's derivative
    inner = math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)
    t = torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * z * (1 - t ** 2) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * z ** 2)


def tp_backward(inputs: list[torch.Tensor], pre: list[torch.Tensor], ws: list[torch.Tensor],
                grad_output: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
    rank = dist.get_rank()
    start = sum(widths[:rank])
    grad_out = grad_output[:, start:start + widths[rank]]
    log = comm.CommLog(dist.get_world_size())
    grads: list[torch.Tensor] = [torch.empty(0)] * len(ws)
    for layer in reversed(range(len(ws))):
        dz = grad_out * _tanh_gelu_grad(pre[layer])
        grads[layer] = inputs[layer].T @ dz
        if layer > 0:
            grad_out = comm.reduce_scatter_columns(dz @ ws[layer].T, widths, log)
    return grads
