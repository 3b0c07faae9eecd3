"""The rank side of lecture15/04_details.py: gradient accumulation under no_sync (Part 1), unused
parameters (Part 2) and buffers (Part 3) on PyTorch DDP; ranks return plain data, the script prints.

Imported by 04_details.py and tests/test_lecture15_01_02_04.py; not run by itself.
"""

# No `from __future__ import annotations`: DDP checks a comm hook's annotation is dist.GradBucket itself.

import copy
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.launcher import capture_stderr
from lecture14.data_parallel import flat_params  # all parameters as one vector, to compare replicas

DATA_SEED = 1234
IN, HIDDEN = 8, 16           # Part 1's model: 8 -> 16 -> 1, far below one bucket's cap
MICRO_BATCH = 4              # samples per micro-batch and rank
LR = 0.1
MODES = {                    # Part 1: where the no_sync() context goes
    "sync": "synchronise every micro-batch",
    "backward": "no_sync around backward only (wrong)",
    "forward": "no_sync around forward + backward, last one outside",
}


def grad_or_none(p: nn.Parameter) -> np.ndarray | None:
    return None if p.grad is None else p.grad.detach().numpy().copy()


def counting_allreduce_hook(state: dict[str, int], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default hook plus a counter. The parameter must be called `bucket`; with a hook
    registered DDP no longer divides by the world size, so we do (SUM then divide is portable)."""
    state["allreduces"] += 1
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])


def mlp(dtype: torch.dtype = torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)).to(dtype)


def accumulation_data(steps: int, micro: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x[step, micro-batch, rank] and y[...]: every rank can make all of it and take its own slice."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(steps, micro, world_size, MICRO_BATCH, IN, generator=gen, dtype=torch.float64)
    return x, x.sum(-1, keepdim=True).sin()


def no_sync_worker(rank: int, world_size: int, steps: int, micro: int) -> dict[str, Any]:
    """Part 1: the same accumulation written three ways; all-reduces counted per optimiser step."""
    x, y = accumulation_data(steps, micro, world_size)
    out: dict[str, Any] = {}
    for mode in MODES:
        ddp = DDP(mlp())
        state = {"allreduces": 0}
        ddp.register_comm_hook(state, counting_allreduce_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        counts = []
        for step in range(steps):
            opt.zero_grad()
            before = state["allreduces"]
            for m in range(micro):
                last = m == micro - 1
                xb, yb = x[step, m, rank], y[step, m, rank]
                if mode == "sync" or last:
                    loss = nn.functional.mse_loss(ddp(xb), yb) / micro
                    loss.backward()
                elif mode == "backward":
                    loss = nn.functional.mse_loss(ddp(xb), yb) / micro  # forward outside: DDP already armed
                    with ddp.no_sync():
                        loss.backward()
                else:
                    with ddp.no_sync():  # forward inside: DDP reads the flag here and skips the sync
                        (nn.functional.mse_loss(ddp(xb), yb) / micro).backward()
            opt.step()
            counts.append(state["allreduces"] - before)
        out[mode] = {"params": flat_params(ddp.module).numpy(), "counts": counts}
        del ddp, opt
    return out


def reference_accumulation(steps: int, micro: int, world_size: int) -> np.ndarray:
    """One process, all ranks' micro-batches: the gradient DDP should reproduce (average over ranks)."""
    x, y = accumulation_data(steps, micro, world_size)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        opt.zero_grad()
        for m in range(micro):
            for r in range(world_size):
                (nn.functional.mse_loss(model(x[step, m, r]), y[step, m, r]) / (micro * world_size)).backward()
        opt.step()
    return flat_params(model).numpy()


class Branchy(nn.Module):
    """`a` is always used, `b` only when asked, `never` never: a conditional branch / an idle expert."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.never = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, use_b: bool) -> torch.Tensor:
        h = self.a(x)
        return (h + self.b(x) if use_b else h).pow(2).sum()


def deep_mlp(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(16, 16), nn.Tanh())])


def time_find_unused(layers: int, steps: int) -> tuple[list[float], list[float], str]:
    """Seconds per forward+backward without and with find_unused_parameters, every parameter used,
    and the warning torch prints about it (captured, so the parent shows it beside the timing).
    The two models take turns step by step, so a burst of load on the shared cores hits both."""
    plain, searching = DDP(deep_mlp(layers)), DDP(deep_mlp(layers), find_unused_parameters=True)
    x = torch.randn(16, 16)
    times: tuple[list[float], list[float]] = ([], [])
    with capture_stderr() as warned:
        for i in range(steps + 2):
            for ddp, samples in zip((plain, searching), times):
                dist.barrier()  # start together, so one rank's lag is not counted as the other's cost
                start = time.perf_counter()
                ddp(x).sum().backward()
                if i >= 2:  # two warm-up steps: the first builds, the second rebuilds the buckets
                    samples.append(time.perf_counter() - start)
    del plain, searching
    return times[0], times[1], "".join(warned)


def unused_worker(rank: int, world_size: int, layers: int, steps: int) -> dict[str, Any]:
    """Part 2: the default DDP fails on an unused branch; find_unused_parameters=True copes, at a cost."""
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(DATA_SEED + rank))
    out: dict[str, Any] = {}
    ddp = DDP(Branchy())  # find_unused_parameters=False
    try:
        ddp(x, use_b=False).backward()  # b and never: no gradient, so the one bucket never fills
        ddp(x, use_b=False)             # DDP checks the previous reduction here, at the next forward
        out["error"] = None
    except RuntimeError as err:  # the staged error, raised by this rank itself before any collective
        if "Expected to have finished reduction" not in str(err):
            raise  # anything else (a peer gone, a bug) is a real failure of this rank: the launcher names it
        out["error"] = str(err)
    del ddp

    ddp = DDP(Branchy(), find_unused_parameters=True)
    local = copy.deepcopy(ddp.module)  # same (broadcast) parameters, no DDP: this rank's own gradient
    local(x, use_b=rank == 0).backward()
    ddp(x, use_b=rank == 0).backward()  # b is used on rank 0 only, never on no rank
    out["local"] = {n: grad_or_none(p) for n, p in local.named_parameters() if n.endswith("weight")}
    out["ddp"] = {n: grad_or_none(p) for n, p in ddp.module.named_parameters() if n.endswith("weight")}
    del ddp
    out["time_default"], out["time_find_unused"], out["torch_warned"] = time_find_unused(layers, steps)
    return out


def buffers_worker(rank: int, world_size: int) -> dict[str, np.ndarray]:
    """Part 3: BatchNorm with different data per rank; watch running_mean around two forwards."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 1))
    ddp = DDP(model)
    seen: dict[str, np.ndarray] = {}

    def record_start(module: nn.Module, inputs: tuple) -> None:
        # Runs after DDP's pre-forward broadcast of buffers and before BatchNorm updates them.
        seen[f"start of forward {len(seen) // 2 + 1}"] = module.running_mean.numpy().copy()

    handle = model[0].register_forward_pre_hook(record_start)
    gen = torch.Generator().manual_seed(DATA_SEED + rank)
    for i in (1, 2):
        x = torch.randn(32, 3, generator=gen) + 10.0 * rank  # rank r's data is centred at 10 r
        ddp(x).sum().backward()
        seen[f"after forward {i}"] = model[0].running_mean.numpy().copy()
    handle.remove()
    del ddp
    return seen
