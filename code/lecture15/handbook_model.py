"""The handbook's model and data ("数据并行与 DDP", its ddp_check.py), built the same way on every rank:
the MLP, the global batch, each rank's shard and its share of the loss; and the comm hook that counts
PyTorch DDP's bucket all-reduces, MyDDP's reference.

Shared by my_ddp_check.py, my_ddp_vs_ddp.py and handbook_details.py, the practice judge (problem 116),
the tests and bench/bench_my_ddp.py; no lesson of its own (the lesson is my_ddp.py and the checks that
use these).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def handbook_model(hidden: int = 256) -> torch.nn.Module:
    """The handbook's MLP, 64 -> hidden -> hidden -> 10 with GELU, from seed 0 on every rank."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.GELU(), torch.nn.Linear(hidden, 10))


def global_batch(n: int, features: int = 64, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch, the same on every rank (seed 123): each takes its shard of it."""
    torch.manual_seed(123)
    return torch.randn(n, features), torch.randint(0, classes, (n,))


def shard(n: int, part: int, parts: int) -> slice:
    return slice(part * n // parts, (part + 1) * n // parts)   # sizes differ by one when W ∤ n


def share_of_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, n_global: int,
                  world: int) -> torch.Tensor:
    """This shard's part of the global mean loss, scaled by W because DDP divides the sum by W.
    Equals the local mean when shards are equal; stays exact when they are not (W ∤ batch)."""
    return torch.nn.functional.cross_entropy(model(x), y, reduction="sum") * world / n_global


def max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest |difference| between two models' parameters."""
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def recording_allreduce(seen: list[int], bucket: dist.GradBucket) -> torch.futures.Future:
    """PyTorch DDP's all-reduce of one bucket, averaged as DDP does, its index noted (to count them).
    Register it through a lambda: DDP rejects the string annotations `from __future__` makes of ours."""
    seen.append(bucket.index())
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].div_(dist.get_world_size()))
