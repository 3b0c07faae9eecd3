"""Every check can fail: data parallelism (lecture14/05, lecture15/01 02 04, MyDDP, the handbook's details).

Each entry of MUTATIONS breaks one thing a check or an observed row exists to catch (tests/mutation.py
says how they are written). The "= one process" checks judge the trained weights against how far they
moved in one process (Report.check_trained); their mutation is the one of tests/common/test_output.py:
the ranks' learning rate (or an engine's gradient) 1.001×, applied at the default and at the setting
that moves the weights least of those the script accepts, where it must still fail (the world size
moves nothing in one process: the runs use 2 ranks):

    01_ddp_basics    --steps 1 --lr 2e-8    the weights move 4.6e-9 (--lr 1e-8, 2.3e-9, is refused:
                                            under 3.6e-9 round-off would be 1e-6 of the movement)
    04_details       --steps 1              0.02 at any setting (its learning rate is fixed)
    my_ddp_check     --steps 1 --batch 4096 0.00095 (larger batches average the random labels away,
                                            to 7.5e-4 at 10^5); the handbook's float32 check (< 1e-6)
                                            passes the wrong engines there
    05_data_parallel --quick                5 steps: 0.08 to 0.24 over seeds and world sizes

Rows whose value is the same comparison as a self-check ("MyDDP = one process, max |Δparam| < 1e-6")
cannot differ in a run that ends well: their mutation fails the check, and
test_a_failed_run_shows_its_rows_differing checks both, the failed checks and the rows decided
"differs" in the part's table before the run ends (covered_by names it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import PATCHED, python
from mutation import ROOT, Mutation, run

# what a failed check_trained says once step 1 is not compared: only the trained weights differ,
# by about the 1e-3 of the drift (1e-4 … 9e-3), not by round-off
DRIFTED = r"against one process: trained weights \S+ = [1-9]\.\de-0[34] × the \S+ they moved > 1e-06"


# ---- lecture 15, 01: broadcast at construction, training = one process -----------------------------
LR_DRIFT_01 = """
worker = module.training_worker
def drifting(rank, world_size, n, steps, lr):
    return worker(rank, world_size, n, steps, lr * 1.001)   # the ranks' SGD: one process keeps --lr
module.training_worker = drifting
"""

LATE_BROADCAST_AND_ONE_REPLICA_ROUNDED = """
import torch.distributed as dist
ddp_class = module.DDP
def late_broadcast(model, **kwargs):
    ddp = ddp_class(model, init_sync=False, **kwargs)   # rank 0's parameters come at the first forward
    def sync_once(wrapper, inputs):
        for p in wrapper.module.parameters():
            dist.broadcast(p.data, src=0)
        handle.remove()
    handle = ddp.register_forward_pre_hook(sync_once)
    return ddp
module.DDP = late_broadcast
worker = module.training_worker
def rank_one_rounds_otherwise(rank, world_size, n, steps, lr):
    # rank 1's step differs in the last bits (1e-9 of lr): within round-off of one process, not identical
    return worker(rank, world_size, n, steps, lr * (1 + 1e-9) if rank == 1 else lr)
module.training_worker = rank_one_rounds_otherwise
"""

# ---- lecture 15, 02: buckets recorded from real DDP -------------------------------------------------
SIZED_FIRST_ITERATION_AND_REVERSED_USE = """
import sys
import torch
from torch.nn.parallel import distributed
def inverted(self, static_graph, find_unused_parameters):
    # the first-iteration rule inverted: one bucket only with find_unused_parameters, sized otherwise
    if find_unused_parameters:
        return [sys.maxsize], []
    return [self.first_bucket_bytes_cap, self.bucket_bytes_cap], []
distributed._BucketCapacityConfig.compute_bucket_size_limits = inverted
class UsedLastToFirst(torch.nn.Sequential):
    def forward(self, x):   # layer 0 runs last, so its gradients are ready first
        for layer in reversed(self):
            x = layer(x)
        return x
stack = module.linear_stack
module.linear_stack = lambda: UsedLastToFirst(*stack())
"""

# ---- lecture 15, 04: no_sync, unused parameters, buffers --------------------------------------------
LR_DRIFT_04 = """
worker = module.no_sync_worker
def drifting(*args):
    module.LR *= 1.001      # in this rank only: the parent's one process keeps LR
    return worker(*args)
module.no_sync_worker = drifting
"""

DDP_DETAILS_OTHERWISE = """
import torch
import torch.distributed as dist
accumulate = module.accumulate
def backward_only(ddp, mode, xs, ys):   # no_sync wraps the backward alone, also where it should not
    return accumulate(ddp, "backward" if mode == "forward" else mode, xs, ys)
module.accumulate = backward_only
worker = module.no_sync_worker
def rank_one_rounds_otherwise(rank, *args):
    if rank == 1:
        module.LR *= 1 + 1e-9       # rank 1's step differs in the last bits: within round-off only
    return worker(rank, *args)
module.no_sync_worker = rank_one_rounds_otherwise
def summing(state, bucket):         # a comm hook that forgets DDP's division by the world size
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])
def stale_buffers(saved):
    def hook(wrapper, inputs):      # broadcasts the buffers as they were at construction
        for buffer, old in zip(wrapper.module.buffers(), saved):
            buffer.copy_(old)
    return hook
ddp_class = module.DDP
def other_ddp(model, **kwargs):
    kwargs.setdefault("find_unused_parameters", True)
    batch_norm = isinstance(model, torch.nn.Sequential) and isinstance(model[0], torch.nn.BatchNorm1d)
    if batch_norm:
        kwargs["broadcast_buffers"] = False
    ddp = ddp_class(model, **kwargs)
    if isinstance(model, module.Branchy):
        ddp.register_comm_hook(None, summing)
    if batch_norm:
        ddp.register_forward_pre_hook(stale_buffers([b.clone() for b in model.buffers()]))
    return ddp
module.DDP = other_ddp
def touching_forward(self, x, use_b):
    h = self.a(x) + 0 * self.never(x)
    return (h + self.b(x) if use_b else h).pow(2).sum()
module.Branchy.forward = touching_forward
buffers_worker = module.buffers_worker
module.buffers_worker = lambda rank, world_size: buffers_worker(0, world_size)   # rank 0's data everywhere
"""

# ---- the handbook: MyDDP and its details ------------------------------------------------------------
VIEWS_OTHERWISE = """
from lecture15.my_ddp import MyDDP
make = module.ddp
module.ddp = lambda cfg, **options: make(cfg, **{k: v for k, v in options.items()
                                               if k != "gradient_as_bucket_view"})
finish = MyDDP.finish_gradient_sync
def leave_views(self):
    finish(self)
    for bucket in self.buckets:
        for p, view in zip(bucket.params, bucket.views):
            p.grad = view   # .grad a view of the flat buffer: no copy
MyDDP.finish_gradient_sync = leave_views
"""

ENGINES_DRIFT = """
import torch.distributed as dist
from lecture15.my_ddp import MyDDP
init = MyDDP.__init__
def drifting_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self.world = self.world / 1.001          # MyDDP's averaged gradient 1.001x
MyDDP.__init__ = drifting_init
def drifting_allreduce(seen, bucket):        # and PyTorch DDP's, through the script's comm hook
    seen.append(bucket.index())
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].div_(dist.get_world_size() / 1.001))
module.recording_allreduce = drifting_allreduce
"""

ACCUMULATION_LOST = """
import contextlib
import types
import torch
from torch.nn.parallel import DistributedDataParallel
def before_accumulation(self, hook):   # the hook sees this backward's gradient, not the accumulated .grad
    return self.register_hook(lambda grad: hook(types.SimpleNamespace(grad=grad)))
torch.Tensor.register_post_accumulate_grad_hook = before_accumulation
no_sync = DistributedDataParallel.no_sync
@contextlib.contextmanager
def losing(self):
    with no_sync(self):
        yield
    self.module.zero_grad()            # the micro-batch accumulated under no_sync is dropped
DistributedDataParallel.no_sync = losing
"""

REPLICAS_ROUNDED_AND_NO_SYNC_IGNORED = """
import contextlib
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from lecture15.my_ddp import MyDDP
finish = MyDDP.finish_gradient_sync
def next_float_finish(self):
    if dist.get_rank() % 2 and isinstance(self.world, int):   # odd ranks: W one unit in the last place up
        world = torch.tensor(float(self.world), dtype=self.buckets[0].flat.dtype)
        self.world = torch.nextafter(world, world + 1)
    finish(self)
MyDDP.finish_gradient_sync = next_float_finish
DistributedDataParallel.no_sync = lambda self: contextlib.nullcontext()
"""

HANDBOOKS_HINT = """
from lecture15.my_ddp import MyDDP
forward, ready = MyDDP.forward, MyDDP._on_grad_ready
def hinted_forward(self, *args, **kwargs):
    self._sync_buffers_next = True       # buffers broadcast at every forward
    out = forward(self, *args, **kwargs)
    self._sync_this_backward = True      # the handbook's hint: the hooks read no_sync themselves
    return out
def hinted_ready(self, b_index, slot, param):
    if self._no_sync:
        return
    return ready(self, b_index, slot, param)
MyDDP.forward, MyDDP._on_grad_ready = hinted_forward, hinted_ready
"""

# ---- lecture 14, 05: HW5's functions on real ranks ----------------------------------------------------
LR_DRIFT_05 = """
worker = module.hw5_worker
def drifting(rank, *args):
    if {ranks}:
        module.LR *= 1.001      # in this rank only: the parent's one-process runs keep LR
    return worker(rank, *args)
module.hw5_worker = drifting
"""

GLOBAL_SHUFFLE_AND_ZERO_GRADS = """
import random
import torch
from common.costmodel.collectives import split_sizes
from lecture14 import data_parallel as dp
def globally_seeded(size, world_size, rank, seed):   # seeds and shuffles the global generator
    order = list(range(size))
    random.seed(seed)
    random.shuffle(order)
    sizes = split_sizes(size, world_size)
    return order[sum(sizes[:rank]):sum(sizes[:rank + 1])]
dp.partition_indices = globally_seeded
average = dp.average_gradients
def zeros_for_none(model):   # a parameter without a gradient gets zeros, all-reduced with the rest
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    average(model)
dp.average_gradients = zeros_for_none
"""

MEANS_BY_SUMMING = """
dist = module.dist
checks = module.average_checks
def summing_checks(rank, device):
    average = module.dp.average_gradients
    def sum_only(model):         # average_gradients without the division by the world size
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
    module.dp.average_gradients = sum_only
    try:
        return checks(rank, device)
    finally:
        module.dp.average_gradients = average
module.average_checks = summing_checks
all_reduce = dist.all_reduce
def avg_sums(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):   # a gloo whose AVG is a SUM
    return all_reduce(tensor, op=dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op, group=group,
                      async_op=async_op)
dist.all_reduce = avg_sums
"""

GLOO_WITHOUT_AVG = """
from common.launch import capabilities
capabilities._probe = lambda: {"avg": "Cannot use ReduceOp.AVG with Gloo", "reduce_scatter": None}
"""

FAILED_RUN = "test_mutations_ddp.py::test_a_failed_run_shows_its_rows_differing"
WEAKER = "test_mutations_ddp.py::test_where_the_handbooks_tolerance_passes_a_wrong_engine"
S01, S02, S04 = "lecture15/01_ddp_basics.py", "lecture15/02_buckets.py", "lecture15/04_details.py"
CHECK, VS_DDP = "lecture15/my_ddp_check.py", "lecture15/my_ddp_vs_ddp.py"
DETAILS, S05 = "lecture15/handbook_details.py", "lecture14/05_data_parallel.py"
QUICK, QUICK_2 = ("--quick",), ("--quick", "--world-size", "2")
LEAST = "at the least movement accepted"
AVG_SITES = ("average_gradients on {w} ranks", "all_reduce(op=ReduceOp.AVG)")

MUTATIONS = [
    # 01: Part 2's check at its default (the world size moves nothing) and where the weights move
    # least; its two observed rows
    Mutation("the ranks' learning rate 1.001x", S01, LR_DRIFT_01, QUICK_2,
             sites=("DDP on {args.world_size} ranks after",),
             fails=rf"error: DDP on 2 ranks after 10 steps {DRIFTED}$"),
    Mutation(f"the ranks' learning rate 1.001x, {LEAST}", S01, LR_DRIFT_01,
             (*QUICK_2, "--steps", "1", "--lr", "2e-8"), sites=("DDP on {args.world_size} ranks after",),
             fails=rf"error: DDP on 2 ranks after 1 steps {DRIFTED}$"),
    Mutation("rank 0's parameters broadcast at the first forward, not in DDP(); rank 1's step rounded "
             "otherwise", S01, LATE_BROADCAST_AND_ONE_REPLICA_ROUNDED, QUICK_2,
             rows=("L15-1.4-identical-after-wrap", "L15-1.4-identical-after-training")),
    # 02: what real DDP did with its buckets (no self-check)
    Mutation("DDP's first-iteration bucketing inverted (sized unless find_unused_parameters); the layers "
             "used last to first", S02, SIZED_FIRST_ITERATION_AND_REVERSED_USE, QUICK,
             rows=("L15-2.2-first-iteration-one-bucket", "L15-2.2-bucket0-last-layer", "L15-2.2-rule",
                   "L15-2.2-rebuild-conditions", "L15-2.2-rebuild-conditions-static-graph")),
    # 04: Part 1's check (its default is --steps 3, which --quick shortens); the observed rows
    Mutation("the ranks' learning rate 1.001x", S04, LR_DRIFT_04, ("--quick", "--steps", "3"),
             sites=("no_sync accumulation on {args.world_size} ranks",),
             fails=rf"error: no_sync accumulation on 2 ranks \(3 placements\) {DRIFTED}$"),
    Mutation(f"the ranks' learning rate 1.001x, {LEAST}", S04, LR_DRIFT_04, ("--quick", "--steps", "1"),
             sites=("no_sync accumulation on {args.world_size} ranks",),
             fails=rf"error: no_sync accumulation on 2 ranks \(3 placements\) {DRIFTED}$"),
    Mutation("no_sync around the backward only; rank 1's step rounded otherwise; DDP finds unused "
             "parameters by default, sums a branchy model's buckets, broadcasts stale buffers; the unused "
             "branch touched (0x); every rank reads rank 0's data", S04, DDP_DETAILS_OTHERWISE, QUICK,
             rows=("L15-4.1-only-forward-saves", "L15-4.1-same-result", "L15-4.2-error",
                   "L15-4.2-partial-use", "L15-4.2-grad-none", "L15-4.2-bitmap-allreduce",
                   "L15-4.3-buffers-differ", "L15-4.3-rank0-wins")),
    # the handbook: its details, MyDDP's checks (two engines per call) and MyDDP against DDP's rules
    Mutation("DDP ignores gradient_as_bucket_view; MyDDP leaves each .grad a view of its flat buffer",
             DETAILS, VIEWS_OTHERWISE, ("--steps", "1"), rows=("HB-cat-copies", "HB-bucket-view-no-copy")),
    Mutation("MyDDP's and PyTorch DDP's averaged gradients 1.001x", CHECK, ENGINES_DRIFT, QUICK,
             sites=("{who}, {args.steps} steps on",),
             fails=rf"error: MyDDP, 3 steps on 2 ranks, {DRIFTED} \(and 3 more\)$",
             rows=("HB-ddp-equals-single-process", "HB-official-equals-single-process"),
             covered_by=FAILED_RUN),
    Mutation(f"MyDDP's and PyTorch DDP's averaged gradients 1.001x, {LEAST}", CHECK, ENGINES_DRIFT,
             ("--quick", "--steps", "1", "--batch", "4096"), sites=("{who}, {args.steps} steps on",),
             fails=rf"error: MyDDP, 1 steps on 2 ranks, {DRIFTED} \(and 3 more\)$",
             covered_by=WEAKER),
    Mutation("accumulation loses a micro-batch: the post-accumulate hook fires before accumulation "
             "(MyDDP), DDP's no_sync micro-batch dropped", CHECK, ACCUMULATION_LOST, QUICK,
             sites=("{who}'s no_sync accumulation",),
             fails=r"error: MyDDP's no_sync accumulation, 3 steps, against one process: trained weights .* "
                   r"\(and 1 more\)$",
             rows=("HB-no-sync-equals-full-batch", "HB-hook-after-accumulation"), covered_by=FAILED_RUN),
    Mutation("odd ranks divide by the float after W (replicas apart by round-off); DDP's no_sync does "
             "nothing", CHECK, REPLICAS_ROUNDED_AND_NO_SYNC_IGNORED, QUICK,
             rows=("HB-replicas-identical", "HB-no-sync-ddp-skips")),
    Mutation("the handbook's hint: MyDDP's hooks read no_sync, buffers broadcast at every forward", VS_DDP,
             HANDBOOKS_HINT, (), sites=("MyDDP's no_sync acts where", "MyDDP broadcasts buffers as"),
             fails=r"error: MyDDP's no_sync acts where DDP's does \(placements that differ\): forward only "
                   r"\(and \d+ more\)$", covered_by=FAILED_RUN),
    # lecture 14, 05: HW5's functions on real ranks (rank 0 drifts too: it averages rank 1's gradients)
    Mutation("rank 1's learning rate 1.001x", S05, LR_DRIFT_05.format(ranks="rank == 1"), QUICK_2,
             sites=("vs rank 0",),
             fails=r"error: HW5 on 2 ranks, rank 1 vs rank 0: max \|difference\| \S+, above the tolerance 0 "
                   r"\(and 2 more\)$"),
    Mutation("the ranks' learning rate 1.001x", S05, LR_DRIFT_05.format(ranks="True"), ("--world-size", "2"),
             sites=("HW5 on {w} ranks ({what})",),
             fails=rf"error: HW5 on 2 ranks \(shards simulated\) {DRIFTED} \(and 1 more\)$"),
    Mutation(f"the ranks' learning rate 1.001x, {LEAST}", S05, LR_DRIFT_05.format(ranks="True"), QUICK_2,
             sites=("HW5 on {w} ranks ({what})",),
             fails=rf"error: HW5 on 2 ranks \(shards simulated\) {DRIFTED} \(and 1 more\)$"),
    Mutation("HW5's shuffle on the global generator; zeros all-reduced for grad None", S05,
             GLOBAL_SHUFFLE_AND_ZERO_GRADS, QUICK_2,
             rows=("L14-4.1-partition-no-communication", "L14-4.1-skip-none-grads")),
    Mutation("means by summing: average_gradients without ÷ W, gloo's AVG a SUM", S05, MEANS_BY_SUMMING,
             QUICK_2, sites=AVG_SITES,
             fails=r"error: average_gradients on 2 ranks vs their mean gradient here: max \|difference\| "
                   r"\S+, above the tolerance 0 \(and 1 more\)$",
             rows=("L14-4.1-sum-then-divide",), covered_by=FAILED_RUN),
    Mutation("gloo without ReduceOp.AVG (as before 2025): the row agrees", S05, GLOO_WITHOUT_AVG, QUICK_2,
             rows=("L14-4.1-gloo-no-avg",),
             covered_by="test_mutations_ddp.py::test_the_gloo_avg_row_follows_what_gloo_does"),
]


@pytest.mark.parametrize("m", [m for m in MUTATIONS if not m.covered_by], ids=lambda m: m.test_id)
def test_the_mutation_makes_its_checks_fail(tmp_path: Path, m: Mutation) -> None:
    run(tmp_path, m)


# Records the claims and the failed checks when the run ends, whether it fails or not: Report.finish
# compares the last part, then raises for a failed check before any --json is written. Nothing of
# what the run decides or prints changes.
RECORDING = """
import json
from common import output
finish = output.Report.finish
def recording_finish(self):
    try:
        return finish(self)
    finally:
        with open({path!r}, "w", encoding="utf-8") as out:
            json.dump({{"claims": {{c.ref: c.status for c in self.claims}}, "failures": self.failures}}, out)
output.Report.finish = recording_finish
"""


def _recorded_run(tmp_path: Path, m: Mutation) -> tuple[object, dict]:
    """`m` applied, the run's result and what its Report decided (claims by row, failed checks)."""
    record = tmp_path / "recorded.json"
    script = ROOT / "code" / m.script
    wrapper = tmp_path / "mutated.py"
    wrapper.write_text(PATCHED.format(code=str(ROOT / "code"), argv0=script.name, args=list(m.args),
                                      script=str(script), patch=m.patch + RECORDING.format(path=str(record))),
                       encoding="utf-8")
    proc = python(wrapper, timeout=240)
    assert record.is_file(), proc.stderr[-3000:]
    return proc, json.loads(record.read_text(encoding="utf-8"))


@pytest.mark.parametrize("m", [m for m in MUTATIONS if m.covered_by == FAILED_RUN], ids=lambda m: m.test_id)
def test_a_failed_run_shows_its_rows_differing(tmp_path: Path, m: Mutation) -> None:
    """The run ends as a failed self-check does (exit 1, one line naming the first), every check
    the mutation names failed, and every row it lists was decided "differs" on the way."""
    proc, recorded = _recorded_run(tmp_path, m)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert re.search(m.fails, lines[0]), lines[0]
    more = re.search(r"\(and (\d+) more\)$", lines[0])
    assert len(recorded["failures"]) == 1 + (int(more[1]) if more else 0), recorded["failures"]
    unfailed = [site for site in m.sites
                if not any(_phrase(site).search(f) for f in recorded["failures"])]
    assert not unfailed, (unfailed, recorded["failures"])
    wrong = {row: recorded["claims"].get(row) for row in m.rows}
    assert all(status == "differs" for status in wrong.values()), wrong


def _phrase(site: str) -> re.Pattern:
    """A check's first argument as written (an f-string's fields as wildcards), as a pattern of its text."""
    return re.compile(".*?".join(re.escape(part) for part in re.split(r"\{[^}]*\}", site)))


def test_the_gloo_avg_row_follows_what_gloo_does(tmp_path: Path) -> None:
    """'gloo has no AVG' is observed, not assumed: a gloo without AVG (as before 2025) makes the row
    agree with the notes, and the AVG check is not run. (torch 2.13's gloo has AVG: unmutated, the
    row differs, test_05_data_parallel.py::test_average_gradients_claims_from_real_ranks.)"""
    m = next(m for m in MUTATIONS if m.patch == GLOO_WITHOUT_AVG)
    proc, recorded = _recorded_run(tmp_path, m)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert recorded["claims"]["L14-4.1-gloo-no-avg"] == "agrees"
    assert "check: all_reduce(op=ReduceOp.AVG)" not in proc.stdout   # the check lines say which checks ran
    assert "check: average_gradients on 2 ranks vs their mean gradient here: no difference: ok" \
        in proc.stdout


def test_where_the_handbooks_tolerance_passes_a_wrong_engine(tmp_path: Path) -> None:
    """One step on 4096 samples: the weights move 0.00095, so engines 1.001x off are 9.5e-7 from one
    process, inside the handbook's float32 "max |Δparam| < 1e-6" (its rows agree); the float64 checks,
    judged against the movement, fail the run."""
    m = next(m for m in MUTATIONS if m.covered_by == WEAKER)
    proc, recorded = _recorded_run(tmp_path, m)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and re.search(m.fails, lines[0]), proc.stderr[-3000:]
    handbooks = ("HB-ddp-equals-single-process", "HB-official-equals-single-process",
                 "HB-no-sync-equals-full-batch")
    assert all(recorded["claims"][row] == "agrees" for row in handbooks), recorded["claims"]
