"""The rank side of lecture15/02_buckets.py: what PyTorch DDP puts in its buckets (Part 1) and the
all-reduce timing of many small tensors against one (Part 3); ranks return plain data, the script prints.

Imported by 02_buckets.py and tests/test_lecture15_01_02_04.py; not run by itself.
"""

# No `from __future__ import annotations`: DDP checks recording_hook's annotation is dist.GradBucket itself.

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.launcher import capture_stderr

LAYERS, WIDTH = 6, 512        # Part 1's model: one Linear(512, 512) is 1,050,624 bytes of fp32 gradient
PIECE_ELEMENTS = 1024         # Part 3: the smallest pieces the floats are cut into (notes: 1K elements)


def linear_stack() -> nn.Module:
    """Six Linear(512, 512) in a row: names 0.weight, 0.bias, ..., 5.bias, as in the notes."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def recording_hook(state: dict[str, Any], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Record the bucket, then do what DDP would: all-reduce and average. The parameter must be
    called `bucket`, and with a hook DDP leaves the division by the world size to us."""
    names = [state["names"][p.data_ptr()] for p in bucket.parameters()]
    buf = bucket.buffer()
    state["log"].append((state["iteration"], bucket.index(), buf.numel() * buf.element_size(), names))
    buf.div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])


REBUILD_FLAGS = ({"find_unused_parameters": True}, {"static_graph": True})  # when is the rebuild?


def bucket_worker(rank: int, world_size: int, caps_mib: list[float | None], iterations: int) -> list[dict]:
    """Part 1: for each bucket_cap_mb, train `iterations` steps and return the buckets DDP formed;
    then, at the default cap, the same for each of REBUILD_FLAGS over 4 iterations."""
    out = []
    runs = [(cap, {}, iterations) for cap in caps_mib] + [(None, flags, 4) for flags in REBUILD_FLAGS]
    for cap, flags, iterations in runs:
        model = linear_stack()
        names = {p.data_ptr(): n for n, p in model.named_parameters()}
        ready: list[str] = []  # the order gradients land in iteration 1: what the rebuild uses
        handles = [p.register_post_accumulate_grad_hook(lambda p, n=n, ready=ready: ready.append(n))
                   for n, p in model.named_parameters()]
        ddp = DDP(model, bucket_cap_mb=cap, **flags)
        state: dict[str, Any] = {"names": names, "log": [], "iteration": 0}
        ddp.register_comm_hook(state, recording_hook)
        x = torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(rank))
        with capture_stderr():   # find_unused_parameters=True warns that nothing was unused: expected here
            for it in range(1, iterations + 1):
                state["iteration"] = it
                ddp(x).pow(2).mean().backward()
                if it == 1:
                    for h in handles:
                        h.remove()
        out.append({"cap": cap, "flags": flags, "log": state["log"], "ready": ready})
        del ddp, model
    return out


def allreduce_worker(rank: int, world_size: int, elements: int, counts: list[int]) -> dict[int, list[float]]:
    """Part 3: seconds (every repeat) to all-reduce the same `elements` float32 cut into n tensors."""
    flat = torch.ones(elements)
    dist.all_reduce(flat[:PIECE_ELEMENTS])  # warm up the connection
    times: dict[int, list[float]] = {}
    for n in counts:
        pieces = flat.tensor_split(n)
        samples = []
        for _ in range(max(1, min(5, 256 // n))):  # repeat the cheap cases, take the median
            dist.barrier()
            start = time.perf_counter()
            for piece in pieces:  # one blocking all-reduce per tensor: the naive per-gradient scheme
                dist.all_reduce(piece)
            samples.append(time.perf_counter() - start)
        times[n] = samples
    return times
