"""Problem 119's cases: ZeRO-1 written by hand, Adam's state sharded over gloo ranks.

Each rank trains CS336's deep MLP (code/cs336/mlp.py) on its slice of the batch and calls the
student's ZeroAdam.step(). Around each step the judge counts the rank's collectives (common.dist_count,
each call at its size N) and weighs every tensor the optimizer keeps (its attributes, walked; the
parameters and their gradients left out). Here in the judge's process: the bytes against
cs336/ledger.py's optimizer_state_bytes (m and v of one shard), the collectives against
costmodel_steps.zero_step_collectives("ZeRO-1") (one reduce-scatter of the gradients, one all-gather of
the parameters), Adam's state shard and every rank's parameters after each step against
torch.optim.Adam in one process on the whole batch.
"""

from __future__ import annotations

import functools
from types import FunctionType, MethodType, ModuleType
from typing import Any

import torch

from common import dist_count
from common.costmodel.collectives import BY_TORCH_NAME, padded_shard_elements, split_sizes
from common.costmodel.steps import zero_step_collectives
from cs336 import ledger, mlp
from judging.engine import Case
from judging.messages import kind
from judging.ranks import check_seen, run_ranks, solution_in_rank, watched
from judging.sandbox import Fail, function

FUNCTIONS = ("ZeroAdam",)
SEED, STEPS = 29, 3
ELEM = 8              # float64: parameters and gradients 8 B an element, Adam's m and v 16 B together
TOL = 1e-9            # relative to the largest value compared: only the order of additions differs
DATA_ONLY = ("barrier",)
WALK_DEPTH = 4        # how deep the judge looks into the optimizer's attributes for tensors it keeps
HINT_SHARD = ("README hint 1: keep exp_avg and exp_avg_sq for your shard only, c = ⌈n/k⌉ elements each; "
              "no other tensor the size of the model between steps")
HINT_RS = ("README hint 2: one reduce-scatter of the flat gradients per step: each rank needs only its "
           "shard's sum (an all-reduce sends twice the bytes for a sum it mostly throws away)")
HINT_AG = ("README hint 3: after the update, all-gather the shards so that every rank has every updated "
           "parameter")
HINT_FLAT = ("README hint 2: one reduce-scatter and one all-gather per step, each on the whole flat vector "
             "(padded to a multiple of k), not one per parameter")
HINT_MEAN = ("README hint 2: the reduce-scatter sums the ranks' gradients; each is its own slice's mean, so "
             "divide by k for the batch's mean")
HINT_INDEX = ("README hint 1: rank r's shard is elements r·c … (r + 1)·c − 1 of the parameters flattened in "
              "order and padded with zeros")
HINT_ADAM = ("README hint 4: Adam as torch.optim.Adam computes it, bias corrections 1 − β₁ᵗ and 1 − β₂ᵗ "
             "included, t counted from 1")
HINT_WRITE = ("README hints 1 and 4: m and v are right, the parameters they update are not: update elements "
              "r·c … (r + 1)·c − 1 of the flat parameters (c = the padded length ÷ W), as torch.optim.Adam "
              "(bias corrections 1 − β₁ᵗ and 1 − β₂ᵗ, t from 1)")
HINT_DTYPE = ("README hint 1: make m and v in the parameters' dtype (float64 here: torch.zeros(c, "
              "dtype=p.dtype)); torch.zeros(c) alone is float32")
HINT_DEADLOCK = ("README hint 2: every rank calls the same collectives in the same order, with tensors of "
                 "the same size: one reduce-scatter, then one all-gather")
# 1 − β₁ᵗ with t = 0 (a step counted after the update) divides by zero
ERROR_HINTS = [("ZeroDivisionError", HINT_ADAM), ("division by zero", HINT_ADAM)]


def prepare() -> None:
    """Build Adam once in the judge before any fork: torch.optim's imports (~1 s) are then inherited."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=mlp.LR_ADAM)


# ---- in the solution's process: each rank's step, counted and weighed --------------------------------
def kept_tensors(opt: Any, skip: set[int], solution: ModuleType | None = None) -> list[list[Any]]:
    """[where, bytes] of each tensor storage the optimizer keeps (reached through its attributes,
    dicts, lists and objects, and what its callables hold: functools.partial's arguments, a
    function's closure cells and defaults, a bound method's object), and what the solution's module
    keeps in its globals (tensors, dicts, lists, tuples, sets: a cache between steps), but not the
    parameters' or gradients' storages (`skip`) nor one-number tensors (a step count). A slice
    keeps its whole storage alive: counted whole."""
    found: list[list[Any]] = []
    seen = set(skip)

    def visit(value: Any, where: str, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            if value.numel() > 1 and storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                found.append([where, storage.nbytes()])
        elif depth >= WALK_DEPTH or isinstance(value, (str, bytes, type, ModuleType)):
            return
        elif isinstance(value, functools.partial):
            visit(value.func, f"{where}.func", depth + 1)
            visit(list(value.args), f"{where}.args", depth + 1)
            visit(dict(value.keywords), f"{where}.keywords", depth + 1)
        elif isinstance(value, MethodType):
            visit(value.__func__, f"{where}.__func__", depth + 1)
            visit(value.__self__, f"{where}.__self__", depth + 1)
        elif isinstance(value, FunctionType):
            cells = [c.cell_contents for c in (value.__closure__ or ()) if _filled(c)]
            visit(cells, f"{where}.__closure__", depth + 1)
            visit(list(value.__defaults__ or ()) + list((value.__kwdefaults__ or {}).values()),
                  f"{where}.__defaults__", depth + 1)
        elif isinstance(value, dict):
            for key, item in list(value.items()):
                visit(item, f"{where}[{key!r}]" if isinstance(key, (str, int)) else f"{where}[…]", depth + 1)
        elif isinstance(value, (list, tuple, set)):
            for index, item in enumerate(value):
                visit(item, f"{where}[{index}]", depth + 1)
        elif hasattr(value, "__dict__"):
            for name, item in list(vars(value).items()):
                visit(item, f"{where}.{name}" if where else name, depth + 1)

    visit(opt, "", 0)
    if solution is not None:          # a module-level cache outlives the step as much as an attribute
        for name, value in list(vars(solution).items()):
            if isinstance(value, (torch.Tensor, dict, list, tuple, set)) and not name.startswith("__"):
                visit(value, f"{solution.__name__}.{name}", 1)
    return found


def _filled(cell: Any) -> bool:
    try:
        _ = cell.cell_contents        # reading an empty cell raises
    except ValueError:                # an empty cell
        return False
    return True


def _shard_state(opt: Any, name: str) -> Any:
    value = getattr(opt, name, None)
    return value.detach().clone() if isinstance(value, torch.Tensor) else kind(value)


def zero_worker(rank: int, world: int, layers: int, width: int, batch: int) -> dict[str, Any]:
    params, x = mlp.make_params(layers, width, seed=SEED), mlp.make_batch(batch, width, seed=SEED)
    ws = [w.clone().requires_grad_() for w in params]
    mine = x.tensor_split(world)[rank]             # equal slices: the mean of the ranks' means is the batch's
    solution = solution_in_rank()
    opt = function(solution, "ZeroAdam")(list(ws), lr=mlp.LR_ADAM)
    steps = []
    for _ in range(STEPS):
        for w in ws:
            w.grad = None
        mlp.forward(ws, mine).square().mean().backward()     # this rank's slice: its own mean
        skip = {t.untyped_storage().data_ptr() for w in ws for t in (w, w.grad) if t is not None}
        with watched() as seen, dist_count.counting() as counts:
            opt.step()
        steps.append({"traffic": seen, "calls": [[name, nbytes] for name, _, nbytes in counts.tensors],
                      "params": [w.detach().clone() for w in ws], "kept": kept_tensors(opt, skip, solution),
                      "exp_avg": _shard_state(opt, "exp_avg"), "exp_avg_sq": _shard_state(opt, "exp_avg_sq")})
    return {"steps": steps}


def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    return run_ranks(zero_worker, inputs["world_size"], inputs["layers"], inputs["width"], inputs["batch"])


# ---- in the judge's process ---------------------------------------------------------------------------
def one_process_adam(layers: int, width: int, batch: int) -> list[dict[str, Any]]:
    """torch.optim.Adam on the whole batch, one process: after each step the parameters and the
    flat m and v (the parameters' order), what every rank's shard is compared with."""
    ws = [w.clone().requires_grad_() for w in mlp.make_params(layers, width, seed=SEED)]
    x = mlp.make_batch(batch, width, seed=SEED)
    opt, after = torch.optim.Adam(ws, lr=mlp.LR_ADAM), []
    for _ in range(STEPS):
        opt.zero_grad()
        mlp.forward(ws, x).square().mean().backward()
        opt.step()
        after.append({"params": [w.detach().clone() for w in ws],
                      **{key: torch.cat([opt.state[w][key].flatten() for w in ws]) for key in ("exp_avg",
                                                                                             "exp_avg_sq")}})
    return after


def shard_bounds(n: int, world: int, rank: int, elements: int) -> tuple[int, int] | None:
    """Where rank's shard lies in the flat vector, by its size: the padded layout (c = ⌈n/k⌉ each,
    costmodel.collectives.padded_shard_elements) or tensor_split's (costmodel.collectives.split_sizes);
    None: neither."""
    c = padded_shard_elements(n, world)
    if elements == c:
        return rank * c, (rank + 1) * c
    sizes = split_sizes(n, world)
    return (sum(sizes[:rank]), sum(sizes[:rank + 1])) if elements == sizes[rank] else None


def _check_bytes(data: list[Any], n: int, world: int) -> None:
    c = padded_shard_elements(n, world)
    want = ledger.optimizer_state_bytes(n, world, 2 * ELEM)
    for rank, res in enumerate(data):
        for step, got in enumerate(res["steps"], 1):
            m = got["exp_avg"]
            if not isinstance(m, torch.Tensor) or not isinstance(got["exp_avg_sq"], torch.Tensor):
                raise Fail("attributes exp_avg and exp_avg_sq: 1-D tensors, this rank's shard of m and v",
                           f"rank {rank}: exp_avg is {kind(m)}", HINT_SHARD)
            wrong = [t.dtype for t in (m, got["exp_avg_sq"]) if t.dtype != torch.float64]
            if wrong:
                raise Fail("exp_avg and exp_avg_sq in the parameters' dtype, torch.float64",
                           f"rank {rank}: {wrong[0]}", HINT_DTYPE)
            held = sum(b for _, b in got["kept"])
            if shard_bounds(n, world, rank, m.numel()) is None or held != 2 * ELEM * m.numel():
                kept = ", ".join(f"{where} {b:,} B" for where, b in got["kept"][:4]) or "nothing"
                raise Fail(f"rank {rank}: {want:,} B, m and v of its {c} of {n} "
                           "(ledger.optimizer_state_bytes)", f"after step {step}: {held:,} B ({kept})",
                           HINT_SHARD)


def _calls_text(calls: list[tuple[str, float]]) -> str:
    return ", ".join(f"{k} N = {b:,.0f} B" for k, b in calls) or "no collective"


def _check_collectives(data: list[Any], n: int, world: int) -> None:
    check_seen([s for res in data for s in res["steps"]], "traffic")
    sizes = {n * ELEM, padded_shard_elements(n, world) * world * ELEM}   # unpadded or padded
    want = zero_step_collectives("ZeRO-1", max(sizes))
    want_text = (", ".join(f"{c.kind} ×{c.calls}" for c in want) + ", each N = "
                 + " or ".join(f"{s:,}" for s in sorted(sizes)) + " B counted (zero_step_collectives)")
    for rank, res in enumerate(data):
        for step, got in enumerate(res["steps"], 1):
            calls = []
            for name, nbytes in got["calls"]:
                if name in DATA_ONLY:
                    continue
                coll = BY_TORCH_NAME.get(name)
                calls.append((coll.name, coll.nbytes_of_input(world, nbytes)) if coll else (name, nbytes))
            kinds = [k for k, _ in calls]
            if kinds == [c.kind for c in want] and all(b in sizes for _, b in calls):
                continue
            hint = (HINT_RS if "reduce-scatter" not in kinds else HINT_AG if "all-gather" not in kinds
                    else HINT_FLAT)
            raise Fail(want_text, f"rank {rank}, step {step}: {_calls_text(calls)}", hint)


def _gap(got: Any, want: torch.Tensor) -> float:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return float("inf")
    return (got.double() - want).abs().max().item() / max(want.abs().max().item(), 1e-300)


def _check_state(got: dict[str, Any], want: dict[str, Any], n: int, world: int, rank: int, step: int) -> None:
    """Rank's m and v after `step` = one process's, on its shard (the padding's are 0)."""
    lo, hi = shard_bounds(n, world, rank, got["exp_avg"].numel())
    for key, scale in (("exp_avg", world), ("exp_avg_sq", world**2)):
        whole = torch.nn.functional.pad(want[key], (0, max(0, hi - n)))
        expected = whole[lo:hi]
        if _gap(got[key], expected) > TOL:
            summed = _gap(got[key], expected * scale) <= TOL       # the ranks' sum, not their mean
            elsewhere = _found_at(got[key], whole, lo)
            raise Fail(f"rank {rank}, after step {step}: one process's Adam {key}, elements {lo}–{hi - 1}",
                       f"relative difference {_gap(got[key], expected):.3g}"
                       + (f": {scale}× it, the ranks' sum" if summed else f": elements {elsewhere}–"
                          f"{elsewhere + hi - lo - 1}'s" if elsewhere is not None else ""),
                       HINT_MEAN if summed else HINT_INDEX if elsewhere is not None else HINT_ADAM)


def _found_at(got: Any, whole: torch.Tensor, lo: int) -> int | None:
    """Where else in the whole (padded) state `got` lies, if anywhere: a shard taken at the wrong
    offset. None: nowhere, so the arithmetic is wrong, not the place."""
    if not isinstance(got, torch.Tensor) or got.dim() != 1:
        return None
    size = got.numel()
    wide = torch.nn.functional.pad(whole, (0, size))
    for start in range(len(whole)):
        there = wide[start:start + size]
        if start != lo and there.abs().max() > 0 and _gap(got, there) <= TOL:
            return start
    return None


def _flat(got: dict[str, Any], want: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.cat([w.flatten() for w in ws]) for ws in (got["params"], want["params"]))


def _check_own_shard(got: dict[str, Any], want: dict[str, Any], n: int, world: int, rank: int,
                     step: int) -> None:
    """Rank's own shard of the parameters after `step` = one process's (what its update wrote; its m
    and v are right by now: the update's offset or formula is wrong)."""
    flat, flat_want = _flat(got, want)
    lo, hi = shard_bounds(n, world, rank, got["exp_avg"].numel())
    if _gap(flat, flat_want) > TOL and _gap(flat[lo:min(hi, n)], flat_want[lo:min(hi, n)]) > TOL:
        raise Fail(f"rank {rank}: its own shard's parameters (elements {lo}–{min(hi, n) - 1}) after step "
                   f"{step} = torch.optim.Adam, one process",
                   f"relative difference {_gap(flat[lo:min(hi, n)], flat_want[lo:min(hi, n)]):.3g}",
                   HINT_WRITE)


def _check_params(got: dict[str, Any], want: dict[str, Any], n: int, world: int, rank: int,
                  step: int) -> None:
    """Every one of rank's parameters after `step` = one process's (every rank's own shard is
    right by now: what is wrong came from the others)."""
    flat, flat_want = _flat(got, want)
    if _gap(flat, flat_want) <= TOL:
        return
    lo, hi = shard_bounds(n, world, rank, got["exp_avg"].numel())
    raise Fail(f"rank {rank}: every parameter after step {step} = torch.optim.Adam, one process",
               f"relative difference {_gap(flat, flat_want):.3g} (its own shard {lo}–{min(hi, n) - 1} right)",
               HINT_AG)


def check(inputs: dict[str, Any], data: list[Any]) -> None:
    """Step by step, the first that goes wrong; in a step, every rank's state, then every rank's own
    shard, then the whole: the rank blamed is the one whose own work went wrong (a wrong shard
    of rank 1's makes rank 0's gathered parameters wrong too)."""
    world, layers, width = inputs["world_size"], inputs["layers"], inputs["width"]
    n = layers * width * width
    _check_bytes(data, n, world)
    _check_collectives(data, n, world)
    ref = one_process_adam(layers, width, inputs["batch"])
    for step, want in enumerate(ref, 1):
        for each in (_check_state, _check_own_shard, _check_params):
            for rank, res in enumerate(data):
                each(res["steps"][step - 1], want, n, world, rank, step)


def case(name: str, world: int, layers: int, width: int, batch: int, quick: bool = True) -> Case:
    return Case(name, {"world_size": world, "layers": layers, "width": width, "batch": batch}, collect, check,
                HINT_SHARD, quick, ranks=True)


CASES = [
    case("2 ranks, 2 layers of 8 × 8 (n = 128: 64 a rank), 3 Adam steps", 2, 2, 8, 8),
    case("3 ranks, 2 layers of 5 × 5 (n = 50: 17 a rank, padded to 51), 3 Adam steps", 3, 2, 5, 6),
    case("4 ranks, 3 layers of 6 × 6 (n = 108: 27 a rank), 3 Adam steps", 4, 3, 6, 8, quick=False),
]
