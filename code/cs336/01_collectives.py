"""CS336 lecture 8 (集合通信：分布式编程的基本积木; Ring all-reduce 的带宽最优性): the seven collectives.

    python code/cs336/01_collectives.py
    python code/cs336/01_collectives.py --world-size 3 --numbers 7 --size 1001B

Part 1 runs the seven on real ranks (gloo on CPU; NCCL where every rank has a GPU) against the
simulator lecture14/collectives.py. Part 2 is the notes' table: shapes from Part 1, per-rank volumes
counted beside costmodel's closed forms and the notes' formulas. Part 3: all-reduce = reduce-scatter
+ all-gather, on the ranks and in bytes, and its lower bound. Part 4: the three easy-to-confuse
points, each run. Part 5: a rank skips a collective (its own launch, failing after a short timeout).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/ goes first
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
from functools import reduce as fold

import numpy as np
import torch
import torch.distributed as dist

from common.cli import make_parser
from common.collectives_real import run_collective
from common.costmodel.collectives import COLLECTIVES, split_sizes
from common.error_types import UsageError
from common.launch import (
    MAX_STAGED_RANKS,
    ask_gloo,
    choose_backend,
    launch,
    rank_device,
    skipped_collective,
    under_torchrun,
)
from common.output import Report
from common.row_tables import parameter_list
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import fmt_num
from cs336 import primitives as prim
from cs336.primitives import ROOT
from lecture14 import collectives as col
from lecture14 import rank_ops
from lecture14.rank_ops import all_inputs, show, yes

RANDOM_NUMBERS = 10_000   # random float32 numbers per rank (Parts 3 and 4): enough to see rounding
SKIP_TIMEOUT_S = 1.0      # Part 5: a healthy collective here takes milliseconds (0.5 s with --quick)
# CPU time here (bench/bench_costs.py, W = 2 … 64): two launches, gloo connecting every pair of
# ranks, every number turned into Python floats; --size only counts bytes (no buffer of that size).
# Part 5 waits for its timeout. Memory: 2W + 14 buffers of N per rank as Python floats (32 B each).
COST = Cost([Term("1", 3.5, lambda a: 1), Term("W²", 0.015, lambda a: a.world_size**2),
             Term("W·N", 7e-6, lambda a: a.world_size * a.numbers)],
            memory=lambda a: 32 * a.world_size * (2 * a.world_size + 14) * a.numbers,
            waits_s=lambda a: 2 * (a.timeout_s or SKIP_TIMEOUT_S) + 1)
# The functions the notes name (NCCL 与 torch.distributed), looked up on this torch.
DIST_API = ("init_process_group", "all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "send",
            "recv", "barrier", "destroy_process_group")
OPS = {"SUM": (dist.ReduceOp.SUM, np.add), "MIN": (dist.ReduceOp.MIN, np.minimum),
       "MAX": (dist.ReduceOp.MAX, np.maximum), "PRODUCT": (dist.ReduceOp.PRODUCT, np.multiply)}


# ---- rank code: each returns plain lists; the parent prints ----------------------------------

def main() -> None:
    parser = make_parser(__doc__, world_size=4, size="1001B", seed=0, numbers=5, real=True, cost=COST,
                         context={"size": "Parts 2 and 3: the buffer cut into p chunks; default p does "
                                          "not divide it", "seed": "random float32 data, Parts 3 and 4",
                                  "numbers": "Part 1; 4 ranks do not divide the default"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be >= 2 for collectives between ranks "
                         "(Part 5 needs one that skips)")
    ask_gloo()  # does gloo have AVG and reduce_scatter? asked once here; forked ranks inherit it
    rep = Report(__file__, "the seven collectives: on real ranks, their shapes and volumes, two identities",
                 args)
    w = args.world_size
    rep.part(1, f"the seven primitives on {w} {choose_backend(w, 'auto')} ranks, {args.numbers} float32 "
                "numbers each")
    real = part1_primitives(rep, args)   # every rank's buffer before and after each of the seven
    rep.part(2, "the notes' table: input and output shapes, per-rank send volume on a ring")
    part2_table(rep, args, real)         # the notes' table: shapes, per-rank volume by formula, count
    rep.part(3, "all-reduce = reduce-scatter + all-gather: on the ranks, in bytes, and its lower bound")
    split_ok = part3_split(rep, args, real)  # all-reduce = reduce-scatter + all-gather; bandwidth bound
    rep.part(4, "three easy-to-confuse points, each run")
    part4_confusions(rep, args, real, split_ok)  # associative ops; reduce vs all-reduce; the split
    rep.part(5, "a synchronisation point is not optional: one rank skips a collective")
    part5_skip(rep, args)                # a rank skips a collective: the others wait until the timeout
    rep.finish()


def collectives_worker(rank: int, world_size: int, n: int, seed: int) -> dict:
    """Parts 1, 3 and 4 in one launch; plain lists go back to the parent."""
    dev = rank_device()
    x = rank_ops.rank_data(rank, n, dev)  # readable integers, exact sums
    noise = torch.randn(RANDOM_NUMBERS, generator=torch.Generator().manual_seed(seed + rank)).to(dev)
    chains = {}
    for op, data in (("sum", x), ("subtract", x), ("float32 sum", noise)):
        for way in (1, -1):  # Part 4: a reduce into the root by hand, round the ring one way, then the other
            chains[op, way] = rank_ops.chain_reduce(data, prim.chain_order(world_size, way), op == "subtract")
    signs = rank_ops.op_data(rank, n).to(dev)  # ±1, ±2: exact under every op
    return {"seven": seven_primitives(x, world_size),
            "split": {"exact": rank_ops.allreduce_two_routes(x),
                      "random": rank_ops.allreduce_two_routes(noise)},
            "ops": {name: rank_ops.reduce_copy(signs, ROOT, op) for name, (op, _) in OPS.items()},
            "chains": chains}


def seven_primitives(x: torch.Tensor, world_size: int) -> dict[str, tuple]:
    """Each of common.costmodel.collectives' collectives once: (what this rank put in, what it holds after),
    None where nothing (common.collectives_real.run_collective, gloo's workarounds included)."""
    out = {name: run_collective(name, x, ROOT) for name in COLLECTIVES}
    return {k: tuple(None if t is None else t.tolist() for t in v) for k, v in out.items()}


def skip_worker(rank: int, world_size: int) -> float:
    """The bug: the last rank takes a branch without the all_reduce the others call (say, it logs
    nothing). No healthy collective comes first: it would run under the lesson's short timeout, and
    a rank the loaded cores start late would time it out instead of the skip."""
    value = torch.ones(1, device=rank_device())
    if rank != world_size - 1:
        dist.all_reduce(value)
    return value.item()


# ---- the parent: parts in the notes' order ---------------------------------------------------

def part1_primitives(rep: Report, args: argparse.Namespace) -> list[dict]:
    w, n = args.world_size, args.numbers
    real = launch(collectives_worker, w, n, args.seed, backend="auto", timeout_s=args.timeout_s)
    inputs = all_inputs(w, n)
    sims = {"broadcast": col.broadcast(inputs, ROOT), "scatter": col.scatter(inputs, ROOT),
            "gather": col.gather(inputs, ROOT), "reduce": col.reduce(inputs, ROOT),
            "all-gather": col.all_gather(inputs), "reduce-scatter": col.reduce_scatter(inputs),
            "all-reduce": col.allreduce(inputs)}
    rows, right = [], {}
    for name, sim in sims.items():
        right[name] = []  # per rank: its result is defined (by the simulator) and equal to it
        for r, res in enumerate(real):
            before, after = res["seven"][name]
            want = sim.outputs[r]
            ok = (want is not None and after is not None
                  and np.array_equal(np.asarray(after, np.float32), want))
            right[name].append(ok)
            check = "-" if want is None else yes(ok)  # reduce and gather define nothing off the root
            scratch = " (scratch)" if want is None and after is not None else ""
            rows.append([name if r == 0 else "", str(r), show(before, 5), show(after, 10) + scratch, check])
    rep.table(["primitive", "rank", "before", "after", "same as simulator"], rows, name="seven")
    rep.note(f"rank {ROOT} is the root. Pieces follow np.array_split (the first n mod p one number longer). "
             "After reduce the other ranks' buffers are scratch (gloo leaves partial sums, NCCL nothing "
             "defined).")
    missing = [f for f in DIST_API if not hasattr(dist, f)]
    rep.value("dist_api_present", not missing)
    rep.value("dist_api_missing", ", ".join(missing) or "none")
    for r, res in enumerate(real):
        res["right"] = {name: ok[r] for name, ok in right.items()}
    return real


# The notes' in → out column: each primitive's value is named "shape_{key}" with the key its row
# gives (the block "CS-coll-shape-{name}" of cs336/notes.toml), so the name is the row's own.
SHAPE_KEYS = {entry["name"]: entry["key"]
              for entry in parameter_list("cs336/notes.toml", "CS-coll-shape-{name}")}


def part2_table(rep: Report, args: argparse.Namespace, real: list[dict]) -> None:
    w = args.world_size
    rows = []
    for name in prim.SIM_ALGORITHM:
        before, after = ([None if b is None else len(b) for b in (res["seven"][name][i] for res in real)]
                         for i in (0, 1))
        ours = prim.shape_text(before, after, [res["right"][name] for res in real])
        key = SHAPE_KEYS[name]      # the row's own parameter: its value = "shape_{key}"
        rep.value(f"shape_{key}", ours)
        rows.append([name, rep.notes_text(f"CS-coll-shape-{name}"), ours,
                     prim.lengths_text([list(pair) for pair in zip(before, after)])])
    rep.table(["primitive", "notes: in → out", f"Part 1's ranks (p = {w})", "elements in → out"], rows,
              name="shapes")
    rep.note("ours: who holds something before and a right result after, in units of S (the smaller side)")
    rep.compare_with_notes(in_table=True)
    sizes = sorted({4, w} if args.quick else {2, 3, 4, 8, w})
    rep.line(f"\n  bytes each rank sends on a ring, the ring model (formulas and the simulator, no rank "
             f"runs them), N = {args.size:,} B (S = N for broadcast, reduce, all-reduce; N/p for the rest):")
    for p in sizes:
        rep.line(f"\n  p = {p}: pieces of {show(sorted(set(split_sizes(args.size, p)), reverse=True))} B")
        rep.table(["primitive", "notes (B)", "formula (B)", "simulator (B)", "every rank (B)",
                   "≤ 1 B/msg"], prim.volume_rows(p, args.size), name=f"p={p}")
    rep.note("the busiest rank's bytes by the formula (costmodel.collectives: the ring's bytes_sent) and by "
             "the "
             "simulator, lecture14.collectives.traffic on a ring (broadcast and reduce a chain round it), "
             "then every rank's: where p does not divide N, within a byte per message of the closed form.")
    notes_volumes(rep)


# The notes' volume column, each primitive's value under the name its row compares.
VOLUME_VALUES = {"broadcast": "volume_broadcast_S", "scatter": "volume_scatter_S",
                 "gather": "volume_gather_S", "reduce": "volume_reduce_S",
                 "all-gather": "volume_all_gather_S", "reduce-scatter": "volume_reduce_scatter_S",
                 "all-reduce": "volume_all_reduce_S"}


def notes_volumes(rep: Report) -> None:
    """The notes' volume column at their p = 4 (whatever --world-size), in units of S."""
    p, n = prim.NOTES_P, prim.NOTES_N
    rows = []
    for name, v in prim.volumes(p, n).items():
        whose = prim.WHOSE_SENDS[name]
        ours = (v.sent[ROOT] if whose == "root" else v.busiest) / v.piece
        rep.value(VOLUME_VALUES[name], ours)
        rows.append([name, "the root" if whose == "root" else "busiest rank", ours,
                     rep.notes_text(f"CS-coll-volume-{name}")])
    rep.line(f"\n  the notes' volume column at their p = {p}, whatever --world-size (N = {n:,} B, "
             "which p divides), in the ring model:")
    rep.table(["primitive", "sends", "ours (S)", "notes"], rows, name="notes_volumes")
    rep.compare_with_notes(in_table=True)
    ag = col.traffic("ring all-gather", p, n)
    rep.value("ag_rs_identity", all(np.isclose((q - 1) / q * q * 1.0, q - 1.0) for q in range(2, 257)))
    rep.value("ring_ag_steps", ag.n_rounds)
    rep.value("ring_ag_share_per_step", ag.round_bytes()[0] / n)
    rep.value("ag_p256_share", col.traffic("ring all-gather", 256, 256 * 1000).busiest_sent / (256 * 1000))


def part3_split(rep: Report, args: argparse.Namespace, real: list[dict]) -> bool:
    w, n, size = args.world_size, args.numbers, args.size
    sizes = sorted({4, w} if args.quick else {2, 3, 4, 8, w})
    exact = [res["split"]["exact"] for res in real]
    same = all(e["rs_ag"] == e["all_reduce"] for e in exact)
    sim = col.all_gather(col.reduce_scatter(all_inputs(w, n)).outputs).outputs
    same_sim = all(np.array_equal(np.asarray(e["rs_ag"], np.float32), s) for e, s in zip(exact, sim))
    noisy = [np.subtract(res["split"]["random"]["rs_ag"], res["split"]["random"]["all_reduce"])
             for res in real]
    worst, differ = max(float(np.abs(d).max()) for d in noisy), sum(int(np.count_nonzero(d)) for d in noisy)
    rep.table(["data", "all_reduce = reduce_scatter then all_gather", "same as simulator"],
              [[f"integers, {n} per rank", f"{yes(same)} (bit for bit)", yes(same_sim)],
               [f"random float32, {RANDOM_NUMBERS:,} per rank",
                f"max |diff| {fmt_num(worst)} ({differ:,} of {w * RANDOM_NUMBERS:,} differ)", "-"]],
              name="two_routes")
    rep.note("integer sums are exact in float32: bit for bit. Random floats: the two routes add the p parts "
             "in orders of their own, and float addition is not associative: the last bits may differ.")
    rep.line(f"\n  bytes per rank, ring model (the simulator's count), N = {size:,} B (average over ranks; "
             "busiest where chunks differ):")
    rep.table(["p", "reduce-scatter sends", "all-gather receives", "bound (p-1)/p·N", "ring all-reduce sends",
               "busiest", "notes 2(p-1)/p·N"], prim.split_rows(sizes, size), name="split_bytes")
    part3_lower_bound(rep, w, size)
    p, n4 = prim.NOTES_P, prim.NOTES_N
    rs, ag, ar = (col.traffic(a, p, n4)
                  for a in ("ring reduce-scatter", "ring all-gather", "ring all-reduce"))
    grows = [col.traffic("ring all-reduce", q, q * 1000).busiest_sent / (q * 1000)
             for q in (2, 4, 8, 64, 256)]
    ring, naive = (row[3] for row in prim.lower_bound_rows(p, n4) if row[0] in ("ring", "naive"))
    rep.value("split_bit_for_bit", same and same_sim)
    rep.value("rs_phase_S", rs.busiest_sent / n4)
    rep.value("ag_phase_S", ag.busiest_sent / n4)
    rep.value("ring_ar_S", ar.busiest_sent / n4)
    rep.value("ring_rs_steps", rs.n_rounds)
    rep.value("tends_to_2S", all(g < 2 for g in grows) and grows[-1] > 1.99)
    rep.value("tends_to_2S_values", ", ".join(f"{g:.3f}" for g in grows))
    rep.value("ring_below_naive", ring < naive)
    rep.value("ring_busiest_S", ring)
    rep.value("naive_busiest_S", naive)
    rep.line(f"  the rows below at the notes' p = {p}, whatever --world-size")
    return same and same_sim


def part3_lower_bound(rep: Report, w: int, size: int) -> None:
    rep.line(f"\n  the lower bound, p = {w}, N = {size:,} B (the simulator's ring, tree and naive counts): "
             "to give every rank the sum of p numbers "
             "takes at least 2(p-1) messages per number (one-way gossip: p-1 to bring the parts together, "
             "p-1 to spread the sum), so 2(p-1)·N bytes in all:")
    rep.table(["all-reduce", "total sent / N", "fewest 2(p-1)", "busiest rank / N", "bound 2(p-1)/p"],
              prim.lower_bound_rows(w, size), name="lower_bound")
    rep.note("all three move the fewest bytes in all, but no busiest rank sends less than the average "
             "2(p-1)/p·N, and only the ring's sends no more (a byte per message where p does not divide N): "
             "bandwidth optimal. The tree's root sends ⌈log2 p⌉·N, the naive root (p-1)·N.")


def part4_confusions(rep: Report, args: argparse.Namespace, real: list[dict], split_ok: bool) -> None:
    order_free, order_matters = _reduce_order(rep, args, real)
    holds = _all_means_every_rank(rep, args, real)
    rep.line(f"\n  (c) all-reduce = reduce-scatter + all-gather, bit for bit (Part 3): {yes(split_ok)}; "
             "(p-1)/p·S twice = 2(p-1)/p·S a rank")
    rep.value("order_free_ops", order_free and order_matters)
    rep.value("all_reduce_everyone", all(h[1] for h in holds.values()))
    rep.value("reduce_root_holds", holds[ROOT][0])


def _reduce_order(rep: Report, args: argparse.Namespace, real: list[dict]) -> tuple[bool, bool]:
    """(a): whether sums come out the same whatever the order, and whether subtraction's does not."""
    w, n = args.world_size, args.numbers
    rep.line("  (a) reduce needs an associative and commutative op: dist.reduce vs numpy in two orders")
    inputs = [rank_ops.op_data(r, n).numpy() for r in range(w)]
    rows, ops_ok = [], True
    for name, (_, np_op) in OPS.items():
        forward, backward = fold(np_op, inputs), fold(np_op, inputs[::-1])
        got = np.asarray(real[ROOT]["ops"][name], np.float32)
        ok = np.array_equal(got, forward) and np.array_equal(forward, backward)
        ops_ok &= ok
        rows.append([name, show(got, 6), show(forward, 6), show(backward, 6), yes(ok)])
    rep.table(["op", "gloo reduce, root", "numpy, ranks 0..p-1", "numpy, p-1..0", "equal"], rows, name="ops")
    rep.line(f"  rank r holds ±1, ±2 ({show(inputs[0], 6)} on rank 0): sums and products are exact")
    order = {way: " → ".join(map(str, prim.chain_order(w, way))) for way in (1, -1)}
    rows, chains = [], {}
    for op in ("sum", "subtract", "float32 sum"):
        a, b = (np.asarray(real[ROOT]["chains"][(op, way)], np.float32) for way in (1, -1))
        chains[op] = float(np.abs(a - b).max())
        rows.append([f"{op}, by hand", show(a.round(4), 3), show(b.round(4), 3), chains[op]])
    integers = all_inputs(w, n)
    forward, backward = fold(np.subtract, integers), fold(np.subtract, integers[::-1])
    chains["numpy"] = float(np.abs(forward - backward).max())
    rows.insert(2, ["subtract, numpy", show(forward, 3), show(backward, 3), chains["numpy"]])
    rep.line(f"\n  a reduce round the ring by hand (send/recv), ranks {order[1]}, then {order[-1]}; numpy: "
             f"x0 - x1 - ... - x{w - 1}, then from x{w - 1} down:")
    rep.table(["op", "first order", "other order", "max |difference|"], rows, name="chains")
    if w == 2:
        rep.line("  (p = 2: both ways round the ring are the one chain 1 → 0; numpy's two orders differ)")
    ring_sum = col.pipelined_ring_reduce(all_inputs(w, n), 1, ROOT).outputs[ROOT]
    same_sim = np.array_equal(np.asarray(real[ROOT]["chains"][("sum", 1)], np.float32), ring_sum)
    rep.note("subtraction is neither associative nor commutative: the answer depends on the order the ring "
             "visits. Float sums are not associative: two orders differ in the last bits (integer sums are "
             f"exact). The first order's sum = the simulator's chain reduce: {yes(same_sim)}.")
    order_free = ops_ok and chains["sum"] == 0 and same_sim
    order_matters = chains["numpy"] > 0 and (w == 2 or chains["subtract"] > 0)
    return order_free, order_matters


def _all_means_every_rank(rep: Report, args: argparse.Namespace, real: list[dict]) -> dict[int, tuple]:
    """(b): which ranks hold the sum after reduce and after all_reduce."""
    w, n = args.world_size, args.numbers
    rep.line("\n  (b) 'all' means every rank gets the result: dist.reduce vs dist.all_reduce (Part 1)")
    total = np.sum(all_inputs(w, n), axis=0)
    rows, holds = [], {}
    for r, res in enumerate(real):
        after_r, after_ar = (np.asarray(res["seven"][k][1], np.float32) for k in ("reduce", "all-reduce"))
        holds[r] = (np.array_equal(after_r, total), np.array_equal(after_ar, total))
        rows.append([r, show(after_r, 6), "yes" if holds[r][0] else "no", show(after_ar, 6),
                     yes(holds[r][1])])
    rep.table(["rank", "after reduce", "the root's sum", "after all_reduce", "every rank's sum"], rows,
              name="reduce_vs_all")
    others = sum(h[0] for r, h in holds.items() if r != ROOT)
    rep.line(f"  other ranks holding the sum after reduce: {others} of "
             f"{w - 1} (what is left there is the backend's business)")
    return holds


def part5_skip(rep: Report, args: argparse.Namespace) -> None:
    if under_torchrun():
        rep.line("  skipped under torchrun: the stuck collective would break torchrun's one process group")
        rep.value("skip_waits", None)
        rep.value("skip_outcome", "not run under torchrun")
        return
    timeout = args.timeout_s or (SKIP_TIMEOUT_S / 2 if args.quick else SKIP_TIMEOUT_S)
    w = min(args.world_size, MAX_STAGED_RANKS)
    if w < args.world_size:
        rep.line(f"  on {w} of the {args.world_size} ranks"
                 " (a few show it; see common/launch/staged_failure.py)")
    last = w - 1
    # Only the staged report counts (rank `last` named for finishing while the others waited until
    # the timeout): a rank killed, stopped or failing during this part is a failure of the run, exit 1.
    seconds, report = skipped_collective(
        skip_worker, w, backend="auto", timeout_s=timeout, skippers=[last], waiters=range(last),
        staged=f"Part 5 staged a skipped collective (rank {last} skips one)")
    waited = report is not None
    rep.line(f"  rank {last} skips the all_reduce the others call; after {seconds:.2f} s "
             f"(timeout {timeout:g} s) the launcher reports:")
    rep.line(f"    {report or 'no error: every rank got through (it should not have)'}")
    rep.note(f"ranks 0..{last - 1} wait in the all_reduce for rank {last}, which went on to the end; without "
             "a timeout the program would look hung for ever: the protocol, not the data, is incomplete.")
    rep.value("skip_waits", waited)
    rep.value("skip_outcome", report or "every rank got through, which it should not have")


if __name__ == "__main__":
    run_main(main)
