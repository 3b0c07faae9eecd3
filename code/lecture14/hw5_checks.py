"""Two checks of HW5's average_gradients on real ranks (05_data_parallel.py Part 2, lecture 14 §4.1):
why it is SUM then ÷ W (does gloo all-reduce with ReduceOp.AVG?), and that a parameter whose grad is
None is skipped while the others are averaged. `average_checks` runs on each rank and returns plain
data; `average_claims` (in the parent) prints the verdicts as claims.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from common.capabilities import gloo_lacks
from common.output import EXACT, Report
from lecture14 import data_parallel as dp


def average_checks(rank: int, device: torch.device) -> dict:
    """On one rank, inside a running process group. Whether gloo has AVG was asked once, before
    the ranks started (common.capabilities); where it has, AVG runs in a gloo group (a new one when
    the default group is NCCL, which has AVG) and every rank's result is returned; where it has
    not, the error gloo gives is. No error of a real collective is caught here: a failure in any
    rank reaches the launcher. Then a two-layer model whose second layer takes no part in the
    forward (grad None) goes through average_gradients."""
    error = gloo_lacks("avg") or ""  # older gloo: "Cannot use ReduceOp.AVG with Gloo"
    avg = None
    if not error:
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
        avg = t.tolist()
    model = nn.ModuleDict({"used": nn.Linear(3, 1), "unused": nn.Linear(3, 1)}).double().to(device)
    x = torch.tensor([[rank + 1.0, 2.0 * rank, 1.0]], dtype=torch.float64, device=device)
    model["used"](x).sum().backward()  # integer-valued gradients (x and 1): exact in any sum order
    local = [g for p in model["used"].parameters() for g in p.grad.reshape(-1).tolist()]
    dp.average_gradients(model)
    return {"avg": avg, "avg_error": error, "local": local,
            "averaged": [g for p in model["used"].parameters() for g in p.grad.reshape(-1).tolist()],
            "unused_none": all(p.grad is None for p in model["unused"].parameters())}


def average_claims(rep: Report, checks: list[dict]) -> None:
    """The notes' 'gloo has no AVG', 'SUM then ÷ world_size' and 'skip grad None', from every rank's
    `average_checks`."""
    w, first = len(checks), checks[0]
    mean = [sum(values) / w for values in zip(*(c["local"] for c in checks))]  # taken here, in the parent
    averaged_ok = all(c["averaged"] == mean for c in checks)
    avg_ok = first["avg"] is not None and all(v == sum(range(1, w + 1)) / w for v in first["avg"])
    verdict = "rejected: " + first["avg_error"] if first["avg"] is None else \
        f"accepted, and every rank got the mean: {all(c['avg'] == first['avg'] for c in checks) and avg_ok}"
    rep.line(f"  all_reduce(op=ReduceOp.AVG) in a gloo group on the same {w} ranks: {verdict}")
    rep.claim("gloo has no AVG: all_reduce(op=ReduceOp.AVG) fails", first["avg"] is None, True, kind=EXACT,
              setting=(), ref="L14-4.1-gloo-no-avg",
              why=f"gloo raised: {first['avg_error']}" if first["avg"] is None else
              f"torch {torch.__version__}'s gloo accepts AVG ({'and returns the mean' if avg_ok else 'but the result is WRONG'}): "
              "gloo gained AVG in 2025 (pytorch/pytorch#149781, a SUM then a division); older releases raise, "
              "so SUM then ÷ world_size, what average_gradients does, is the form that works on every release")
    rep.claim("average_gradients (all-reduce SUM, then ÷ W) leaves every rank the ranks' mean gradient",
              averaged_ok, True, kind=EXACT, setting=(), ref="L14-4.1-sum-then-divide",
              why=f"{w} real ranks, integer-valued gradients (exact in any order) against their mean taken here")
    rep.claim("average_gradients skips a parameter whose grad is None and averages the others",
              all(c["unused_none"] for c in checks) and averaged_ok, True, kind=EXACT, setting=(),
              ref="L14-4.1-skip-none-grads", why="a layer left out of the forward keeps grad None on every rank; "
              "the used layer's weight and bias are the ranks' mean")
