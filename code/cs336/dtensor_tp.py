"""What cs336/07_tensor_parallel.py needs besides its lesson: the deep MLP as torch.nn and the plans
that lay it out over a mesh, DTensor's collectives counted, the formulas of each layout's traffic,
and the ranks' pieces of each W joined again and compared with one process.

    with DTensorComm({"tp": mesh.get_group("tp")}) as counted:
        model(x).square().mean().backward()
    counted.logs["tp"].per_step(1, ("all_reduce",))     # (calls, ring-model bytes): a comm.CommLog

DTensor does not call torch.distributed's Python functions: a redistribution (Shard -> Replicate,
Partial -> Replicate, Partial -> Shard) runs a *functional* collective, `torch.ops._c10d_functional.
all_gather_into_tensor` / `all_reduce` / `reduce_scatter_tensor`, which reaches the process group
from C++. So neither cs336/comm.py nor common.dist_count's patched ProcessGroup methods see it
(dist_count only notices the groups' operation counters move: `Counts.unseen`). A TorchDispatchMode
does: every op dispatched while it is active passes through `__torch_dispatch__`, the backward's
too. That is how PyTorch's own `CommDebugMode` counts calls (it logs no bytes, and its import pulls
in torch._inductor, 1.2 s here); this one logs each call as comm.py logs the hand-written ones: the
whole result's bytes N, handed to the group (counted), and their price in costmodel's ring formula
for the group's size (ring model), so both sides of a comparison are counted by one rule. What gloo
then runs for them is another figure (cs336.gloo_ran: a reduce-scatter runs as an all-reduce).
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

from common.costmodel.collectives import BY_TORCH_NAME, algorithm
from common.output import Report
from common.units import fmt_bytes
from cs336 import comm, mlp

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


# ---- each layout's traffic: the calls of each collective, and the ring model's price of them --------
Formula = dict[str, tuple[int, float]]   # torch's name of a collective -> (calls a step, ring-model bytes)


def colwise_traffic(k: int, layers: int, width: int, batch: int, elem: int, backward: str) -> Formula:
    """A step of the notes' layout: L all-gathers forward, and the input gradient of layers 2 … L
    reduced by `backward`: "reduce_scatter" (05's: cm.tp_step_traffic's calls and bytes) or
    "all_reduce" (twice a reduce-scatter's ring bytes a call)."""
    gather = algorithm("ring all-gather").busiest_bytes(k, k * batch * math.ceil(width / k) * elem)
    reduce = algorithm(BY_TORCH_NAME[backward].ring).busiest_bytes(k, batch * width * elem)
    return {"all_gather": (layers, layers * gather), backward: (layers - 1, (layers - 1) * reduce)}


def megatron_traffic(k: int, calls: int, rows: int, width: int, elem: int) -> Formula:
    """`calls` of Megatron's all-reduces, each of a block's output or input gradient (rows × d): a
    step makes one a block forward, one a block backward but the first's."""
    return {"all_reduce": (calls, calls * algorithm("ring all-reduce").busiest_bytes(k, rows * width * elem))}


def shard_average_traffic(dp: int, n_local: int, elem: int) -> Formula:
    """Data parallelism over a tp-sharded model: one all-reduce a step of this rank's gradient shards
    (n_local elements, flattened) with the dp ranks holding the same shards."""
    return {"all_reduce": (1, algorithm("ring all-reduce").busiest_bytes(dp, n_local * elem))}


def calls_text(calls: dict[str, float]) -> str:
    """'8 all-gather + 7 reduce-scatter': the calls of each kind (torch's names, OPS' order)."""
    return " + ".join(f"{calls[op]:g} {op.replace('_', '-')}" for op in OPS if calls.get(op)) or "none"


def counted_calls(log: comm.CommLog, steps: int) -> dict[str, float]:
    """A step's calls of each kind, from a log of `steps` steps (whole where they divide)."""
    return {op: n // steps if n % steps == 0 else n / steps for op in OPS if (n := log.calls.get(op, 0))}


def handed(log: comm.CommLog, steps: int) -> dict[str, tuple[float, float]]:
    """A step's calls and bytes handed to the group (counted), by collective ("all-gather")."""
    return {BY_TORCH_NAME[op].name: (log.calls[op] / steps, log.handed[op] / steps) for op in OPS
            if log.calls.get(op)}


# ---- the parent's side: the ranks' pieces joined, compared with one process ----------------------
QUANTITIES = ["output, step 1", "loss, step 1", "gradient of every W, step 1", "every W after the SGD steps"]


def joined(ranks: list[Pieces]) -> list[torch.Tensor]:
    """Each W whole again from the ranks' pieces (in the order the ranks hold them)."""
    return [torch.cat([r[i][0] for r in ranks], dim=ranks[0][i][1]) for i in range(len(ranks[0]))]


def side_gaps(runs: list[dict], ref: mlp.Reference) -> list[float]:
    """max |diff| from one process of QUANTITIES: every rank's output and loss, the joined W's."""
    return [max(mlp.max_abs_diff(r["output"], ref.output) for r in runs),
            max(abs(r["loss"] - ref.loss) for r in runs),
            mlp.max_abs_diff(joined([r["grads"] for r in runs]), ref.grads),
            mlp.max_abs_diff(joined([r["params"] for r in runs]), ref.params_after[-1])]


def mesh_gaps(runs: list[dict], ref: mlp.Reference, dp: int, batch: int) -> list[float]:
    """side_gaps of a dp × tp mesh, the worst row of it: each row's output and mean loss make the whole
    batch's, each row's tp ranks the whole W's."""
    by_row = [[r for r in runs if r["row"] == i] for i in range(dp)]
    output = torch.cat([row[0]["output"] for row in by_row])
    loss = sum(row[0]["rows"] * row[0]["loss"] for row in by_row) / batch
    per_row = [[mlp.max_abs_diff(output, ref.output), abs(loss - ref.loss),
                mlp.max_abs_diff(joined([r["grads"] for r in row]), ref.grads),
                mlp.max_abs_diff(joined([r["params"] for r in row]), ref.params_after[-1])] for row in by_row]
    return [max(g) for g in zip(*per_row)]


def backward_call_bytes(log: comm.CommLog) -> float:
    """The ring model's bytes of one backward call of the notes' layout (any call but an all-gather)."""
    ops = [op for op in OPS if op != "all_gather"]
    return sum(log.sent.get(op, 0) for op in ops) / sum(log.calls.get(op, 0) for op in ops)


def traffic_row(name: str, logs: list[comm.CommLog], steps: int,
                formulas: list[Formula]) -> tuple[list[Any], int]:
    """A table row: the calls of each collective a step, counted, and the ring model's bytes of them,
    beside the formula's, for the rank farthest from its formula (and whether every rank equals its
    own); and that rank."""
    def off(r: int) -> tuple[bool, float]:
        want_calls = {op: c for op, (c, _) in formulas[r].items()}
        want_bytes = sum(b for _, b in formulas[r].values())
        sent = logs[r].per_step(steps, OPS)[1]
        return counted_calls(logs[r], steps) != want_calls, abs(sent - want_bytes) / max(want_bytes, 1)

    worst = max(range(len(logs)), key=off)
    equal = all(not off(r)[0] and off(r)[1] <= 1e-12 for r in range(len(logs)))
    calls, want = counted_calls(logs[worst], steps), formulas[worst]
    row = [name, *(calls.get(op, 0) for op in OPS), fmt_bytes(logs[worst].per_step(steps, OPS)[1]),
           " + ".join(f"{c} {SHORT[op]}" for op, (c, _) in want.items()),
           fmt_bytes(sum(b for _, b in want.values())), "yes" if equal else "NO"]
    return row, worst


SHORT = {"all_gather": "AG", "reduce_scatter": "RS", "all_reduce": "AR"}
HEADERS = ["side", "all-gather", "reduce-scatter", "all-reduce", "ring model B/step", "by the formula",
           "formula B", "all ranks as it"]
# The names a row of the traffic table is recorded under, in this order: its calls (text by kind) and
# bytes (ring model) a step, counted, and by the formula ("p1_hand_calls", "p1_hand_bytes", …).
Names = tuple[str, str, str, str]
Case = tuple[str, Names, list[comm.CommLog], int, list[Formula]]


def traffic_table(rep: Report, cases: list[Case]) -> None:
    """The traffic table: (label, value names, each rank's log, steps, each rank's formula) a row: the
    calls counted (handed to the group) and the ring model's bytes of them; the rank farthest from
    its formula recorded under the case's names (Names)."""
    rows = []
    for label, names, logs, steps, formulas in cases:
        row, worst = traffic_row(label, logs, steps, formulas)
        rows.append(row)
        want = formulas[worst]
        for name, value in zip(names, (calls_text(counted_calls(logs[worst], steps)),
                                      logs[worst].per_step(steps, OPS)[1],
                                      calls_text({op: c for op, (c, _) in want.items()}),
                                      sum(b for _, b in want.values()))):
            rep.value(name, value)
    rep.table(HEADERS, rows, name="traffic")


def wire_case(label: str, names: tuple[str, str], runs: list[dict], logs: list[comm.CommLog],
              steps: int) -> tuple:
    """gloo_ran.report's case for rank 0: a step's calls handed to the group (from a log of `steps`)
    and what gloo ran in a step (each run's "ran"), recorded under `names` (calls, bytes)."""
    return label, names, handed(logs[0], steps), runs[0]["ran"]


def counting_note(rep: Report, runs: list[dict]) -> None:
    """How DTensor's collectives were counted (every rank's run of every plan), and what dist_count's
    patched methods and the groups' own operation counters saw of them."""
    python = sum(r["python_calls"] for r in runs)
    recorded = sum(sum(r["log"].calls.values()) for r in runs)
    unseen = sum(r["group_ops_unseen"] or 0 for r in runs)
    rep.value("dtensor_calls_recorded", recorded)
    rep.value("dtensor_group_ops_unseen", unseen)
    rep.value("dtensor_calls_through_python", python)
    rep.note(f"DTensor's collectives (every plan and rank): {recorded} logged by a dispatch mode, as "
             f"CommDebugMode counts them (cs336/dtensor_tp.py); common.dist_count's patched ProcessGroup "
             f"methods saw {python}: they are functional collectives (torch.ops._c10d_functional), which "
             f"reach the group from C++. The groups' own operation counters moved {unseen} times.")
