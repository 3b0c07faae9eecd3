"""A from-scratch DDP: the handbook's MyDDP, launching buckets in index order as PyTorch's Reducer does.

Handbook chapter "数据并行与 DDP" (从零实现, and its no_sync exercise) and lecture 15 §2.3 (Reducer).
Shown by `python code/lecture15/my_ddp_check.py`; checked by tests/test_my_ddp.py.

    ddp = MyDDP(model)                  # inside a process group (common.launcher.launch)
    loss_fn(ddp(x), y).backward()       # buckets are all-reduced during backward ...
    opt.step()                          # ... and averaged when backward returns, as with DDP

1. Construction: broadcast rank 0's parameters and buffers; put the trainable parameters into
   buckets in reverse registration order, sealing a bucket once it holds >= `bucket_bytes` (DDP's
   rule); allocate one flat buffer per bucket, once.
2. Backward: a post-accumulate-grad hook per parameter copies its gradient into its bucket. When a
   bucket is complete, every consecutive complete bucket from `next_bucket` on starts an async
   all-reduce (SUM): always in index order, the same on every rank, whatever order ranks finish
   buckets in. "First complete, first sent" pairs different buckets across ranks and silently sums
   unrelated data (lecture 15 §2.3 and its exercise 6).
3. End of backward: a callback queued on the autograd engine waits, divides by the world size and
   copies back into .grad (`finish_gradient_sync`; calling it again is harmless).

Copy in and out, rather than .grad as views of the buffer (DDP's gradient_as_bucket_view), because
`optimizer.zero_grad()` sets .grad to None by default, which silently breaks such views. The cost is
two copies of the gradient bytes per step, small next to the all-reduce, and the copy-in overlaps
with the rest of backward.

Limitations: trainable parameters share one dtype and device; every trainable parameter must get a
gradient in every synchronised backward. An unused one leaves its bucket incomplete and backward
raises a RuntimeError naming it (DDP needs find_unused_parameters=True there); if only some ranks
skip it, the others wait in the all-reduce until the group's timeout. Frozen parameters
(requires_grad=False) get no bucket and no hook. Buffers are re-broadcast at each forward, as in DDP.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

import torch
import torch.distributed as dist

from lecture15.ddp_sim import assign_buckets  # PyTorch's rule, shared with the simulator


class _Bucket:
    """Its parameters (reverse registration order), one flat buffer, and a view of it per parameter."""

    def __init__(self, params: list[torch.nn.Parameter], names: list[str]) -> None:
        self.params, self.names = params, names
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        sizes = [p.numel() for p in params]
        self.views = [v.view_as(p) for v, p in zip(self.flat.split(sizes), params)]
        self.ready = [False] * len(params)   # which gradients arrived in this backward
        self.pending = len(params)           # how many are still missing
        self.work: Any = None                # the async all-reduce, once launched


class MyDDP(torch.nn.Module):
    """Data parallelism from scratch: bucketed, overlapped, index-ordered all-reduce of gradients."""

    def __init__(self, module: torch.nn.Module, bucket_bytes: int = 64 * 1024,
                 broadcast_buffers: bool = True, naive_ready_order: bool = False) -> None:
        """`naive_ready_order=True` is the handbook's original launch rule (first complete, first
        sent). It is WRONG whenever ranks complete buckets in different orders; kept only so the
        check script can show the failure."""
        super().__init__()
        self.module, self.world = module, dist.get_world_size()
        self.broadcast_buffers, self.naive_ready_order = broadcast_buffers, naive_ready_order
        # Every replica starts from rank 0's parameters (frozen ones too) and buffers; one tensor at a
        # time, where DDP coalesces them into large messages: fine for a lecture-sized model.
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=0)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]  # frozen: ignored
        if len({(p.dtype, p.device) for _, p in named}) > 1:
            raise ValueError("MyDDP needs all trainable parameters on one dtype and device "
                             "(DDP would group its buckets by dtype and device)")
        # Index lists in registration numbering, bucket 0 holding the last-registered parameters.
        groups = assign_buckets([p.numel() * p.element_size() for _, p in named], bucket_bytes)
        self.buckets = [_Bucket([named[i][1] for i in g], [named[i][0] for i in g]) for g in groups]
        for b_index, bucket in enumerate(self.buckets):
            for slot, p in enumerate(bucket.params):
                p.register_post_accumulate_grad_hook(functools.partial(self._on_grad_ready, b_index, slot))
        self._no_sync = False
        self._sync_this_backward = True   # read from _no_sync at forward, as PyTorch DDP does
        self._callback_queued = False
        self.next_bucket = 0
        # For the check script and the tests: every launch, in order, over the object's lifetime.
        self.launch_order: list[int] = []
        self.ready_order: list[int] = []

    @property
    def allreduces_launched(self) -> int:
        return len(self.launch_order)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.broadcast_buffers and self.world > 1:   # rank 0's BatchNorm statistics win (§4.3)
            with torch.no_grad():
                for buf in self.module.buffers():
                    dist.broadcast(buf, src=0)
        # Like DDP, the forward decides whether the coming backward synchronises: no_sync() must
        # wrap the forward; wrapping only the backward changes nothing (lecture 15 §4.1).
        self._sync_this_backward = not self._no_sync
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backwards of forwards run inside only accumulate .grad locally; the next synchronised
        backward all-reduces the accumulated sums (its hooks copy the whole .grad)."""
        previous, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = previous

    def _on_grad_ready(self, b_index: int, slot: int, param: torch.nn.Parameter) -> None:
        if not self._sync_this_backward:
            return   # no_sync: the gradient stays in .grad and accumulates there
        if not self._callback_queued:   # first hook of this backward: finish when backward ends
            torch.autograd.Variable._execution_engine.queue_callback(self.finish_gradient_sync)
            self._callback_queued = True
        bucket = self.buckets[b_index]
        bucket.views[slot].copy_(param.grad)
        bucket.ready[slot] = True
        bucket.pending -= 1
        if bucket.pending:
            return
        self.ready_order.append(b_index)
        if self.naive_ready_order:   # the handbook's rule: wrong across ranks, see the docstring
            self._launch(b_index)
            return
        # The Reducer's loop: launch every consecutive complete bucket, never skipping one.
        while self.next_bucket < len(self.buckets) and self.buckets[self.next_bucket].pending == 0:
            self._launch(self.next_bucket)
            self.next_bucket += 1

    def _launch(self, b_index: int) -> None:
        bucket = self.buckets[b_index]
        bucket.work = dist.all_reduce(bucket.flat, op=dist.ReduceOp.SUM, async_op=True)
        self.launch_order.append(b_index)

    def finish_gradient_sync(self) -> None:
        """Wait for every launched bucket, average, copy back into .grad; reset for the next backward."""
        if not self._callback_queued:
            return   # nothing launched since the last call (or a no_sync backward)
        missing = [n for b in self.buckets for n, ready in zip(b.names, b.ready) if not ready]
        for bucket in self.buckets:
            if bucket.work is not None:
                bucket.work.wait()
                bucket.flat.div_(self.world)   # SUM then divide: portable (AVG is not on older gloo)
                for p, view in zip(bucket.params, bucket.views):
                    p.grad.copy_(view)
            bucket.pending, bucket.work = len(bucket.params), None
            bucket.ready = [False] * len(bucket.params)
        self.next_bucket, self._callback_queued = 0, False
        if missing:
            raise RuntimeError("MyDDP: buckets never completed; parameters without a gradient in this "
                               f"backward (unused parameters are not supported): {missing}")
