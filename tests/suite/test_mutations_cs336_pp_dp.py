"""Every check can fail (tests/mutation.py), for cs336/01_collectives.py, 02_benchmark.py,
05_parallel.py and 08_pipeline_schedules.py: each self-check and each row observed on real ranks or
compared with a value of ours has a bug below that makes it fail, and a test applying it.

Rows are grouped: one real run per script flips every row that script observes (a bug per row,
each in the part it breaks), so that the suite stays fast. A bug in a function is written as an
edit of its source (`edited`): the function is defined again from its own text with one phrase
replaced, so the table says exactly what went wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mutation import Mutation, run


def edited(module: str, function: str, *changes: tuple[str, str]) -> str:
    """Patch code: `function` of `module` ("script" for the script itself, else an importable name)
    defined again from its source, each (old, new) replaced once; an edit that no longer finds its
    phrase fails the test, so a mutation never silently stops mutating."""
    return f"""
import importlib, inspect, textwrap
_where = module if {module!r} == "script" else importlib.import_module({module!r})
_source = inspect.getsource(getattr(_where, {function!r}))
for _old, _new in {list(changes)!r}:
    assert _source.count(_old) == 1, ({function!r}, _old)
    _source = _source.replace(_old, _new)
exec(textwrap.dedent(_source), _where.__dict__)
"""


# ---- 08: PyTorch's schedules against the simulator --------------------------------------------------

P08 = "cs336/08_pipeline_schedules.py"
# The simulator's schedules, each one rule off (a reordered schedule): GPipe's backwards in reverse
# (05's hand-written order), 1F1B and interleaved warm-ups one forward longer / without the 2×, and
# at M = S only (v-1)·S warm-up forwards where Megatron runs them all.
SIM_ORDERS = edited("cs336.pipeline", "gpipe_order",
                    ("[(BACKWARD, m, s) for m in range(micro_batches)]",
                     "[(BACKWARD, m, s) for m in reversed(range(micro_batches))]")) + edited(
    "cs336.pipeline", "one_f_one_b_order",
    ("warmup = min(stages - s - 1, micro_batches)", "warmup = min(stages - s, micro_batches)")) + edited(
    "cs336.pipeline", "interleaved_order",
    ("warmup = (stages - d - 1) * 2 + (virtual - 1) * stages",
     "warmup = (stages - d - 1) + (virtual - 1) * stages"),
    ("            warmup = total\n", "            warmup = (virtual - 1) * stages\n"))
# What is counted, each off by one: the simulator takes its peak before it keeps a forward's output,
# PyTorch's stages keep each micro-batch's activations after its backward (fwd_cache never freed),
# and pp_step_traffic counts a message and an element more per stage.
OFF_BY_ONE = edited("cs336.pipeline", "_count_and_peak",
                    ("            held += 1\n            if held > peak:\n                peak = held",
                     "            if held > peak:\n                peak = held\n            held += 1")) + """
from torch.distributed.pipelining import stage as _stage
_backward = _stage._PipelineStageBase.backward_one_chunk
def _keeps_its_cache(self, bwd_chunk_id, *args, **kwargs):
    kept = self.fwd_cache.get(bwd_chunk_id)
    out = _backward(self, bwd_chunk_id, *args, **kwargs)
    self.fwd_cache[bwd_chunk_id] = kept
    return out
_stage._PipelineStageBase.backward_one_chunk = _keeps_its_cache
_traffic = module.pp_step_traffic
module.pp_step_traffic = lambda k, rank, m, b, d, e: tuple(
    x + y for x, y in zip(_traffic(k, rank, m, b, d, e), (1, e)))
"""
# PyTorch's interleaved warm-up one forward short on rank S - 2 at M = S: a rank the simulator's
# order does not fit anyway, so the old check (ranks off the simulator = ranks predicted off) passed
# it; the rule's own order does not.
SHORT_WARMUP = """
from torch.distributed.pipelining import schedules as _schedules
_warmup = _schedules._get_warmup_ops
_schedules._get_warmup_ops = lambda rank, local, per_round, size, n, multiply_factor=2: (
    _warmup(rank, local, per_round, size, n, multiply_factor) - (n == size and rank == size - 2))
"""

DRIFT = "test_output.py::test_a_drifting_update_fails_at_the_default"
ORDER_RULE = "ranks off PyTorch's own rule"

LOSE_LAST_LOSS = """
import inspect, textwrap
source = textwrap.dedent(inspect.getsource(module.run_schedule))
assert "sum(loss.item() for loss in losses)" in source
exec(source.replace("sum(loss.item() for loss in losses)", "sum(loss.item() for loss in losses[:-1])"),
     module.__dict__)
"""

MUTATIONS_08 = [
    Mutation("a stage's update drifts 1e-3 of its movement (lr 1.001x in the ranks)", P08,
             sites=("row[0]",), covered_by=DRIFT),
    Mutation("the last micro-batch's loss dropped, where the loss is 2e-9 (--layers 14 --width 16)", P08,
             LOSE_LAST_LOSS, ("--layers", "14", "--width", "16", "--micro-batches", "32", "--batch", "32"),
             sites=("row[0]",), fails=r"error: GPipe, M = 32 against one process: step 1 largest "
                                      r"\|difference\| / its size \S+ > 1e-09 \(and 3 more\)$"),
    Mutation("ScheduleGPipe run where Schedule1F1B is asked", P08, sites=(ORDER_RULE,),
             covered_by="test_08_pipeline_schedules.py::"
                        "test_another_schedule_than_asked_ends_the_run_naming_its_order"),
    Mutation("PyTorch's interleaved warm-up one forward short on rank S-2 at M = S", P08, SHORT_WARMUP,
             sites=(ORDER_RULE,), fails=f"interleaved 1F1B, M = 4: {ORDER_RULE}"),
    Mutation("the simulator's schedules one rule off (GPipe backwards reversed, warm-ups wrong)", P08,
             SIM_ORDERS, rows=("EN-08-gpipe-order", "EN-08-1f1b-order", "EN-08-interleaved-order",
                               "EN-08-interleaved-ms-order", "EN-08-interleaved-ms-makespan",
                               "EN-08-1f1b-held", "EN-08-interleaved-held",
                               "EN-08-interleaved-ms-held-most")),
    Mutation("counts off by one: the simulator's peak, PyTorch's fwd_cache, pp_step_traffic", P08,
             OFF_BY_ONE, rows=("EN-08-gpipe-held", "EN-08-1f1b-held", "EN-08-interleaved-held",
                               "EN-08-interleaved-ms-held-most", "EN-08-held-cache", "EN-08-gpipe-sends",
                               "EN-08-gpipe-sent", "EN-08-1f1b-sends", "EN-08-1f1b-sent",
                               "EN-08-interleaved-sends", "EN-08-interleaved-sent",
                               "EN-08-interleaved-ms-sends", "EN-08-interleaved-ms-sent")),
]


# ---- 05: the notes' strategies by hand --------------------------------------------------------------

P05 = "cs336/05_parallel.py"
# Each strategy breaks what one row observes, and nothing the checks against one process see:
# DP's sketch AVG becomes SUM (k× the gradient, on copies); DP's all-reduce is an all-gather each rank
# sums from its own part on (the replicas round apart); TP all-reduces where it reduce-scatters; PP
# all-reduces a loss every step; the stages split the layers unevenly.
STRATEGIES = edited("script", "data_parallel_rank",
                    ("op=dist.ReduceOp.AVG", "op=dist.ReduceOp.SUM")) + edited(
    "script", "tp_input_gradient",
    ("return comm.reduce_scatter_columns(dz @ w_local.T, widths, log)",
     "total = dz @ w_local.T\n    with comm.counted(log):\n        dist.all_reduce(total)\n"
     "    start = mlp.offsets(widths)[dist.get_rank()]\n"
     "    return total[:, start:start + widths[dist.get_rank()]].contiguous()")) + edited(
    "script", "pipeline_rank",
    ("        if step == 0:\n            out = torch.cat(outputs)",
     "        with comm.counted(log):\n            dist.all_reduce(torch.zeros(1, dtype=torch.float64))\n"
     "        if step == 0:\n            out = torch.cat(outputs)")) + """
import torch, torch.distributed as dist
from cs336 import comm, mlp
def _summed_from_my_own(t, log):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    with comm.counted(log):
        dist.all_gather(parts, t)
    rank = dist.get_rank()
    total = parts[rank].clone()
    for part in parts[rank + 1:] + parts[:rank]:
        total += part
    t.copy_(total)
comm.all_reduce_sum = _summed_from_my_own
_stage_layers = mlp.stage_layers
def _uneven(layers, stages):
    even = _stage_layers(layers, stages)
    ends = [r.stop + 1 for r in even[:-1]] + [layers]
    return [range(start, end) for start, end in zip([0] + ends[:-1], ends)]
mlp.stage_layers = _uneven
"""
# ZeRO's Adam adds ε before the bias correction instead of after (the paper's Algorithm 1 is the
# other way): a drift of a share of the movement, in the ranks only.
ZERO_EPS = edited("script", "zero_rank",
                  ("denom = v.sqrt() / math.sqrt(1 - ADAM_BETAS[1] ** t) + ADAM_EPS",
                   "denom = (v.sqrt() + ADAM_EPS) / math.sqrt(1 - ADAM_BETAS[1] ** t)"))

MUTATIONS_05 = [
    Mutation("DP's update drifts 1e-3 of its movement (lr 1.001x in the ranks)", P05, sites=("strategy",),
             covered_by=DRIFT),
    Mutation("ZeRO's Adam adds eps before the bias correction", P05, ZERO_EPS, ("--quick",),
             sites=('"ZeRO-1 and ZeRO-2 (Adam) against one process"',),
             fails=r"ZeRO-1 and ZeRO-2 \(Adam\) against one process: trained"),
    Mutation("DP sums from its own part and AVG as SUM, TP all-reduces, PP all-reduces a loss, "
             "stages uneven", P05, STRATEGIES, ("--quick",),
             rows=("CS-dp-params-same", "CS-dp-sketch", "CS-tpdp-kinds-dp", "CS-tpdp-kinds-tp", "CS-pp-p2p",
                   "CS-detail-storage")),
]


# ---- 01 and 02: the collectives themselves -----------------------------------------------------------

P01, P02 = "cs336/01_collectives.py", "cs336/02_benchmark.py"
# A backend that hands one rank a wrong result (the root for gather and reduce, the last rank
# otherwise); reduce's op dropped (SUM whatever is asked); the split route gathers its pieces in
# reverse sizes; a torch without the tensor forms (before 1.13: _reduce_scatter_base); no rank
# skips the all_reduce in Part 5.
COLLECTIVES = """
import torch.distributed as dist
from lecture14 import rank_ops
_run = module.run_collective
def _one_rank_wrong(name, x, root=0):
    before, after = _run(name, x, root)
    wrong = root if name in ("gather", "reduce") else dist.get_world_size() - 1
    if after is not None and dist.get_rank() == wrong:
        after = after + 1
    return before, after
module.run_collective = _one_rank_wrong
rank_ops.reduce_copy = lambda x, dst, op, _copy=rank_ops.reduce_copy: _copy(x, dst, dist.ReduceOp.SUM)
del dist.reduce_scatter_tensor, dist.all_gather_into_tensor
""" + edited("lecture14.rank_ops", "allreduce_two_routes",
             ("split_sizes(x.numel(), world_size))", "split_sizes(x.numel(), world_size)[::-1])")) + edited(
    "script", "skip_worker", ("if rank != world_size - 1:", "if rank != world_size:"))

MAX_FOR_SUM = """
module.CALLS["all-reduce"] = lambda inp, out: module.dist.all_reduce(out, op=module.dist.ReduceOp.MAX)
"""

MUTATIONS_01_02 = [
    Mutation("a rank's result wrong, reduce's op dropped, the split misgathered, no skip, an old torch's API",
             P01, COLLECTIVES,
             ("--quick",), rows=("CS-coll-api", "CS-coll-reduce-op", "CS-coll-all-means-every-rank",
                                 "CS-coll-reduce-root", "CS-coll-shape-broadcast", "CS-coll-shape-scatter",
                                 "CS-coll-shape-gather", "CS-coll-shape-reduce", "CS-coll-shape-all-gather",
                                 "CS-coll-shape-reduce-scatter", "CS-coll-shape-all-reduce", "CS-coll-skip",
                                 "CS-ring-split")),
    Mutation("the benchmark's all-reduce takes the MAX", P02, MAX_FOR_SUM, ("--quick", "--max-bytes", "4KiB"),
             rows=("CS-bench-correct",)),
]

MUTATIONS = MUTATIONS_08 + MUTATIONS_05 + MUTATIONS_01_02


@pytest.mark.parametrize("m", [m for m in MUTATIONS if not m.covered_by], ids=lambda m: m.test_id)
def test_the_mutation_makes_its_checks_fail(tmp_path: Path, m: Mutation) -> None:
    run(tmp_path, m)
