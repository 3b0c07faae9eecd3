"""WRONG on purpose (problem 116): no_sync also wraps the block in torch.no_grad()."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.distributed as dist


class MyDDP(torch.nn.Module):
    """Data parallelism from scratch: gradients bucketed in reverse order, all-reduced during backward."""

    def __init__(self, module: torch.nn.Module, bucket_bytes: int = 64 * 1024) -> None:
        super().__init__()
        self.module = module
        self.world = dist.get_world_size()
        with torch.no_grad():
            for p in module.parameters():                      # every rank starts from rank 0's weights
                dist.broadcast(p, src=0)
        params = [p for p in module.parameters() if p.requires_grad][::-1]   # backward's order, roughly
        self.buckets: list[list[torch.nn.Parameter]] = []
        current: list[torch.nn.Parameter] = []
        size = 0
        for p in params:                                       # seal a bucket once it reaches bucket_bytes
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_bytes:
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.ready = [0] * len(self.buckets)
        self.handles: list[tuple[Any, torch.Tensor, int]] = []
        self.sync_enabled = True
        for p in params:
            p.register_post_accumulate_grad_hook(self._on_grad_ready)

    def forward(self, *args: Any) -> Any:
        self.ready = [0] * len(self.buckets)
        self.handles = []
        return self.module(*args)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backwards inside only accumulate .grad locally; the next backward outside syncs the sums."""
        previous, self.sync_enabled = self.sync_enabled, False
        try:
            with torch.no_grad():
                yield
        finally:
            self.sync_enabled = previous

    def _on_grad_ready(self, p: torch.nn.Parameter) -> None:
        if not self.sync_enabled:
            return
        self._count(p)

    def _count(self, p: torch.nn.Parameter) -> None:
        i = self.bucket_of[p]
        self.ready[i] += 1
        if self.ready[i] == len(self.buckets[i]):              # the bucket is complete: send it now
            flat = torch.cat([q.grad.flatten() for q in self.buckets[i]])
            self.handles.append((dist.all_reduce(flat, async_op=True), flat, i))

    def finish_gradient_sync(self) -> None:
        """Wait for every bucket's all-reduce, divide by the world size, copy back into .grad."""
        for work, flat, i in self.handles:
            work.wait()
            flat /= self.world
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self.handles = []
