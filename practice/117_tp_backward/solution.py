"""Problem 117: the tensor-parallel backward of CS336's deep MLP (the notes leave it as homework).

Judge it:  python practice/judge.py 117        (the statement: practice/117_tp_backward/README.md)
"""

from __future__ import annotations

import torch
import torch.distributed as dist  # noqa: F401  (dist.get_rank, dist.reduce_scatter or dist.all_reduce)

from cs336.mlp import gelu_grad  # noqa: F401  (d gelu(z) / dz, the exact GELU's derivative)


def tp_backward(inputs: list[torch.Tensor], pre: list[torch.Tensor], ws: list[torch.Tensor],
                grad_output: torch.Tensor, widths: list[int]) -> list[torch.Tensor]:
    """This rank's dL/dW_r for every layer, from what the forward kept (see the README)."""
    raise NotImplementedError("write tp_backward(inputs, pre, ws, grad_output, widths) in 117's solution.py")
