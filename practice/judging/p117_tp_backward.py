"""Problem 117's cases: the tensor-parallel backward of CS336's deep MLP, on real gloo ranks.

The judge runs the forward as code/cs336/05_parallel.py does (rank r holds columns cols_r of every
W, computes gelu(x @ W_r) and all-gathers the columns), then hands the student's tp_backward what
that forward kept. The gradients are compared with one process on the whole model (autograd).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from common.dist_count import counting
from cs336 import comm, mlp
from judging.engine import Case, Fail, function, kind
from judging.ranks import run_ranks, solution_in_rank

FUNCTIONS = ("tp_backward",)
TOL = 1e-12
HINT_LOCAL = "README hint 1: dz = (dL/dy)[:, my columns] · gelu'(z); dL/dW_r = inputᵀ · dz"
HINT_DX = "README hint 2: dL/dx = Σ_r dz_r · W_rᵀ is a sum over ranks: reduce-scatter (or all-reduce) it"


def tp_worker(rank: int, world: int, path: str, layers: int, width: int, batch: int) -> dict[str, Any]:
    solution = solution_in_rank(path)
    params, x = mlp.make_params(layers, width, seed=17), mlp.make_batch(batch, width, seed=17)
    widths = mlp.split_sizes(width, world)
    start = mlp.offsets(widths)[rank]
    ws = [w[:, start:start + widths[rank]].clone() for w in params]
    log = comm.CommLog(world)
    inputs, pre, h = [], [], x
    for w in ws:                                        # the forward of 05_parallel.py's Part 2
        inputs.append(h)
        pre.append(h @ w)
        h = comm.all_gather_columns(F.gelu(pre[-1]), widths, log)
    grad_output = 2 / h.numel() * h                     # loss = mean(h²)
    with counting() as counts:
        grads = function(solution, "tp_backward")(list(inputs), list(pre), list(ws), grad_output.clone(),
                                                  list(widths))
    dist.barrier()
    return {"grads": grads, "collectives": dict(counts.collectives), "sends": counts.sends}


def one_process_grads(layers: int, width: int, batch: int) -> list[torch.Tensor]:
    params, x = mlp.make_params(layers, width, seed=17), mlp.make_batch(batch, width, seed=17)
    ws = [w.clone().requires_grad_() for w in params]
    mlp.forward(ws, x).square().mean().backward()
    return [w.grad for w in ws]


def _check(world: int, layers: int, width: int, batch: int) -> Any:
    def run(solution: ModuleType) -> None:
        results = run_ranks(tp_worker, world, solution.__file__, layers, width, batch)
        expected = one_process_grads(layers, width, batch)
        widths = mlp.split_sizes(width, world)
        for rank, res in enumerate(results):
            grads, start = res["grads"], mlp.offsets(widths)[rank]
            if not (isinstance(grads, (list, tuple)) and len(grads) == layers
                    and all(isinstance(g, torch.Tensor) for g in grads)):
                raise Fail(f"a list of {layers} tensors, dL/dW_r per layer", kind(grads), HINT_LOCAL)
            for layer in reversed(range(layers)):      # top first: the first layer that goes wrong
                g, full = grads[layer], expected[layer]
                mine = full[:, start:start + widths[rank]]
                if g.shape != mine.shape:
                    raise Fail(f"rank {rank}, layer {layer}: shape {tuple(mine.shape)} (d × my columns)",
                               f"shape {tuple(g.shape)}", HINT_LOCAL)
                diff = (g - mine).abs().max().item()
                if not diff <= TOL:
                    hint = HINT_DX if layer < layers - 1 else HINT_LOCAL
                    raise Fail(f"rank {rank}, layer {layer}: one process's dL/dW, columns {start}–"
                               f"{start + widths[rank] - 1}", f"max |difference| {diff:.3g}", hint)
    return run


CASES = [
    Case("2 ranks, 3 layers, width 8, batch 5", _check(2, 3, 8, 5), HINT_DX),
    Case("3 ranks, 3 layers, width 10 (columns 4, 3, 3)", _check(3, 3, 10, 6), HINT_DX),
    Case("4 ranks, 1 layer (no gradient flows below it)", _check(4, 1, 8, 4), HINT_LOCAL),
    Case("4 ranks, 4 layers, width 6 (columns 2, 2, 1, 1), batch 3", _check(4, 4, 6, 3), HINT_DX, quick=False),
]
