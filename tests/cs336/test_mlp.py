"""cs336/mlp.py: GELU's hand-written derivative against autograd (the MLP's training, split by rank,
is checked in each script's file: test_05_parallel.py, test_07_tensor_parallel.py)."""

from __future__ import annotations

import torch

from cs336 import mlp


def test_gelu_grad_matches_autograd() -> None:
    z = torch.linspace(-6, 6, 101, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(torch.nn.functional.gelu(z).sum(), z)
    assert torch.allclose(mlp.gelu_grad(z.detach()), auto, rtol=0, atol=1e-14)
