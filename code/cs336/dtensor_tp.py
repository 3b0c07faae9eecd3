"""What cs336/07_tensor_parallel.py needs besides its lesson: the deep MLP as torch.nn and the plans
that lay it out over a mesh, DTensor's collectives counted, the formulas of each layout's traffic,
and the ranks' pieces of each W joined again.

    with DTensorComm({"tp": mesh.get_group("tp")}) as counted:
        model(x).square().mean().backward()
    counted.logs["tp"].per_step(1, ("all_reduce",))     # (calls, bytes this rank sends): a comm.CommLog

DTensor does not call torch.distributed's Python functions: a redistribution (Shard -> Replicate,
Partial -> Replicate, Partial -> Shard) runs a *functional* collective, `torch.ops._c10d_functional.
all_gather_into_tensor` / `all_reduce` / `reduce_scatter_tensor`, which reaches the process group
from C++. So neither cs336/comm.py nor common.dist_count's patched ProcessGroup methods see it
(dist_count only notices the groups' operation counters move: `Counts.unseen`). A TorchDispatchMode
does: every op dispatched while it is active passes through `__torch_dispatch__`, the backward's
too. That is how PyTorch's own `CommDebugMode` counts calls (it logs no bytes, and its import pulls
in torch._inductor, 1.2 s here); this one logs each call as comm.py logs the hand-written ones, the
whole result's bytes priced by costmodel's ring formula for the group's size, so both sides of a
comparison are counted by one rule.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn
from torch.distributed import ProcessGroup
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel
from torch.utils._python_dispatch import TorchDispatchMode

from common import costmodel as cm
from common.output import Report, fmt_bytes
from cs336 import comm

Pieces = list[tuple[torch.Tensor, int]]  # a rank's piece of each W, and the dim of W it was cut along


# ---- the model as torch.nn, and the plans that lay it out over a mesh -----------------------------
def as_linears(params: list[torch.Tensor]) -> nn.Sequential:
    """mlp.forward as nn.Linear + GELU. Linear computes x @ weightᵀ, so weight = Wᵀ: sharding weight's
    rows (ColwiseParallel: Shard(0)) takes W's columns, its columns (RowwiseParallel: Shard(1)) W's rows."""
    layers: list[nn.Module] = []
    for w in params:
        linear = nn.Linear(w.shape[0], w.shape[1], bias=False, dtype=w.dtype)
        linear.weight = nn.Parameter(w.T.contiguous())
        layers += [linear, nn.GELU()]
    return nn.Sequential(*layers)


def plan_gather_at_output(layers: int) -> dict[str, ParallelStyle]:
    """Every layer column-wise, its output made whole at once (GELU then runs on the whole tensor).
    Backward, the next layer's input is Replicate, so its gradient (a Partial sum) is made Replicate."""
    return {str(2 * i): ColwiseParallel(output_layouts=Replicate()) for i in range(layers)}


def plan_gather_at_input(layers: int) -> dict[str, ParallelStyle]:
    """The notes' sketch: GELU on my slice, the slices gathered where the next layer needs them whole
    (its input, declared Shard(-1)). Backward, that gather's gradient goes back to Shard(-1)."""
    return {str(2 * i): ColwiseParallel(input_layouts=Replicate() if i == 0 else Shard(-1),
                                        output_layouts=Shard(-1), use_local_output=False)
            for i in range(layers)}


def plan_megatron(layers: int) -> dict[str, ParallelStyle]:
    """Megatron's blocks: column-wise, then row-wise, whose partial sums (Partial) are made Replicate."""
    return {str(2 * i): ColwiseParallel() if i % 2 == 0 else RowwiseParallel() for i in range(layers)}


PLANS: dict[str, Callable[[int], dict[str, ParallelStyle]]] = {
    "at output": plan_gather_at_output, "at input": plan_gather_at_input, "Megatron": plan_megatron}


def whole(out: torch.Tensor) -> torch.Tensor:
    """The output on every rank: a DTensor still sharded is gathered (the notes' last all-gather)."""
    return out.full_tensor() if isinstance(out, DTensor) else out


def pieces(model: nn.Module, grads: bool = False) -> Pieces:
    """This rank's piece of each W (or of its gradient), and the dim of W it is cut along."""
    found = []
    for p in model.parameters():
        dim = next(pl.dim for pl in p.placements if isinstance(pl, Shard))
        found.append(((p.grad if grads else p).to_local().detach().T.clone(), 1 - dim))  # weight = Wᵀ
    return found


# ---- DTensor's collectives, counted -----------------------------------------------------------------
_FUNCTIONAL = torch.ops._c10d_functional
# functional op -> (the name comm.CommLog uses, whether its input is one rank's piece of the result)
KINDS = {_FUNCTIONAL.all_gather_into_tensor: ("all_gather", True),
         _FUNCTIONAL.all_reduce: ("all_reduce", False),
         _FUNCTIONAL.reduce_scatter_tensor: ("reduce_scatter", False)}
OPS = ("all_gather", "reduce_scatter", "all_reduce")
NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d_functional")
NOT_COLLECTIVES = ("wait_tensor", "_wrap_tensor_autograd")   # the rest of those namespaces move data


class DTensorComm(TorchDispatchMode):
    """Logs every functional collective run while active, per named group (a mesh dimension)."""

    def __init__(self, groups: dict[str, ProcessGroup]) -> None:
        super().__init__()
        self.dims = {group.group_name: dim for dim, group in groups.items()}
        self.logs = {dim: comm.CommLog(group.size()) for dim, group in groups.items()}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        packet = getattr(func, "_overloadpacket", None)
        if packet in KINDS:
            op, is_piece = KINDS[packet]
            log = self.logs[self.dims[args[-1]]]  # the group's name comes last; one not named here: KeyError
            nbytes = args[0].numel() * args[0].element_size() * (log.world_size if is_piece else 1)
            log.add(op, nbytes)
        elif getattr(func, "namespace", "") in NAMESPACES and packet.__name__ not in NOT_COLLECTIVES:
            # never a silent miss: a collective this counter cannot price ends the run, naming it
            raise RuntimeError(f"DTensor ran {func}, which this counter does not price")
        return func(*args, **(kwargs or {}))


# ---- each layout's traffic: costmodel's ring bytes per call, times the calls the layout makes -------
def colwise_traffic(k: int, layers: int, width: int, batch: int, elem: int,
                    backward: str) -> tuple[int, float]:
    """(calls, bytes a rank sends) a step of the notes' layout when the input gradient of layers
    2 … L is reduced by `backward`: "reduce_scatter" is cm.tp_step_traffic (05's); "all_reduce"
    sends twice a reduce-scatter's bytes for each of those calls."""
    gather = cm.ring_bytes_sent("all_gather", k, k * batch * math.ceil(width / k) * elem)
    reduce = cm.ring_bytes_sent(backward, k, batch * width * elem)
    return 2 * layers - 1, layers * gather + (layers - 1) * reduce


def megatron_traffic(k: int, calls: int, rows: int, width: int, elem: int) -> tuple[int, float]:
    """(calls, bytes a rank sends) for `calls` of Megatron's all-reduces, each of a block's output or
    input gradient (rows × d): a step makes one a block forward, one a block backward but the first's."""
    return calls, calls * cm.ring_bytes_sent("all_reduce", k, rows * width * elem)


def shard_average_traffic(dp: int, n_local: int, elem: int) -> tuple[int, float]:
    """(calls, bytes a rank sends) a step of data parallelism over a tp-sharded model: one all-reduce of
    this rank's gradient shards (n_local elements, flattened) with the dp ranks holding the same shards."""
    return 1, cm.ring_bytes_sent("all_reduce", dp, n_local * elem)


# ---- the parent's side: the ranks' pieces, joined -------------------------------------------------
def joined(ranks: list[Pieces]) -> list[torch.Tensor]:
    """Each W whole again from the ranks' pieces (in the order the ranks hold them)."""
    return [torch.cat([r[i][0] for r in ranks], dim=ranks[0][i][1]) for i in range(len(ranks[0]))]


def traffic_row(name: str, logs: list[comm.CommLog], steps: int,
                formulas: list[tuple[int, float]]) -> tuple[list[Any], int]:
    """A table row: the calls of each collective and the bytes sent a step, counted and by formula,
    shown for the rank farthest from its formula (and whether every rank equals its own); and that
    rank."""
    counted = [log.per_step(steps, OPS) for log in logs]
    worst = max(range(len(logs)), key=lambda r: (abs(counted[r][0] - formulas[r][0]),
                                                 abs(counted[r][1] - formulas[r][1])))
    equal = all(c[0] == f[0] and math.isclose(c[1], f[1], rel_tol=1e-12) for c, f in zip(counted, formulas))
    per_op = [logs[worst].calls.get(op, 0) / steps for op in OPS]
    per_op = [int(n) if n == int(n) else n for n in per_op]
    row = [name, *per_op, counted[worst][1], formulas[worst][0], formulas[worst][1], "yes" if equal else "NO"]
    return row, worst


HEADERS = ["side", "all-gather", "reduce-scatter", "all-reduce", "bytes/step", "formula", "bytes",
           "= all ranks"]
Case = tuple[str, str, list[comm.CommLog], int, list[tuple[int, float]]]


def traffic_table(rep: Report, cases: list[Case]) -> None:
    """The traffic table: (label, value name, each rank's log, steps, each rank's formula) a row; the
    calls and bytes of the rank farthest from its formula recorded as <name>_calls, _bytes, _formula_…"""
    rows = []
    for label, name, logs, steps, formulas in cases:
        row, worst = traffic_row(label, logs, steps, formulas)
        rows.append(row[:4] + [fmt_bytes(row[4]), row[5], fmt_bytes(row[6]), row[7]])
        calls, sent = logs[worst].per_step(steps, OPS)
        formula_calls, formula_bytes = formulas[worst]
        rep.values(**{f"{name}_calls": calls, f"{name}_bytes": sent, f"{name}_formula_calls": formula_calls,
                      f"{name}_formula_bytes": formula_bytes})
    rep.table(HEADERS, rows, name="traffic")
