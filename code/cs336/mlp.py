"""The deep MLP of CS336 lecture 8 and what its parallel versions share; no torch.distributed here.

    x = gelu(x @ W) for W in params;  loss = x.square().mean()

One process trains it for reference (`train_one_process`); `05_parallel.py` trains the same model
on real ranks four ways and compares. Also here: how a size is split over ranks (the first n % p
parts one larger, as torch.tensor_split), the flat parameter vector of ZeRO, the derivative of
GELU the tensor-parallel backward needs. The counted torch.distributed calls are in `comm.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from common.costmodel.collectives import split_sizes
from common.trained_weights import refuse_still_weights

LR_SGD = 0.5    # loss = mean of squares gives small gradients; 0.5 moves the weights visibly
LR_ADAM = 1e-3  # Adam's step is ~lr per element whatever the gradient's size


def make_params(layers: int, width: int, seed: int, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """L square matrices, N(0, 1/d): activations keep their size through the layers."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(width, width, generator=gen, dtype=dtype) / math.sqrt(width) for _ in range(layers)]


def make_batch(batch: int, width: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, width, generator=gen, dtype=dtype)


def forward(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    for w in params:
        x = F.gelu(x @ w)
    return x


def gelu_grad(z: torch.Tensor) -> torch.Tensor:
    """d gelu(z)/dz for the exact (erf) GELU: Φ(z) + z·φ(z)."""
    return 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


@dataclass
class Reference:
    """One process, whole batch: first step's output, loss and gradients; parameters after each step."""

    output: torch.Tensor
    loss: float
    grads: list[torch.Tensor]
    params_after: list[list[torch.Tensor]]  # [step][layer]
    params_before: list[torch.Tensor]

    @property
    def moved(self) -> float:
        """How far training moved the weights: the largest |after − before| (what a check of the
        trained weights is judged against: Report.check_trained)."""
        return max_abs_diff(self.params_after[-1], self.params_before)

    @property
    def largest_weight(self) -> float:
        return max(float(w.abs().max()) for w in self.params_before)

    def refuse_still_weights(self, setting: str) -> None:
        """A usage error, before any rank starts, where the weights barely move
        (trained_weights.refuse_still_weights)."""
        eps = torch.finfo(self.params_before[0].dtype).eps
        refuse_still_weights(self.moved, self.largest_weight, eps, setting)


def train_one_process(params: list[torch.Tensor], x: torch.Tensor, steps: int, optimizer: str) -> Reference:
    """Plain autograd and torch.optim ("sgd" or "adam") on the whole batch: what every strategy must equal."""
    ws = [w.clone().requires_grad_() for w in params]
    opt = torch.optim.SGD(ws, lr=LR_SGD) if optimizer == "sgd" else torch.optim.Adam(ws, lr=LR_ADAM)
    after, first = [], None
    for _ in range(steps):
        opt.zero_grad()
        out = forward(ws, x)
        loss = out.square().mean()
        loss.backward()
        if first is None:
            first = (out.detach().clone(), loss.item(), [w.grad.clone() for w in ws])
        opt.step()
        after.append([w.detach().clone() for w in ws])
    return Reference(first[0], first[1], first[2], after, [w.detach().clone() for w in params])


# ---- how sizes are split over ranks -------------------------------------------------------------
def offsets(sizes: list[int]) -> list[int]:
    """Where each part starts."""
    return [sum(sizes[:i]) for i in range(len(sizes))]


def stage_layers(layers: int, stages: int) -> list[range]:
    """Contiguous blocks of layers, one per pipeline stage; the first layers % stages one longer."""
    sizes = split_sizes(layers, stages)
    return [range(o, o + s) for o, s in zip(offsets(sizes), sizes)]


def flatten_padded(tensors: list[torch.Tensor], multiple: int) -> torch.Tensor:
    """One flat vector, zero-padded to a multiple of `multiple` so it splits into equal shards."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    return F.pad(flat, (0, -len(flat) % multiple))


def unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors back from a flat (possibly padded) vector; padding past the end is dropped."""
    out, start = [], 0
    for t in like:
        out.append(flat[start:start + t.numel()].view_as(t))
        start += t.numel()
    return out


def max_abs_diff(a: torch.Tensor | list[torch.Tensor], b: torch.Tensor | list[torch.Tensor]) -> float:
    if isinstance(a, torch.Tensor):
        a, b = [a], [b]
    assert len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b)), "shapes differ"
    return max((x - y).abs().max().item() for x, y in zip(a, b))


# ---- a trained run against one process, as a table's mark ----------------------------------------
