"""A from-scratch DDP: the handbook's MyDDP, launching buckets in index order as PyTorch's Reducer does.

Handbook chapter "数据并行与 DDP" (从零实现, and its no_sync exercise) and lecture 15 §2.3 (Reducer).
Shown by `python code/lecture15/my_ddp_check.py`; checked by tests/lecture15/test_my_ddp.py.

    ddp = MyDDP(model)                  # inside a process group (common.launch.launch)
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

Limits (each either matches PyTorch's DDP or is refused with one clear line):
- Trainable parameters share one dtype and device (ValueError at construction otherwise).
- Sparse gradients (nn.Embedding / nn.EmbeddingBag with sparse=True) are refused at construction,
  naming the parameter; any other sparse gradient is refused in the backward hook, also by name.
  (DDP supports them with a separate sparse all-reduce; a flat dense bucket cannot hold one.)
- Every trainable parameter must get a gradient in every synchronised backward. An unused one
  leaves its bucket incomplete and backward raises a RuntimeError naming it (DDP needs
  find_unused_parameters=True there); if only some ranks skip it, the others wait in the
  all-reduce until the group's timeout. Frozen parameters (requires_grad=False) get no bucket.
- Buffers (BatchNorm's running statistics) are broadcast from rank 0 at the start of a forward
  exactly when PyTorch DDP (torch 2.13) does it: when the PREVIOUS forward of this wrapper was one
  whose backward synchronises (grad enabled and not under no_sync), and at the first forward.
  So: every forward of plain training; in an accumulation window only its first forward; in an
  eval loop under torch.no_grad() only its first forward, and not the next training forward.
  eval() mode alone changes nothing. (DDP: `_pre_forward` syncs if `_check_sync_bufs_pre_fwd()`,
  i.e. `require_forward_param_sync`, which `_post_forward` sets to `torch.is_grad_enabled() and
  require_backward_grad_sync`.) One broadcast per buffer, where DDP coalesces them.
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
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype,
                                device=params[0].device)
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
        for name, sub in module.named_modules():   # refused before any communication (see Limits)
            if isinstance(sub, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and sub.sparse \
                    and sub.weight.requires_grad:
                raise ValueError(f"MyDDP does not support sparse gradients: parameter "
                                 f"'{name + '.' if name else ''}weight' ({type(sub).__name__} with "
                                 "sparse=True); use sparse=False or PyTorch's DDP")
        self.module, self.world = module, dist.get_world_size()
        self.broadcast_buffers, self.naive_ready_order = broadcast_buffers, naive_ready_order
        # Every replica starts from rank 0's parameters (frozen ones too) and buffers (unless
        # broadcast_buffers=False, as in DDP); one tensor at a time, where DDP coalesces them into
        # large messages: fine for a lecture-sized model.
        with torch.no_grad():
            for t in list(module.parameters()) + (list(module.buffers()) if broadcast_buffers else []):
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
        self._sync_buffers_next = True    # DDP's require_forward_param_sync: see forward()
        self.buffer_syncs = 0             # forwards that broadcast the buffers (check script, tests)
        self._callback_queued = False
        self.next_bucket = 0
        # For the check script and the tests: every launch, in order, over the object's lifetime.
        self.launch_order: list[int] = []
        self.ready_order: list[int] = []

    @property
    def allreduces_launched(self) -> int:
        return len(self.launch_order)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        buffers = list(self.module.buffers())
        # Rank 0's buffers (BatchNorm statistics) win, lecture 15 §4.3; but only when the previous
        # forward was a synchronising one, as in DDP: it decides in _pre_forward from the flag its
        # _post_forward left (require_forward_param_sync). Costs a broadcast per buffer per step.
        if self.broadcast_buffers and self.world > 1 and buffers and self._sync_buffers_next:
            with torch.no_grad():
                for buf in buffers:
                    dist.broadcast(buf, src=0)
            self.buffer_syncs += 1
        # Like DDP, the forward decides whether the coming backward synchronises: no_sync() must
        # wrap the forward; wrapping only the backward changes nothing (lecture 15 §4.1). Why here
        # and not in the hook: see no_sync().
        sync = torch.is_grad_enabled() and not self._no_sync
        self._sync_this_backward = not self._no_sync
        output = self.module(*args, **kwargs)
        self._sync_buffers_next = sync   # DDP's _post_forward: no_grad and no_sync forwards clear it
        return output

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backwards of forwards run inside only accumulate .grad locally; the next synchronised
        backward all-reduces the accumulated sums (its hooks copy the whole .grad).

        Why forward() reads the flag, not _on_grad_ready as the handbook's hint has it: both give
        the same result when forward and backward are inside the block (the exercise), but not
        otherwise, and PyTorch DDP's contract is the forward's. With DDP, `with ddp.no_sync():
        loss = ddp(x)` followed by `loss.backward()` after the block does not synchronise, and a
        block around the backward alone does. A flag read in the hook does the opposite in both
        cases, so code written for DDP (accumulation loops that call backward outside the block)
        would silently synchronise every micro-step, or skip the one step that must. DDP decides
        in the forward because that is where it prepares the reducer for the coming backward
        (prepare_for_backward in _post_forward), which it skips under no_sync; one decision per
        forward also means every hook of the backward sees the same answer.
        """
        previous, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = previous

    def _on_grad_ready(self, b_index: int, slot: int, param: torch.nn.Parameter) -> None:
        if not self._sync_this_backward:
            return   # no_sync: the gradient stays in .grad and accumulates there
        if param.grad.is_sparse:   # from an op the constructor could not see (see Limits)
            raise RuntimeError(f"MyDDP does not support sparse gradients: parameter "
                               f"'{self.buckets[b_index].names[slot]}' got one")
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
