"""RIGHT (problem 119), another layout: shards of tensor_split's sizes (costmodel.collectives.split_sizes, the
first n % k ranks one element more), reduce-scattered as unequal chunks (gloo takes them) and all-gathered
padded to the longest; Adam's m kept with lerp_ (the same average, other rounding)."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class ZeroAdam:
    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        self.sizes = [len(c) for c in torch.arange(n).tensor_split(self.world)]
        self.exp_avg = torch.zeros(self.sizes[self.rank], dtype=torch.float64)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self.t = 0

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        flat_grad = torch.cat([p.grad.flatten() for p in self.params])
        grad = torch.empty(self.sizes[self.rank], dtype=torch.float64)
        dist.reduce_scatter(grad, list(flat_grad.tensor_split(self.world)))
        grad /= self.world
        start = sum(self.sizes[:self.rank])
        mine = torch.cat([p.flatten() for p in self.params])[start:start + len(grad)]
        b1, b2 = self.betas
        self.exp_avg.lerp_(grad, 1 - b1)
        self.exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        step = self.lr / (1 - b1**self.t)
        mine -= step * self.exp_avg / (self.exp_avg_sq.sqrt() / math.sqrt(1 - b2**self.t) + self.eps)
        longest = max(self.sizes)
        pieces = [torch.empty(longest, dtype=torch.float64) for _ in range(self.world)]
        dist.all_gather(pieces, torch.nn.functional.pad(mine, (0, longest - len(mine))))
        flat = torch.cat([piece[:size] for piece, size in zip(pieces, self.sizes)])
        offset = 0
        for p in self.params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
