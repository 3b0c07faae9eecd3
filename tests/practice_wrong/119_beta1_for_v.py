"""WRONG on purpose (problem 119): the second moment v is updated with beta1 instead of beta2 (typo)"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from cs336.mlp import flatten_padded, unflatten

# torch 2.13's names; the older ones still work there, with a deprecation warning
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class ZeroAdam:
    """Adam whose state m and v this rank keeps for its shard only: 1/k of the optimizer's memory."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        self.shard = -(-n // self.world)          # c = ⌈n/k⌉: the flat vector padded to k·c
        self.exp_avg = torch.zeros(self.shard, dtype=self.params[0].dtype)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        grads = flatten_padded([p.grad for p in self.params], self.world)
        grad = torch.empty(self.shard, dtype=grads.dtype)
        REDUCE_SCATTER(grad, grads)                # the sum of my shard over the ranks, nothing else
        del grads
        grad /= self.world                         # each rank's gradient is its own slice's mean
        start = self.rank * self.shard
        mine = flatten_padded([p.detach() for p in self.params], self.world)[start:start + self.shard].clone()
        beta1, beta2 = self.betas                  # torch.optim.Adam's update, on my shard only
        self.exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        self.exp_avg_sq.mul_(beta1).addcmul_(grad, grad, value=1 - beta1)
        denom = self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2**self.steps) + self.eps
        mine.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1**self.steps))
        full = torch.empty(self.shard * self.world, dtype=mine.dtype)
        ALL_GATHER(full, mine)                     # every rank's updated shard, in rank order
        for p, piece in zip(self.params, unflatten(full, self.params)):
            p.copy_(piece)
