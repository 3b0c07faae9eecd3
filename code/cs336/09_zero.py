"""CS336 lecture 8, ZeRO (ZeRO：在数据并行中消除冗余): ZeroRedundancyOptimizer and FSDP2 on real ranks.

    python code/cs336/09_zero.py [--world-size 4] [--layers 6] [--width 130] [--batch 32] [--steps 3]
    torchrun --standalone --nproc-per-node=4 code/cs336/09_zero.py

The notes' deep MLP (cs336/mlp.py) trained with Adam on --world-size ranks (gloo, CPU, float64),
three ways: ZeroRedundancyOptimizer(Adam) under DDP (ZeRO-1), FSDP2's fully_shard on every layer
and then the root (ZeRO-3), and the same with reshard_after_forward=False (ZeRO-2's traffic).
Part 1 compares each with Adam in one process after every step. Part 2 weighs each rank's
parameters, gradients and Adam state from its local shards against the engine's own split
(ZeroRedundancyOptimizer: whole parameters, greedily; FSDP2: dim 0 cut like torch.chunk) and
against cs336/ledger.py's ZeRO table (04_memory.py) at the same parameter count and world size:
equal over all ranks, uneven per rank, and why. Part 3 counts the collectives of a step
(common.dist_count, FSDP2's included: what the process group was handed) against
costmodel_steps.zero_step_collectives, the notes' ZeRO communication, and shows what gloo ran for them (its
profiler spans, cs336.gloo_ran): FSDP2's reduce-scatters run here as all-reduces of the padded
buffer. Trained weights off one process by more than a share of how far they moved end the run in
exit 1, in one line naming the engine; a byte off the split or a collective off the formula is a
row of engines.toml that differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse

import torch
import torch._dynamo  # noqa: F401  (DDP's constructor imports it: once here, not once per forked rank)
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from common.cli import make_parser
from common.costmodel.collectives import algorithm, padded_shard_elements, split_sizes
from common.costmodel.steps import zero_step_bytes_per_device, zero_step_collectives
from common.dist_count import counting
from common.error_types import UsageError
from common.launch import launch
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import MOVED_SHARE
from common.units import fmt_bytes
from cs336 import gloo_ran, ledger, mlp
from cs336.engine_probes import calls_text, collectives_by_kind, local_elements

RING_ALL_GATHER = algorithm("ring all-gather")

ELEM = 8                # float64: parameters and gradients 8 B an element, Adam's m and v 16 B
ENGINES = {"ZeRO-1": "ZeroRedundancyOptimizer(Adam) under DDP",
           "FSDP2": "fully_shard, reshard_after_forward=True (ZeRO-3)",
           "FSDP2-no-reshard": "fully_shard, reshard_after_forward=False"}
SHORT = {"FSDP2-no-reshard": "no reshard"}   # the bytes table's engine column, within the page
LEDGER_STAGE = {"ZeRO-1": "ZeRO-1", "FSDP2": "ZeRO-3", "FSDP2-no-reshard": "ZeRO-3"}
# Each engine's values under the names the rows of cs336/engines.toml compare, written out so that grep
# finds the row and the line that records it: the bytes each rank holds, measured and by the engine's
# own rule, and all ranks' together, measured and by the ledger (Part 2) ...
MEMORY_VALUES = {"ZeRO-1": ("ZeRO-1_bytes", "ZeRO-1_rule_bytes", "ZeRO-1_sum", "ZeRO-1_ledger_sum"),
                 "FSDP2": ("FSDP2_bytes", "FSDP2_rule_bytes", "FSDP2_sum", "FSDP2_ledger_sum"),
                 "FSDP2-no-reshard": ("FSDP2-no-reshard_bytes", "FSDP2-no-reshard_rule_bytes",
                                      "FSDP2-no-reshard_sum", "FSDP2-no-reshard_ledger_sum")}
# ... and a step's collectives, counted and by the cost model, as gloo should run them and as it did (Part 3)
COLLECTIVE_VALUES = {"ZeRO-1": ("ZeRO-1_counted", "ZeRO-1_formula", "ZeRO-1_wire_expected", "ZeRO-1_wire"),
                     "FSDP2": ("FSDP2_counted", "FSDP2_formula", "FSDP2_wire_expected", "FSDP2_wire"),
                     "FSDP2-no-reshard": ("FSDP2-no-reshard_counted", "FSDP2-no-reshard_formula",
                                          "FSDP2-no-reshard_wire_expected", "FSDP2-no-reshard_wire")}
# CPU time here (bench/bench_costs.py, 2 cores): imports and the one-process reference, the W² gloo
# start-up, every engine's steps (FSDP2's 3L collectives a step on W ranks dominate).
COST = Cost([Term("1", 9.0, lambda a: 1), Term("W²", 0.05, lambda a: a.world_size**2),
             Term("W·L·steps", 0.03, lambda a: a.world_size * a.layers * a.steps),
             Term("W·L·steps·(d/100)²", 0.005,
                  lambda a: a.world_size * a.layers * a.steps * (a.width / 100) ** 2)],
            memory=lambda a: ELEM * (a.world_size + 2) * 6 * a.layers * a.width * (a.batch + a.width))


def main() -> None:
    parser = make_parser(__doc__, world_size=4, layers=6, width=130, batch=32, steps=3, seed=0, real=True,
                         cost=COST,
                         context={"width": "d of every layer: 130 splits unevenly on 4 ranks",
                                  "layers": "6 share unevenly on 4 ranks", "steps": "Adam steps",
                                  "seed": "weights and data"})
    args = parser.parse_args()
    check_args(args)
    params, x = (mlp.make_params(args.layers, args.width, args.seed),
                 mlp.make_batch(args.batch, args.width, args.seed))
    ref = mlp.train_one_process(params, x, args.steps, "adam")   # what every engine must equal
    ref.refuse_still_weights(f"--layers {args.layers} --width {args.width}")
    rep = Report(__file__, "ZeroRedundancyOptimizer and FSDP2 beside the ledger's ZeRO (CS336 lecture 8)",
                 args)
    rep.line(f"  {args.layers} layers x = gelu(x @ W), W {args.width}×{args.width}, batch {args.batch}, "
             f"loss = mean(x²), float64, Adam;\n  {args.world_size} real ranks (gloo), {args.steps} steps")
    for engine, what in ENGINES.items():
        rep.line(f"  {engine}: {what}")
    ranks = launch(zero_worker, args.world_size, params, x, args.steps, timeout_s=args.timeout_s)
    rep.part(1, "each engine against Adam in one process, after every step")
    part1_one_process(rep, args, ranks, ref)         # every step = Adam in one process
    rep.part(2, "bytes per rank from its local shards, against each engine's rule and the notes' ledger")
    part2_memory(rep, args, ranks)                   # local shards vs the ledger: greedy, torch.chunk
    rep.part(3, "collectives per step, counted on the ranks, against the cost model's ZeRO traffic")
    part3_collectives(rep, args, ranks)              # AG / RS / AR counted vs the notes' ZeRO traffic
    rep.finish()


# ---- rank code ----------------------------------------------------------------------------------
class Layer(nn.Module):
    """x = gelu(x @ W): one layer of the deep MLP, its own FSDP2 unit."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mlp.forward([self.w], x)


def train(engine: str, rank: int, k: int, params: list[torch.Tensor], x: torch.Tensor, steps: int) -> dict:
    model = nn.Sequential(*[Layer(w) for w in params])
    if engine == "ZeRO-1":
        run = DistributedDataParallel(model)
        run.register_comm_hook(None, allreduce_hook)   # DDP's all-reduce through Python, so it is counted
        opt = ZeroRedundancyOptimizer(run.parameters(), optimizer_class=torch.optim.Adam, lr=mlp.LR_ADAM)
    else:
        for layer in model:                            # a unit per layer, then the root
            fully_shard(layer, reshard_after_forward=engine == "FSDP2")
        run = fully_shard(model, reshard_after_forward=engine == "FSDP2")
        opt = torch.optim.Adam(model.parameters(), lr=mlp.LR_ADAM)
    mine = x.tensor_split(k)[rank]
    res: dict = {"params_after": []}
    for step in range(steps):
        opt.zero_grad()
        # the last step's counts are kept, and what gloo ran in it (the profiler's spans: that step only)
        with counting() as counts, gloo_ran.watching(on=step == steps - 1) as ran:
            out = run(mine)
            held_forward = local_elements(model.parameters())  # between forward and backward
            # my slice's share of the batch's mean, × k: DDP and FSDP2 average the gradients over ranks
            (out.square().sum() * k / x.numel()).backward()
            opt.step()
        # FSDP2: full_tensor() all-gathers the shards (outside the counted block)
        full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
        res["params_after"].append([p.detach().clone() for p in full])
    state = opt.optim.state if engine == "ZeRO-1" else opt.state   # ZeRO-1: the local Adam over my partition
    return res | {"params": local_elements(model.parameters()), "held_forward": held_forward,
                  "grads": local_elements(p.grad for p in model.parameters()),
                  "state": local_elements(v for s in state.values() for key, v in s.items() if key != "step"),
                  "calls": [(name, nbytes) for name, _, nbytes in counts.tensors], "unseen": counts.unseen,
                  "ran": ran.by_kind(k)}


def zero_worker(rank: int, world_size: int, params: list[torch.Tensor], x: torch.Tensor, steps: int) -> dict:
    return {engine: train(engine, rank, world_size, params, x, steps) for engine in ENGINES}


# ---- what the engines' rules and the ledger predict ----------------------------------------------
def greedy_partition(sizes: list[int], k: int) -> list[int]:
    """ZeroRedundancyOptimizer's rule: whole parameters, largest first, each to the least-loaded rank."""
    load = [0] * k
    for size in sorted(sizes, reverse=True):
        load[load.index(min(load))] += size
    return load


def chunk_rows(rows: int, k: int) -> list[int]:
    """FSDP2's dim-0 split, torch.chunk's: ceil(rows/k) each until the rows run out (not tensor_split's)."""
    size = -(-rows // k)
    return [max(0, min(size, rows - r * size)) for r in range(k)]


def rule_elements(engine: str, args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """(parameters, gradients, Adam m + v) elements on each rank by the engine's own splitting rule."""
    k, n, d = args.world_size, args.layers * args.width**2, args.width
    if engine == "ZeRO-1":   # parameters and gradients whole; m and v of the matrices the rank owns
        return [(n, n, 2 * owned) for owned in greedy_partition([d * d] * args.layers, k)]
    return [(args.layers * rows * d, args.layers * rows * d, 2 * args.layers * rows * d)
            for rows in chunk_rows(d, k)]


def ledger_elements(stage: str, n: int, k: int, rank: int) -> tuple[int, int, int]:
    """(parameters, gradients, Adam m + v) elements the ledger's `stage` leaves on `rank`: an entry
    ZeRO shards is rank's even slice of the flat buffer (split_sizes), else whole."""
    shard = split_sizes(n, k)[rank]
    p, g, m = (shard if entry in ledger.SHARDED[stage] else n
               for entry in ("fp16 parameters", "fp16 gradients", "Adam m (fp32)"))
    return p, g, 2 * m


def row_bytes(params: int, grads: int, state: int) -> list[int]:
    """Bytes of (parameters, gradients, Adam m + v, all) from elements; `state` counts m and v."""
    return [ELEM * params, ELEM * grads, ELEM * state, ELEM * (params + grads + state)]


def joined(values: list) -> str:  # type: ignore[type-arg]
    return " ".join(v if isinstance(v, str) else f"{v:,}" for v in values)


# ---- the parts: the parent compares and prints --------------------------------------------------
def part1_one_process(rep: Report, args: argparse.Namespace, ranks: list[dict], ref: mlp.Reference) -> None:
    gaps = {e: [max(mlp.max_abs_diff(r[e]["params_after"][s], want) for r in ranks)
                for s, want in enumerate(ref.params_after)] for e in ENGINES}
    rows = []
    for engine in ENGINES:
        mark, off = rep.mark_trained(f"{engine} against one process",
                                     rep.value(f"{engine}_max_diff", max(gaps[engine])), ref.moved)
        rows.append([engine, *gaps[engine], off, mark])
    rep.table(["engine", *(f"after step {s + 1}" for s in range(args.steps)),
               f"÷ the {ref.moved:.2g} they moved", f"≤ {MOVED_SHARE:g}"], rows, name="vs_one_process")
    rep.note("the largest |difference| of every rank's whole parameters (FSDP2: full_tensor() of its "
             f"shards) from torch.optim.Adam (lr {mlp.LR_ADAM:g}) on the whole batch in one process, and "
             "the last as a share of how far the weights moved; each rank's loss is its slice's share of "
             "the batch's mean × W, since DDP and FSDP2 average gradients over W ranks")


def part2_memory(rep: Report, args: argparse.Namespace, ranks: list[dict]) -> None:
    k, n = args.world_size, args.layers * args.width**2
    rep.line(f"  P = {n:,} parameters on p = {k} ranks; the ledger's ZeRO-1 for ZeRO-1, its ZeRO-3 for "
             "FSDP2")
    rows = []
    for engine in ENGINES:
        stage, rule, mine = LEDGER_STAGE[engine], rule_elements(engine, args), []
        for rank, r in enumerate(ranks):
            got = row_bytes(r[engine]["params"], r[engine]["grads"], r[engine]["state"])
            by_ledger = row_bytes(*ledger_elements(stage, n, k, rank))[3]
            mine.append([SHORT.get(engine, engine), rank, *got, row_bytes(*rule[rank])[3], by_ledger,
                         fmt_bytes(ELEM * r[engine]["held_forward"])])
        sums = [sum(row[c] for row in mine) for c in range(2, 8)]
        total, ledger_total = sums[3], sums[5]
        rows += mine + [[SHORT.get(engine, engine), "all", *sums, ""]]
        measured = [[r[engine][e] for e in ("params", "grads", "state")] for r in ranks]
        for name, value in zip(MEMORY_VALUES[engine], (joined([row_bytes(*m)[3] for m in measured]),
                                                      joined([row_bytes(*e)[3] for e in rule]),
                                                      total, ledger_total)):
            rep.value(name, value)
    rep.table(["engine", "rank", "parameters B", "gradients B", "Adam m+v B", "total B", "by its rule B",
               "by the ledger B", "after forward"], rows, name="bytes")
    z1 = [r["ZeRO-1"] for r in ranks]
    rep.value("zero1_params_grads", joined([ELEM * (r["params"] + r["grads"]) for r in z1]))
    rep.value("ledger_zero1_params_grads", joined([ELEM * sum(ledger_elements("ZeRO-1", n, k, r)[:2])
                                                 for r in range(k)]))
    rep.value("fsdp_after_forward", joined([ELEM * r["FSDP2"]["held_forward"] for r in ranks]))
    rep.value("fsdp_params", joined([ELEM * r["FSDP2"]["params"] for r in ranks]))
    rep.value("no_reshard_after_forward",
              joined([ELEM * r["FSDP2-no-reshard"]["held_forward"] for r in ranks]))
    rep.value("whole_params", joined([ELEM * n] * k))
    part2_note(rep, args)
    rep.compare_with_notes(in_table=True)


def part2_note(rep: Report, args: argparse.Namespace) -> None:
    k, n, d = args.world_size, args.layers * args.width**2, args.width
    greedy, chunks = greedy_partition([d * d] * args.layers, k), chunk_rows(d, k)
    rep.note("float64: 8 B a parameter and a gradient, 16 B of Adam m + v (no fp32 master copy: the "
             "notes' 16 B/param ledger is mixed precision). The ledger cuts the flat buffer evenly; the "
             "engines do not, so ranks differ and only the sums agree: ZeroRedundancyOptimizer gives whole "
             f"matrices ({d * d:,} elements), largest first to the least-loaded rank: {args.layers} on {k} "
             "ranks is "
             f"{' + '.join(str(e // (d * d)) for e in greedy)} matrices of m and v.\n"
             f"FSDP2 cuts every W along dim 0 like torch.chunk: {'/'.join(map(str, chunks))} of {d} rows "
             f"(tensor_split would give {'/'.join(map(str, split_sizes(d, k)))}).\n"
             "'after forward': parameters held between forward and backward: whole without resharding,\n"
             "as in the ledger's ZeRO-2. 05_parallel.py's hand-written ZeRO pads the flat buffer to "
             f"{k}·{padded_shard_elements(n, k):,} elements: "
             f"{fmt_bytes(ledger.optimizer_state_bytes(n, k, 2 * ELEM))} of m + v on every rank")


def formula(stage: str, param_bytes: float, layers: int, per_unit: bool) -> dict[str, tuple[int, float]]:
    """zero_step_collectives per kind; per_unit: FSDP2 communicates a unit (a layer) at a time."""
    out: dict[str, tuple[int, float]] = {}
    for c in zero_step_collectives(stage, param_bytes, layers if stage == "ZeRO-3" else 1):
        calls = c.calls * (layers if per_unit and stage != "ZeRO-3" else 1)
        n, b = out.get(c.kind, (0, 0))
        out[c.kind] = (n + calls, b + c.calls * c.nbytes)
    return out


def as_all_reduces(counted: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    """`counted` with each reduce-scatter an all-reduce of the same buffer: what gloo in torch 2.13 runs
    for them (the rows EN-09-*-wire check that it still does)."""
    out = {kind: v for kind, v in counted.items() if kind != "reduce-scatter"}
    if "reduce-scatter" in counted:
        (c, b), (c2, b2) = counted["reduce-scatter"], out.get("all-reduce", (0, 0))
        out["all-reduce"] = (c + c2, b + b2)
    return out


def gloo_ran_for(kind: str, handed: dict, ran: dict | None) -> str:
    """What gloo ran for the `kind` handed: "as handed", or what ran in its place (calls, bytes)."""
    if ran is None:
        return "not watched"
    missing, extra = gloo_ran.substitutions(handed, ran)
    if kind not in missing and kind not in extra:
        return "as handed"
    if kind in extra:
        return f"{extra[kind][0]:g} more, {fmt_bytes(extra[kind][1])}" if kind in handed else ""
    return " + ".join(f"{c:g} {other}s, {fmt_bytes(b)}" for other, (c, b) in sorted(extra.items())) or "none"


def part3_collectives(rep: Report, args: argparse.Namespace, ranks: list[dict]) -> None:
    k, L, d = args.world_size, args.layers, args.width
    whole, padded = ELEM * L * d * d, ELEM * L * k * chunk_rows(d, k)[0] * d   # FSDP2 pads shards to one size
    # ZeroRedundancyOptimizer: DDP's all-reduce, then each parameter broadcast from its owner (see the note)
    cases = {"ZeRO-1": formula("DDP", whole, L, False) | {"broadcast": (L, whole)},
             "FSDP2": formula("ZeRO-3", padded, L, True),
             "FSDP2-no-reshard": formula("ZeRO-2", padded, L, True)}
    rows = []
    for engine, want in cases.items():
        got = [collectives_by_kind(r[engine]["calls"], k) for r in ranks]
        worst, same = next((g for g in got if g != want), got[0]), all(g == got[0] for g in got)
        ran = ranks[0][engine]["ran"]
        for kind in sorted(set(worst) | set(want)):              # worst: a rank off the formula, if any
            (c, b), (fc, fb) = worst.get(kind, (0, 0)), want.get(kind, (0, 0))
            rows.append([engine, kind, f"{c:g}, {fmt_bytes(b)}", f"{fc:g}, {fmt_bytes(fb)}",
                         gloo_ran_for(kind, got[0], ran), "the same" if same else "DIFFERENT"])
        for name, value in zip(COLLECTIVE_VALUES[engine], (
            calls_text(worst), calls_text(want), gloo_ran.ops_text(as_all_reduces(got[0])),
            gloo_ran.ops_text(ran) if ran is not None else "not watched")):
            rep.value(name, value)
    rep.table(["engine", "collective", "calls, bytes handed", "by the cost model", "gloo ran for them",
               "every rank"], rows, name="collectives")
    unseen = rep.value("unseen", max(r[e]["unseen"] or 0 for r in ranks for e in ENGINES))
    notes_z1 = zero_step_bytes_per_device("ZeRO-1", k, whole)
    ours_z1 = zero_step_bytes_per_device("DDP", k, whole) + RING_ALL_GATHER.busiest_bytes(k, whole)
    rep.value("zero1_over_notes", ours_z1 / notes_z1)
    rep.note("handed: what the process group was handed in the last step (the second rebuilds DDP's "
             "buckets), a call's whole buffer (an all-gather's output); the cost model: the notes' ZeRO "
             f"traffic for the same buffers. FSDP2 pads each W's shards to {chunk_rows(d, k)[0]} rows "
             f"({fmt_bytes(padded)} for {fmt_bytes(whole)} of weights) and talks a unit (a layer) at a "
             "time: ZeRO-3's 2L all-gathers + L reduce-scatters; without resharding one all-gather a unit, "
             "ZeRO-2's RS + AG cut in L. ZeroRedundancyOptimizer keeps DDP's whole all-reduce and then "
             "broadcasts each parameter from its owner: an all-gather's bytes on top, "
             f"{ours_z1 / notes_z1:g}× the ZeRO paper's ZeRO-1 (RS + AG) per rank in the ring model, the "
             "reading of the notes' ZeRO table our rows take. 'gloo ran': its gloo:* profiler spans on "
             "rank 0; gloo here runs a reduce-scatter as an all-reduce of the padded buffer, where NCCL "
             "runs a real one, (p−1)/p·N a rank in the ring model, half of an all-reduce's 2(p−1)/p·N. "
             "DDP's all-reduce is counted through allreduce_hook (its C++ reducer would bypass Python); "
             f"{unseen} operation{'' if unseen == 1 else 's'} ran on the groups that no counting method saw")
    rep.compare_with_notes(in_table=True)


def check_args(args: argparse.Namespace) -> None:
    k = args.world_size
    if k < 2:
        raise UsageError(f"--world-size must be at least 2 (ZeRO shards across ranks), got {k}")
    if args.width < k:
        raise UsageError(f"--width {args.width} < --world-size {k}: FSDP2 needs a row of every W per rank")
    if args.batch < k:
        raise UsageError(f"--batch {args.batch} < --world-size {k}: a sample per rank")
    if args.steps < 3:
        # the counted step is the last; DDP rebuilds its buckets in the second and broadcasts their
        # order from C++, where no counting method sees it
        raise UsageError(f"--steps {args.steps}: at least 3 (Part 3 counts the last step's collectives; "
                         "the second also has DDP's bucket rebuild)")


if __name__ == "__main__":
    run_main(main)
