"""WRONG on purpose (problem 119): DDP with Adam, nothing sharded: the gradients all-reduced and
averaged, m and v of every parameter on every rank. Right numbers, k times the ledger's state."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from cs336.mlp import flatten_padded, unflatten


class ZeroAdam:
    """Adam after an all-reduce: every rank updates every parameter, and keeps m and v of all of them."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.world = dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        self.exp_avg = torch.zeros(n, dtype=self.params[0].dtype)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        grad = flatten_padded([p.grad for p in self.params], 1)
        dist.all_reduce(grad)
        grad /= self.world
        flat = flatten_padded([p.detach() for p in self.params], 1)
        beta1, beta2 = self.betas
        self.exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2**self.steps) + self.eps
        flat.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1**self.steps))
        for p, piece in zip(self.params, unflatten(flat, self.params)):
            p.copy_(piece)
