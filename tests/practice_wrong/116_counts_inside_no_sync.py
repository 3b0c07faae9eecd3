"""WRONG on purpose (problem 116): the flag is set back properly, but the hook counts each gradient in
its bucket before it looks at the flag, and the counts are reset only after a sync: after a block,
the buckets' counts are past full and the synced backward launches nothing."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from _myddp_116 import MyDDP as _Right


class MyDDP(_Right):
    def forward(self, *args: Any) -> Any:
        return self.module(*args)                          # the counts are reset in finish_gradient_sync

    def _on_grad_ready(self, p: torch.nn.Parameter) -> None:
        i = self.bucket_of[p]
        self.ready[i] += 1                                 # WRONG: counted inside no_sync too
        if not self.sync_enabled:
            return
        if self.ready[i] == len(self.buckets[i]):
            flat = torch.cat([q.grad.flatten() for q in self.buckets[i]])
            self.handles.append((dist.all_reduce(flat, async_op=True), flat, i))

    def finish_gradient_sync(self) -> None:
        super().finish_gradient_sync()
        self.ready = [0] * len(self.buckets)
