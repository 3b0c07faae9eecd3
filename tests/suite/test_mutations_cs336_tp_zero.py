"""Every check of cs336/07_tensor_parallel.py and cs336/09_zero.py can fail: for each self-check and
each row of engines.toml (EN-tp-*, EN-09-*), a bug that must make it fail (tests/mutation.py says
how a mutation is written and applied). Each breaks what its checks exist to catch: a plan laid out
as another's, a reduce-scatter made an all-reduce, a collective that escapes a counter, an engine
that shards or reshards otherwise, traffic that bypasses the process group's methods. Runs use small
sizes where the rows do not depend on them (no row of these two scripts names a flag in `depends`).
"""

from __future__ import annotations

import pytest
from mutation import Mutation, run

TP, ZERO = "cs336/07_tensor_parallel.py", "cs336/09_zero.py"
TP_SMALL = ("--layers", "2", "--width", "8", "--batch", "4")        # 4 ranks, a 2 × 2 mesh: every part
ZERO_SMALL = ("--world-size", "3", "--layers", "4", "--width", "10", "--batch", "6")

# ---- 07: the plans, 05's reduce-scatter, DTensor's counters, the mesh's dp average -------------------
ROTATED_PLANS = """
plans = dict(module.dt.PLANS)
module.dt.PLANS.update({"at input": plans["at output"], "at output": plans["Megatron"],
                        "Megatron": plans["at output"]})
"""
OLDER_GLOO = """
import common.collectives_real as real
real.gloo_lacks = lambda op: "said to lack it" if op == "reduce_scatter" else None
"""
GATHERS_UNLOGGED = """
dispatch = module.dt.DTensorComm.__torch_dispatch__
def gathers_unlogged(self, func, types, args=(), kwargs=None):
    if getattr(func, "_overloadpacket", None) is module.dt._FUNCTIONAL.all_gather_into_tensor:
        return func(*args, **(kwargs or {}))
    return dispatch(self, func, types, args, kwargs)
module.dt.DTensorComm.__torch_dispatch__ = gathers_unlogged
"""
GATHER_BY_METHOD = """
import torch
import torch.distributed as dist
class Gathered(torch.autograd.Function):     # full_tensor() written by hand: dist.all_gather, a method
    @staticmethod
    def forward(ctx, local):
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local)
        ctx.width = local.shape[-1]
        return torch.cat(parts, dim=-1)
    @staticmethod
    def backward(ctx, grad):                 # every rank's loss is whole: keep my columns' gradient
        return grad[..., dist.get_rank() * ctx.width:(dist.get_rank() + 1) * ctx.width].contiguous()
whole = module.dt.whole
module.dt.whole = lambda out: (Gathered.apply(out.to_local().contiguous())
                               if isinstance(out, module.dt.DTensor) else whole(out))
"""
DP_BY_FUNCTIONAL = """
import torch
from torch.distributed import _functional_collectives as funcol
def average_shards(model, group, rows, batch):
    shards = [p.grad.to_local() for p in model.parameters()]
    flat = funcol.all_reduce(torch.cat([g.reshape(-1) for g in shards]) * rows, "sum", group)
    for g, summed in zip(shards, funcol.wait_tensor(flat).div(batch).split([g.numel() for g in shards])):
        g.copy_(summed.view_as(g))
module.average_shards = average_shards
"""
DP_BY_ROWS = """
average = module.average_shards
module.average_shards = lambda model, group, rows, batch: average(model, group, rows, rows)
"""

# ---- 09: ZeroRedundancyOptimizer, FSDP2 -------------------------------------------------------------
UNSHARDED_ADAM = """
class Unsharded:                     # plain Adam under DDP: every rank keeps all of m and v
    def __init__(self, params, optimizer_class, lr):
        self.optim = optimizer_class(list(params), lr=lr)
    def zero_grad(self):
        self.optim.zero_grad()
    def step(self):
        self.optim.step()
module.ZeroRedundancyOptimizer = Unsharded
"""
FREED_GRADIENTS = """
class Freeing(module.ZeroRedundancyOptimizer):
    def step(self, *args, **kwargs):
        out = super().step(*args, **kwargs)
        self.zero_grad(set_to_none=True)
        return out
module.ZeroRedundancyOptimizer = Freeing
"""
RESHARD_INVERTED = """
shard = module.fully_shard
module.fully_shard = lambda m, reshard_after_forward: shard(m, reshard_after_forward=not
                                                           reshard_after_forward)
"""
HALF_SHARDED = """
from torch.distributed.device_mesh import init_device_mesh
shard, meshes = module.fully_shard, []
def hybrid(m, reshard_after_forward):        # HSDP: replicated over 2, sharded over the other 2
    meshes[:] = meshes or [init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))]
    return shard(m, mesh=meshes[0], reshard_after_forward=reshard_after_forward)
module.fully_shard = hybrid
"""
UNCOUNTED_ALL_REDUCE = """
import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol
step = torch.optim.Adam.step
def step_and_a_metric(self, *args, **kwargs):
    out = step(self, *args, **kwargs)
    if dist.is_initialized():            # the ranks only: a functional all-reduce, past every method
        funcol.wait_tensor(funcol.all_reduce(torch.ones(4, dtype=torch.float64), "sum", dist.group.WORLD))
    return out
torch.optim.Adam.step = step_and_a_metric
"""

ZERO_DLDX = """
input_grad_rank = module.input_grad_rank
def zero_input_grad(*args, **kwargs):
    found = input_grad_rank(*args, **kwargs)
    found["input_grad"] = found["input_grad"] * 0
    return found
module.input_grad_rank = zero_input_grad
"""

MUTATIONS = [
    # 07's self-checks: one call site, check_sides(rep, what, …), for every side
    Mutation("DTensor's model computes another GELU (tanh's approximation)", TP, sites=("what",),
             covered_by="test_07_tensor_parallel.py::test_a_broken_side_ends_the_run_in_one_line"),
    Mutation("05's backward keeps its own term of dL/dx (no reduce-scatter)", TP, sites=("what",),
             covered_by="test_07_tensor_parallel.py::test_a_broken_side_ends_the_run_in_one_line"),
    Mutation("the learning rate 1.001x in the ranks only (07)", TP, sites=("what",),
             covered_by="test_output.py::test_a_drifting_update_fails_at_the_default"),
    Mutation("the learning rate 1.001x in the ranks only, at the deepest --layers (07)", TP, sites=("what",),
             covered_by="test_output.py::test_a_drifting_update_fails_at_the_deepest_accepted_setting"),
    Mutation("Megatron's dL/dx all zeros, where dL/dx is 6e-10 (--layers 12 --batch 512)", TP, ZERO_DLDX,
             ("--layers", "12", "--batch", "512"), sites=("what",),
             fails=r"error: Megatron TP \(DTensor\) against one process: step 1 largest \|difference\| / "
                   r"its size 1 > 1e-09$"),
    Mutation("the mesh's dp average divides by my rows, not the batch", TP, DP_BY_ROWS, TP_SMALL,
             sites=("what",), fails=r"error: DP × TP \(2 × 2 mesh\) against one process: step 1 "),
    # 07's rows
    Mutation("the plans rotated: at input laid out as at output, at output as Megatron's, Megatron's as "
             "at output", TP, ROTATED_PLANS, TP_SMALL,
             rows=("EN-tp-colin-calls-hand", "EN-tp-colin-bytes-hand", "EN-tp-colout-calls-model",
                   "EN-tp-colout-bytes-model", "EN-tp-colout-wire-hand", "EN-tp-backward-ratio",
                   "EN-tp-megatron-calls", "EN-tp-megatron-bytes", "EN-tp-megatron-notes",
                   "EN-tp-mesh-tp-calls", "EN-tp-mesh-tp-bytes")),
    Mutation("05's reduce-scatter made an all-reduce and its own slice (gloo said to lack one)", TP,
             OLDER_GLOO, TP_SMALL, rows=("EN-tp-hand-calls-model", "EN-tp-hand-bytes-model",
                                         "EN-tp-colin-calls-hand", "EN-tp-colin-bytes-hand")),
    Mutation("the dispatch mode misses DTensor's all-gathers", TP, GATHERS_UNLOGGED, TP_SMALL,
             rows=("EN-tp-count-all",)),
    Mutation("the output's last gather made through torch.distributed's method", TP, GATHER_BY_METHOD,
             TP_SMALL, rows=("EN-tp-count-python",)),
    Mutation("the mesh's dp average made by a functional all-reduce (as DTensor would)", TP, DP_BY_FUNCTIONAL,
             TP_SMALL, rows=("EN-tp-mesh-dp-calls", "EN-tp-mesh-dp-bytes", "EN-tp-mesh-dtensor-dp")),
    # 09's self-checks: one call site, a mark in Part 1's table for every engine
    Mutation("ZeroRedundancyOptimizer never broadcasts its updated shards", ZERO,
             sites=('f"{engine} against one process"',),
             covered_by="test_09_zero.py::test_unsent_shards_end_the_run_naming_zero1"),
    Mutation("the learning rate 1.001x in the ranks only (09)", ZERO,
             sites=('f"{engine} against one process"',),
             covered_by="test_output.py::test_a_drifting_update_fails_at_the_default"),
    # 09's rows
    Mutation("ZeRO-1 unsharded: plain Adam under DDP keeps all of m and v on every rank", ZERO,
             UNSHARDED_ADAM, ZERO_SMALL,
             rows=("EN-09-zero1-split", "EN-09-zero1-ledger", "EN-09-zero1-collectives")),
    Mutation("ZeRO-1 frees its gradients after each step", ZERO, FREED_GRADIENTS, ZERO_SMALL,
             rows=("EN-09-zero1-whole",)),
    Mutation("FSDP2's reshard_after_forward inverted", ZERO, RESHARD_INVERTED, ZERO_SMALL,
             rows=("EN-09-fsdp2-after-forward", "EN-09-fsdp2-no-reshard-after-forward",
                   "EN-09-fsdp2-collectives", "EN-09-fsdp2-no-reshard-collectives")),
    Mutation("FSDP2 shards over half the ranks and replicates over the other half (HSDP)", ZERO, HALF_SHARDED,
             ("--world-size", "4", "--layers", "4", "--width", "10", "--batch", "8"),
             rows=("EN-09-fsdp2-split", "EN-09-fsdp2-ledger", "EN-09-fsdp2-no-reshard-split",
                   "EN-09-fsdp2-no-reshard-ledger")),
    Mutation("an all-reduce each step past every ProcessGroup method (a functional collective)", ZERO,
             UNCOUNTED_ALL_REDUCE, ZERO_SMALL,
             rows=("EN-09-unseen", "EN-09-fsdp2-wire", "EN-09-fsdp2-no-reshard-wire")),
]


@pytest.mark.parametrize("m", [m for m in MUTATIONS if not m.covered_by], ids=lambda m: m.test_id)
def test_the_mutation_makes_its_checks_fail(tmp_path, m):
    run(tmp_path, m)
