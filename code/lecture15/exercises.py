"""Lecture 15 §8 (练习): the twelve exercises, answered by the suite's models.

    python code/lecture15/exercises.py

Each part is one exercise (Part 1 = exercise 1 …); Part 13 checks the figures of §10's preview of
lecture 16 (GPipe's bubble, Megatron's MLP split, 405B's training state). Numbers come from
lecture15.ddp_sim and common.costmodel.collectives and are compared with the notes' reference answers
(code/lecture15/notes.toml); the prose exercises print our explanation (marked "note:") and, where
it is cheap, a computed check.
Model only: numpy, no processes, no torch. (The handbook's 7B question: handbook_details.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math

import numpy as np

from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.output import Report
from common.script_end import run_main
from common.units import MB
from lecture15.ddp_sim import (
    ascii_timeline,
    assign_buckets,
    simulate_backward,
    simulate_ddp,
    skip_sync_step_s,
    throughput_speedup,
)
from lecture15.least_squares import mean_gradient
from lecture15.models import resnet50

RING_ALLREDUCE = algorithm("ring all-reduce")

SECTION3_LINK = Link(10e-6, 10e9, "§3's fast interconnect")   # the notes' §3 setting: 16 ranks
SECTION3_RANKS = 16
EX3_SIZES = [10 * MB, 2 * MB, 8 * MB, 20 * MB, 4 * MB]   # p0 … p4 of exercise 3


# ---- helpers small enough to live here (each used by one exercise) --------------------------------
def rank_placement(global_rank: int, machines: int, gpus_per_machine: int) -> tuple[int, int, int]:
    """(machine index, local rank, WORLD_SIZE) when ranks fill machine 0 first, one process per GPU."""
    world_size = machines * gpus_per_machine
    if not 0 <= global_rank < world_size:
        raise ValueError(f"rank {global_rank} outside 0…{world_size - 1}")
    return global_rank // gpus_per_machine, global_rank % gpus_per_machine, world_size


def launch_order(ready_order: list[int], in_index_order: bool) -> list[int]:
    """The order a rank calls all-reduce on its buckets, given the order they become ready.

    Naive: as soon as each is ready. DDP's Reducer: bucket i only after buckets 0 … i−1 were launched.
    """
    if not in_index_order:
        return list(ready_order)
    launched: list[int] = []
    ready: set[int] = set()
    for bucket in ready_order:
        ready.add(bucket)
        while len(launched) in ready:
            launched.append(len(launched))
    return launched


def pair_by_call_order(calls: list[list[int]], buffers: list[list[np.ndarray]]) -> list[str]:
    """What a collective library does: the j-th all-reduce of every rank is one collective."""
    outcome = []
    for j in range(len(calls[0])):
        parts = [buffers[rank][calls[rank][j]] for rank in range(len(calls))]
        if len({p.size for p in parts}) > 1:
            outcome.append(f"sizes {[p.size for p in parts]}: error/hang")
            continue
        total = sum(parts)
        correct = all(np.array_equal(total, sum(buffers[r][calls[rank][j]] for r in range(len(calls))))
                      for rank in range(len(calls)))
        paired = [calls[r][j] for r in range(len(calls))]
        outcome.append(f"buckets {paired}: {'correct' if correct else 'WRONG'}")
    return outcome


# ---- the exercises ---------------------------------------------------------------------------------
def part1(rep: Report) -> None:
    machine, local, world = rank_placement(7, machines=3, gpus_per_machine=4)
    first = [r for r in range(world) if rank_placement(r, 3, 4)[0] == machine]
    rep.line(f"  ranks {first[0]}–{first[-1]} live on machine {machine} (counting from 0)")
    rep.value("ex1_machine", machine)
    rep.value("ex1_local_rank", local)
    rep.value("ex1_world_size", world)
    # §1.3's example: 2 machines × 2 GPUs
    layout = [rank_placement(r, 2, 2) for r in range(2 * 2)]
    per_machine = {m: sorted(lr for mm, lr, _ in layout if mm == m) for m in range(2)}
    rep.line(f"  §1.3: 2 machines × 2 GPUs: global ranks 0–{layout[0][2] - 1}, local ranks per machine "
             f"{per_machine}")
    same = len({tuple(v) for v in per_machine.values()}) == 1
    rep.value("s13_global_ranks", f"0–{layout[0][2] - 1}")
    rep.value("s13_local_ranks", ", ".join(map(str, per_machine[0])) if same else str(per_machine))


def part2(rep: Report) -> None:
    rep.note("same seed is not enough: the parameters depend on every random draw before and during "
             "initialisation (library version, CPU vs GPU generator, code paths, data shuffling first), "
             "and a resumed run loads a checkpoint that only rank 0 needs to read. One broadcast from "
             "rank 0 makes the replicas identical whatever happened before.")
    shapes = [(4, 4), (4,)]
    rank0 = np.random.default_rng(0)
    rank1 = np.random.default_rng(0)
    rank1.random()   # rank 1 drew one number first (say, to shuffle its data): same seed, new stream
    params0 = [rank0.standard_normal(s) for s in shapes]
    params1 = [rank1.standard_normal(s) for s in shapes]
    gap = max(float(np.max(np.abs(a - b))) for a, b in zip(params0, params1))
    params1 = [p.copy() for p in params0]   # what DDP's constructor does: rank 0's values everywhere
    after = max(float(np.max(np.abs(a - b))) for a, b in zip(params0, params1))
    rep.line(f"  tried here: seed 0 on both ranks, one extra draw on rank 1 -> max |Δparam| {gap:.2f}; "
             f"after the broadcast {after:g}")


def exercise3_buckets() -> list[list[int]]:
    """p0…p4 = 10, 2, 8, 20, 4 MB with a 12 MB cap, by DDP's rule."""
    return assign_buckets(EX3_SIZES, cap_bytes=12 * MB)


def part3(rep: Report) -> None:
    buckets = exercise3_buckets()
    text = ", ".join("{" + ", ".join(f"p{i}" for i in b) + "}" for b in buckets)
    rep.line("  p0…p4 = 10, 2, 8, 20, 4 MB; cap 12 MB; filled in reverse order, sealed once >= cap")
    rep.value("ex3_buckets", text)
    rep.note("the constructor's assignment (PyTorch 1.5; today with find_unused_parameters=True). By "
             "default today's DDP rebuilds before iteration 2 in the gradients' ready order: the same "
             "buckets, as p4 … p0 arrive in reverse. bucket_cap_mb=None caps bucket 0 at 1 MiB: p4 alone.")


def part4(rep: Report) -> None:
    sizes, buckets = EX3_SIZES, exercise3_buckets()
    ready = [5e-3, 4e-3, 3e-3, 2e-3, 1e-3]                   # p4 at 1 ms … p0 at 5 ms

    def cost(nbytes: int) -> float:                          # the exercise's own cost, not a ring
        return 0.5e-3 + 0.1e-3 * nbytes / MB

    overlapped = simulate_backward(ready, sizes, buckets, cost, overlap=True)
    serial = simulate_backward(ready, sizes, buckets, cost, overlap=False)
    one = simulate_backward(ready, sizes, [[4, 3, 2, 1, 0]], cost, overlap=False)
    for e in overlapped.comm_events():
        rep.line(f"  {e.label}: ready {overlapped.bucket_ready_s[e.index] * 1e3:.1f} ms, "
                 f"all-reduce {e.start_s * 1e3:.1f}–{e.end_s * 1e3:.1f} ms")
    for row in ascii_timeline(overlapped, width=50, full_scale_s=serial.step_s):
        rep.line("  " + row)
    rep.value("ex4_overlapped_ms", overlapped.step_s * 1e3)
    rep.value("ex4_serial_ms", serial.step_s * 1e3)
    rep.value("ex4_one_bucket_ms", one.step_s * 1e3)
    events = {e.index: e for e in overlapped.comm_events()}
    one, two = events[0], events[1]
    rep.value("ex4_bucket0_ready_ms", overlapped.bucket_ready_s[0] * 1e3)
    rep.value("ex4_bucket0_comm_ms", (one.end_s - one.start_s) * 1e3)
    rep.value("ex4_bucket0_end_ms", one.end_s * 1e3)
    rep.value("ex4_bucket1_ready_ms", overlapped.bucket_ready_s[1] * 1e3)
    rep.value("ex4_bucket1_comm_ms", (two.end_s - two.start_s) * 1e3)
    rep.value("ex4_bucket1_end_ms", two.end_s * 1e3)


def part5(rep: Report) -> None:
    model, k, link = resnet50(), SECTION3_RANKS, SECTION3_LINK
    per_bucket_latency = RING_ALLREDUCE.time(k, 0, link)      # an empty all-reduce: 2(K−1)α
    cap0 = simulate_ddp(model, k, link, cap_bytes=0)
    serial = simulate_ddp(model, k, link, cap_bytes=10 * model.nbytes, overlap=False)
    rep.line(f"  ResNet-50, K = {k}, α = {link.alpha_s * 1e6:g} µs, β = {link.beta_Bps / 1e9:g} GB/s: any "
             f"all-reduce pays 2(K−1)α = {per_bucket_latency * 1e3:.2f} ms")
    buckets = len(cap0.buckets)
    rep.line(f"  cap 0 -> {buckets} buckets, latency alone {buckets * per_bucket_latency * 1e3:.1f} ms; "
             f"one bucket pays it once: {per_bucket_latency * 1e3:.2f} ms")
    rep.line(f"  overlap can save at most the communication, {serial.comm_total_s * 1e3:.1f} ms with one "
             f"bucket; cap 0 adds {(buckets - 1) * per_bucket_latency * 1e3:.1f} ms of latency")
    rep.line(f"  step: cap 0, overlapped {cap0.step_s * 1e3:.1f} ms; one bucket, no overlap "
             f"{serial.step_s * 1e3:.1f} ms")
    rep.value("ex5_cap0_slower", bool(cap0.step_s > serial.step_s))
    rep.value("ex5_tensors", len(model.params))
    rep.value("ex5_cap0_latency_ms", buckets * per_bucket_latency * 1e3, compared=False)   # for --json


def part6(rep: Report) -> None:
    rng = np.random.default_rng(6)
    ready = [[1, 0], [0, 1]]                               # rank 0 fills bucket 1 first, rank 1 bucket 0
    rows = []
    for label, sizes in (("equal", (3, 3)), ("different", (3, 2))):
        buffers = [[rng.integers(0, 10, s).astype(float) for s in sizes] for _ in range(2)]
        for rule, in_order in (("naive: first ready", False), ("DDP: index order", True)):
            calls = [launch_order(r, in_order) for r in ready]
            rows.append([label, rule, *pair_by_call_order(calls, buffers)])
    rep.line(f"  ready order: rank 0 {ready[0]}, rank 1 {ready[1]}")
    rep.table(["bucket sizes", "launch rule", "all-reduce call 0 adds", "call 1 adds"], rows,
              name="launch_rules")
    rep.note("collectives match by call order, not by name: the naive rule adds rank 0's bucket 1 to rank "
             "1's bucket 0 (WRONG: a silently wrong sum when the sizes agree, an error when they differ).")


def part7(rep: Report) -> None:
    rep.note("correct 4-step accumulation: no_sync must wrap the forward; the last micro-batch syncs.")
    for code in ("opt.zero_grad()",
                 "for step, (x, y) in enumerate(micro_batches):         # 4 of them",
                 "    last = step == len(micro_batches) - 1",
                 "    with contextlib.nullcontext() if last else ddp.no_sync():   # the forward inside",
                 "        (loss_fn(ddp(x), y) / 4).backward()",
                 "opt.step()"):
        rep.line("        " + code)
    rep.note("with loss/4 the accumulated .grad is the mean gradient of the 4 micro-batches; after the "
             "all-reduce, the mean over 4 × per-rank batch × world size samples (equal micro-batches).")
    rng = np.random.default_rng(7)
    x, y, w = rng.standard_normal((4 * 8, 5)), rng.standard_normal(4 * 8), rng.standard_normal(5)
    accumulated = sum(mean_gradient(w, x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]) / 4 for i in range(4))
    full = mean_gradient(w, x, y)
    rep.line(f"  check, 4 micro-batches of 8: max |Σ grad(loss_i/4) − grad(mean over all 32)| = "
             f"{np.max(np.abs(accumulated - full)):.1e}")
    uneven = [slice(0, 8), slice(8, 16), slice(16, 24), slice(24, 26)]
    acc2 = sum(mean_gradient(w, x[s], y[s]) / 4 for s in uneven)
    rep.line(f"  with micro-batches of 8, 8, 8, 2 it is not the mean over all 26 samples: max |Δ| = "
             f"{np.max(np.abs(acc2 - mean_gradient(w, x[:26], y[:26]))):.2f}")


def part8(rep: Report) -> None:
    rep.note("an expert that gets no token on a rank produces no gradient there: turn on "
             "find_unused_parameters, or touch every expert each step (e.g. a zero-weighted term), or — "
             "what large MoE training does — shard the experts (expert parallelism, lecture 17).")
    experts, top = 8, 2
    rows = []
    rng = np.random.default_rng(8)
    for tokens in (4, 8, 16, 32, 64):
        # P(some expert idle) by inclusion–exclusion; each token picks `top` distinct experts uniformly.
        untouched = [math.comb(experts - j, top) / math.comb(experts, top) for j in range(experts + 1)]
        exact = sum((-1) ** (j + 1) * math.comb(experts, j) * untouched[j] ** tokens
                    for j in range(1, experts - top + 1))
        picks = np.argsort(rng.random((2000, tokens, experts)), axis=2)[:, :, :top]
        used = np.zeros((2000, experts), dtype=bool)
        np.put_along_axis(used, picks.reshape(2000, -1), True, axis=1)
        rows.append([tokens, f"{exact:.3f}", f"{np.mean(~used.all(axis=1)):.3f}"])
    rep.line(f"  top-{top} of {experts} experts, uniform independent routing (real routers are skewed: "
             "worse):")
    rep.table(["tokens on a rank", "P(an expert idle), exact", "simulated (2000 draws)"], rows,
              name="moe_idle")


def part9(rep: Report) -> None:
    model = resnet50()
    k, link = SECTION3_RANKS, SECTION3_LINK
    bitmap = RING_ALLREDUCE.time(k, len(model.params) * 4, link)
    rep.note("a bucket is one flat buffer of one dtype (the gradients' float); the usage bitmap is integers, "
             "and one bitmap for all parameters is smaller than one per bucket.")
    rep.line(f"  ResNet-50's {len(model.params)}-entry int32 bitmap, all-reduced at K = {k}: "
             f"{bitmap * 1e3:.3f} ms, nearly all 2(K−1)α = {RING_ALLREDUCE.time(k, 0, link) * 1e3:.2f} ms")


def part10(rep: Report) -> None:
    ratio = throughput_speedup(256, 50e-3, 100e-3)   # 256 × 32 samples / 100 ms against 32 / 50 ms
    rep.value("ex10_throughput", ratio)
    rep.value("ex10_efficiency_pct", 100 * ratio / 256)


def part11(rep: Report) -> None:
    rep.value("ex11_average_ms", skip_sync_step_s(100e-3, 50e-3, 4) * 1e3)
    rep.note("the update adds 4 gradients: divide the learning rate by 4 to keep each update's size — "
             "then it is large-batch training (4× the batch, 1/4 the updates); Part 7's check and "
             "05_scaling.py Part 3 show the equality.")


def part12(rep: Report) -> None:
    rep.note("each rank normalises with its own batch statistics, so with class-sharded data the same input "
             "is normalised differently per rank; the running statistics DDP keeps are rank 0's (broadcast "
             "before each forward), biased at inference. Fix: SyncBatchNorm, shuffle so each rank sees the "
             "same distribution, or a norm without batch statistics (LayerNorm, GroupNorm).")
    rng = np.random.default_rng(12)
    shards = [rng.normal(0.0, 1.0, 256), rng.normal(3.0, 1.0, 256)]   # two ranks, two classes
    local = [(s.mean(), s.std()) for s in shards]
    value = 1.5
    normalised = [(value - mean) / std for mean, std in local]
    rep.line(f"  input {value} normalised on rank 0: {normalised[0]:+.2f}, rank 1: {normalised[1]:+.2f}; "
             f"kept mean (rank 0's) {local[0][0]:.2f}, global {np.concatenate(shards).mean():.2f}")


def megatron_mlp(k: int, seed: int = 13) -> tuple[int, float, float]:
    """Y = GeLU(X·W1)·W2 on k emulated ranks, W1 split by columns and W2 by rows (Megatron-LM): each
    rank's GeLU(X·W1_k)·W2_k is a partial sum of Y, so one all-reduce (a sum) finishes the forward.
    Returns (all-reduces made, max |Δ| against the unsplit MLP, max |Δ| when W1 is split by rows
    instead and the GeLU is applied to partial sums without first summing them)."""
    def gelu(z: np.ndarray) -> np.ndarray:
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))

    rng = np.random.default_rng(seed)
    d = 8
    x, w1, w2 = rng.standard_normal((4, d)), rng.standard_normal((d, 4 * d)), rng.standard_normal((4 * d, d))
    whole = gelu(x @ w1) @ w2
    calls: list[str] = []

    def all_reduce(parts: list[np.ndarray]) -> np.ndarray:   # every rank gets the sum
        calls.append("all-reduce")
        return sum(parts)

    cols, rows = np.array_split(np.arange(4 * d), k), np.array_split(np.arange(d), k)
    y = all_reduce([gelu(x @ w1[:, c]) @ w2[c, :] for c in cols])
    made = len(calls)
    # W1 split by rows: each rank holds a partial sum of X·W1, and GeLU(a) + GeLU(b) ≠ GeLU(a + b)
    wrong = sum(gelu(x[:, r] @ w1[r, :]) for r in rows) @ w2
    return made, float(np.max(np.abs(y - whole))), float(np.max(np.abs(wrong - whole)))


def part13(rep: Report) -> None:
    # the event-by-event simulator (cs336 script 06) against the closed form (p − 1)/(m + p − 1)
    from cs336.pipeline import bubble_fraction_closed_form, run_schedule

    rows, gaps = [], {"plain": 0.0, "micro": 0.0}   # m = 1 is the plain pipeline
    for stages in (2, 4, 8):
        for micro in (1, 4, 16):
            run = run_schedule("GPipe", stages, micro, 1.0, 2.0)
            formula = bubble_fraction_closed_form(stages, micro)   # m = 1: the plain pipeline's (p − 1)/p
            kind = "plain" if micro == 1 else "micro"
            gaps[kind] = max(gaps[kind], abs(run.bubble_fraction - formula))
            rows.append([stages, micro, f"{run.bubble_fraction:.4f}", f"{formula:.4f}"])
    rep.table(["p (stages)", "m (micro-batches)", "GPipe bubble, simulated", "(p − 1)/(m + p − 1)"], rows,
              name="gpipe_bubble")
    rep.note("simulated pass by pass (cs336.pipeline, t_b = 2 t_f, no p2p time): idle device-time / "
             "(p × makespan); m = 1 is the plain pipeline's (p − 1)/p.")
    made, gap, wrong = megatron_mlp(4)
    rep.line(f"  Megatron MLP on 4 emulated ranks (W1 by columns, W2 by rows): {made} all-reduce, max |Δ| "
             f"against the unsplit MLP {gap:.1e};\n  W1 by rows without a sum before the GeLU: max |Δ| "
             f"{wrong:.2f}")
    params, per_param = 405e9, 16   # lecture 14's ledger: 16 bytes per parameter (mixed-precision Adam)
    tb = params * per_param / 1e12
    rep.line(f"  405B parameters × {per_param} B (lecture 14's ledger) = {tb:.2f} TB of training state")
    rep.value("gpipe_bubble_plain_gap", gaps["plain"])
    rep.value("gpipe_bubble_micro_gap", gaps["micro"])
    rep.value("megatron_mlp_allreduces", made)
    rep.value("megatron_gap", gap)
    rep.value("megatron_rows_first_gap", wrong)
    rep.value("state_405b_tb", tb)


def main() -> None:
    parser = make_parser(__doc__, figs=False)
    args: argparse.Namespace = parser.parse_args()
    rep = Report(__file__, "lecture 15 exercises (§8)", args)
    steps = [  # (exercise, title, what it answers with)
        (1, "rank 7 on 3 machines × 4 GPUs", part1),
        (2, "why broadcast at construction", part2),
        (3, "buckets of p0…p4, cap 12 MB", part3),               # ddp_sim.assign_buckets
        (4, "timeline of exercise 3", part4),                     # ddp_sim.simulate_backward
        (5, "why cap 0 can lose to no overlap", part5),           # ddp_sim.simulate_ddp, ResNet-50
        (6, "ready-order launch on two ranks", part6),
        (7, "no_sync accumulation and loss/4", part7),
        (8, "MoE experts under DDP", part8),
        (9, "why the bitmap has its own all-reduce", part9),
        (10, "throughput at 256 ranks", part10),
        (11, "synchronise every 4 steps", part11),                # ddp_sim.skip_sync_step_s
        (12, "BatchNorm with class-sharded data", part12),
        (13, "§10's preview: GPipe's bubble, Megatron's MLP, 405B", part13),
    ]
    for number, title, answer in steps:
        rep.part(number, f"exercise {number}: {title}" if number <= 12 else title)
        answer(rep)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
