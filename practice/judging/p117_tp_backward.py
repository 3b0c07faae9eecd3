"""Problem 117's cases: the tensor-parallel backward of CS336's deep MLP, on real gloo ranks.

The judge runs the forward as code/cs336/05_parallel.py does (rank r holds columns cols_r of every
W, computes gelu(x @ W_r) and all-gathers the columns), then hands the student's tp_backward what
that forward kept. Here in the judge, every rank's gradients are compared with one process on the
whole model (autograd), in float64, to an absolute 1e-12: the count, the order and the dtype of the
list first, then the layers top down over every rank (the first layer that goes wrong names the
mistake: the local part at the top, the sum over ranks below it, float32's rounding anywhere).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from common.costmodel.collectives import split_sizes
from cs336 import comm, mlp
from judging.engine import Case
from judging.messages import kind
from judging.ranks import run_ranks, solution_in_rank
from judging.sandbox import Fail, function

FUNCTIONS = ("tp_backward",)
TOL = 1e-12          # float64; only the summation order differs from one process
SEED = 17
FLOAT32_CLOSE = 1e-5  # off by less than this × the gradient's size: float32's rounding, not a wrong formula
HINT_LOCAL = ("README hint 1: dz = (dL/dy)[:, my columns] · gelu'(z), my columns from sum(widths[:rank]); "
              "dL/dW_r = inputᵀ · dz")
HINT_DX = "README hint 2: dL/dx = Σ_r dz_r · W_rᵀ is a sum over ranks: reduce-scatter (or all-reduce) it"
HINT_COUNT = "the README: one dL/dW_r per layer, every layer, the first layer's first"
HINT_ORDER = "the README: the gradients in LAYER order, grads[0] the first layer's (backward runs top down)"
HINT_DTYPE = ("the README: every tensor is float64; a buffer you make needs the inputs' dtype "
              "(torch.zeros(shape) is float32: use torch.zeros_like, or dtype=x.dtype)")
# a column slice of the wrong size, or the whole B × d kept where this rank's columns were asked
ERROR_HINTS = [("must match the size of tensor", "README hints 1 and 2: this rank's columns are "
                "sum(widths[:rank]) … + widths[rank] − 1; dL/dx comes back as B × widths[rank] (its own "
                "columns of the sum over ranks: reduce-scatter, or all-reduce then slice)")]
HINT_DEADLOCK = (
    "README hint 2: every rank calls the same collective for each layer below the top, in the same order"
)


def tp_worker(rank: int, world: int, layers: int, width: int, batch: int) -> dict[str, Any]:
    params, x = mlp.make_params(layers, width, seed=SEED), mlp.make_batch(batch, width, seed=SEED)
    widths = split_sizes(width, world)
    start = mlp.offsets(widths)[rank]
    ws = [w[:, start:start + widths[rank]].clone() for w in params]
    log = comm.CommLog(world)
    inputs, pre, h = [], [], x
    for w in ws:                                        # the forward of 05_parallel.py's Part 2
        inputs.append(h)
        pre.append(h @ w)
        h = comm.all_gather_columns(F.gelu(pre[-1]), widths, log)
    grad_output = 2 / h.numel() * h                     # loss = mean(h²)
    grads = function(solution_in_rank(), "tp_backward")(list(inputs), list(pre), list(ws),
                                                        grad_output.clone(), list(widths))
    return {"grads": grads}      # any collectives will do here: the traffic is not judged


def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(tp_worker, inputs["world_size"], inputs["layers"], inputs["width"], inputs["batch"])


def one_process_grads(layers: int, width: int, batch: int) -> list[torch.Tensor]:
    params, x = mlp.make_params(layers, width, seed=SEED), mlp.make_batch(batch, width, seed=SEED)
    ws = [w.clone().requires_grad_() for w in params]
    mlp.forward(ws, x).square().mean().backward()
    return [w.grad for w in ws]


def _shape_of_list(grads: Any, expected: list[torch.Tensor], start: int, width: int) -> None:
    """A list of one d × width tensor per layer, in layer order, of the inputs' dtype."""
    layers = len(expected)
    if not (isinstance(grads, (list, tuple)) and all(isinstance(g, torch.Tensor) for g in grads)):
        raise Fail(f"a list of {layers} tensors, dL/dW_r per layer", kind(grads), HINT_COUNT)
    if len(grads) != layers:
        raise Fail(f"{layers} gradients, one per layer", f"{len(grads)}", HINT_COUNT)
    mine = [e[:, start:start + width] for e in expected]
    if layers > 1 and all(g.shape == m.shape and (g.double() - m).abs().max().item() <= TOL
                          for g, m in zip(reversed(grads), mine)):
        raise Fail("grads[0] = the first layer's dL/dW_r", "the layers in reverse order", HINT_ORDER)
    for layer, g in enumerate(grads):
        if g.dtype != torch.float64:
            raise Fail(f"layer {layer}: float64", str(g.dtype).removeprefix("torch."), HINT_DTYPE)


def check(inputs: dict[str, Any], data: list[Any]) -> None:
    world, layers, width, batch = (inputs[k] for k in ("world_size", "layers", "width", "batch"))
    expected = one_process_grads(layers, width, batch)
    widths = split_sizes(width, world)
    starts = mlp.offsets(widths)
    for rank, res in enumerate(data):
        _shape_of_list(res["grads"], expected, starts[rank], widths[rank])
    # The top layer on every rank first: the first layer that goes wrong names the mistake (a rank's
    # wrong columns there would spoil every rank's layers below).
    for layer in reversed(range(layers)):
        for rank, res in enumerate(data):
            start, end = starts[rank], starts[rank] + widths[rank]
            g, mine = res["grads"][layer], expected[layer][:, start:end]
            if g.shape != mine.shape:
                raise Fail(f"rank {rank}, layer {layer}: shape {tuple(mine.shape)} (d × my columns)",
                           f"shape {tuple(g.shape)}", HINT_LOCAL)
            diff = (g.double() - mine).abs().max().item()
            if not diff <= TOL:
                near = diff <= FLOAT32_CLOSE * mine.abs().max().item()     # float32 somewhere on the way
                raise Fail(f"rank {rank}, layer {layer}: one process's dL/dW, columns {start}–{end - 1}",
                           f"max |difference| {diff:.3g}" + (" (float32's precision)" if near else ""),
                           HINT_DTYPE if near else HINT_DX if layer < layers - 1 else HINT_LOCAL)


def case(name: str, world: int, layers: int, width: int, batch: int, hint: str, quick: bool = True) -> Case:
    return Case(name, {"world_size": world, "layers": layers, "width": width, "batch": batch}, collect, check,
                hint, quick, ranks=True)


CASES = [
    case("2 ranks, 3 layers, width 8, batch 5", 2, 3, 8, 5, HINT_DX),
    case("3 ranks, 3 layers, width 10 (columns 4, 3, 3)", 3, 3, 10, 6, HINT_DX),
    case("4 ranks, 1 layer (no gradient flows below it)", 4, 1, 8, 4, HINT_LOCAL),
    case("4 ranks, 4 layers, width 6 (columns 2, 2, 1, 1), batch 3", 4, 4, 6, 3, HINT_DX, quick=False),
]
