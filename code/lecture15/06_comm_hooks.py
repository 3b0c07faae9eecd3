"""Lecture 15 §4.4 (通信钩子) and the handbook's 降低通信量: PyTorch's DDP communication hooks on real ranks.

    python code/lecture15/06_comm_hooks.py [--world-size 4] [--steps 16] [--lr 1] [--save-figs DIR]

One launch (gloo, CPU, float32 as DDP hooks are used) trains the same small network with plain DDP
and with torch's hooks: allreduce_hook (Part 1: plain DDP's numbers, bit-exact or within round-off,
as found), fp16_compress_hook and PowerSGD of rank 1 with and without error feedback. Part 2 puts
what each hook hands to all_reduce in a compressed step (counted in the process group) beside our
prediction (DDP's buckets by ddp_sim's rule, the hook's payload from the layers' shapes) and the
ring model's price of it (costmodel: what a rank would send on a ring; nothing is measured on the
wire). Part 3: how far each hook's parameters end from plain DDP, and the loss curves (the
handbook: low-rank compression affects convergence). Part 4: the hooks torch 2.13 refuses or
breaks on gloo, each with its exact error. The default run is short already (16 steps of a
32-64-32 network): --quick runs the same.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math
import os
import re
import traceback
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, quantization_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.dist_count import counting
from common.error_types import UsageError
from common.figures import new_figure
from common.launch import launch, preload_for_ddp
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import FLOAT32_MOVED_SHARE, refuse_still_weights
from common.units import MiB, fmt_bytes
from lecture15.ddp_sim import DEFAULT_FIRST_BUCKET_BYTES, assign_buckets

D_IN, HIDDEN, D_OUT = 32, 64, 32   # Linear(32, 64) → tanh → Linear(64, 32): two matrices PowerSGD compresses
ELEM = 4                           # float32: what DDP's hooks are written for (fp16 halves it)
START_ITER = 2                     # PowerSGD's plain steps first: the fewest torch allows with error feedback
DISTANCE_STEP = 8                  # Part 3: the distance from plain DDP after this many steps, and at the end
# "DDP (no hook)" is plain DDP; the rest are torch's hooks, each with the state it takes.
HOOKS: dict[str, tuple[Callable[[], Any], Callable[..., Any]] | None] = {
    "DDP (no hook)": None,
    "allreduce_hook": (lambda: None, default_hooks.allreduce_hook),
    "fp16_compress_hook": (lambda: None, default_hooks.fp16_compress_hook),
    "PowerSGD r=1, error feedback": (lambda: psgd.PowerSGDState(
        None, matrix_approximation_rank=1, start_powerSGD_iter=START_ITER, use_error_feedback=True),
        psgd.powerSGD_hook),
    "PowerSGD r=1, no error feedback": (lambda: psgd.PowerSGDState(
        None, matrix_approximation_rank=1, start_powerSGD_iter=START_ITER, use_error_feedback=False),
        psgd.powerSGD_hook),
}
# Registered as torch names them (no wrapper): what a student who tries them on gloo meets.
BROKEN: dict[str, tuple[Callable[[], Any], Callable[..., Any]]] = {
    "bf16_compress_hook": (lambda: None, default_hooks.bf16_compress_hook),
    "batched_powerSGD_hook": (lambda: psgd.PowerSGDState(None, matrix_approximation_rank=1,
                                                         start_powerSGD_iter=START_ITER),
                              psgd.batched_powerSGD_hook),
    "quantization_pertensor_hook": (lambda: None, quantization_hooks.quantization_pertensor_hook),
}
# Whether each fails, and how: the names its row (lecture15/engines.toml) and its reason use.
BROKEN_VALUES = {"bf16_compress_hook": ("bf16_compress_hook_fails", "bf16_compress_hook_error"),
                 "batched_powerSGD_hook": ("batched_powerSGD_hook_fails", "batched_powerSGD_hook_error"),
                 "quantization_pertensor_hook": ("quantization_pertensor_hook_fails",
                                                 "quantization_pertensor_hook_error")}
# CPU time here (measured at W = 4 on 2 cores: import torch 2.3 s, torch._dynamo 1.9 s, then five
# trainings of `steps` steps, 3.2 s at 30): each step one to three small all-reduces that 4 ranks on 2
# cores take turns at, 9-12 ms each, so the all-reduces are the trainings' time. 16 steps at lr 1
# part the two PowerSGD runs as far as 30 at lr 0.5 did (loss 1.6× and 2.5× plain DDP's; 1.3×, 2.6×)
# with 136 all-reduces instead of 262.
COST = Cost([Term("1", 8.0, lambda a: 1), Term("W²", 0.05, lambda a: a.world_size**2),
             Term("W·steps", 0.013, lambda a: a.world_size * a.steps),
             Term("steps·B", 2e-6, lambda a: a.steps * a.batch)],   # five trainings of a 32-64-32 network
            # each process: torch (about 300 MiB), and the batch with its activations (float32) a few times
            memory=lambda a: (a.world_size + 1) * (300 * 2**20 + 16 * a.batch * (D_IN + HIDDEN + D_OUT)))


# reproduce.py passes --quick to every script; here it changes nothing, and says so
QUICK_HELP = "accepted, and the run is the same: the default run is already short (16 steps)"


def main() -> None:
    parser = make_parser(__doc__, world_size=4, steps=16, batch=64, lr=1.0, seed=0, real=True, figs=True,
                         cost=COST, help_for={"quick": QUICK_HELP},
                         context={"steps": "every hook trains this long", "batch": "split over the ranks"})
    args = parser.parse_args()
    check_args(args)
    rep = Report(__file__, "DDP communication hooks: allreduce, fp16, PowerSGD; bytes, distance, convergence",
                 args)
    preload_for_ddp(args.world_size)   # DDP() imports torch._dynamo: once here, not on every rank
    cfg = {"steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed}
    moved, largest = one_process_movement(cfg)
    refuse_still_weights(moved, largest, torch.finfo(torch.float32).eps,
                         f"--lr {args.lr:g} --steps {args.steps}", FLOAT32_MOVED_SHARE,
                         "a larger --lr or more --steps")
    ranks = launch(hooks_worker, args.world_size, cfg, timeout_s=args.timeout_s)
    args.world_size = len(ranks)              # under torchrun the group's size wins over the flag
    rep.part(1, "allreduce_hook against plain DDP: the hook divides by K, DDP multiplies by 1/K")
    part1_allreduce_hook(rep, args, ranks, moved)  # bit-exact at K = 2, 4, 8
    rep.part(2, "bytes a step: handed to all_reduce (counted) against ours; the ring model's price")
    part2_bytes(rep, args, ranks)             # counted bytes = buckets × payload; the ring's price
    rep.part(3, "distance from plain DDP and convergence: the handbook's 'low-rank compression affects it'")
    part3_convergence(rep, args, ranks)       # distance from plain DDP, loss curves (figure)
    rep.part(4, "hooks torch refuses or breaks on gloo (CPU), registered as torch names them")
    part4_broken(rep, ranks)                  # bf16, batched PowerSGD, quantization on gloo
    rep.finish()


# ---- rank code ----------------------------------------------------------------------------------
def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(D_IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, D_OUT))


def make_data(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A teacher network of the same shape labels random inputs: the student can fit it exactly."""
    x = torch.randn(batch, D_IN, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return x, make_model(seed + 1000)(x)


def one_process_movement(cfg: dict[str, Any]) -> tuple[float, float]:
    """(how far plain SGD on the whole batch moves the weights in `steps` steps, the largest
    weight): what DDP equals, so what a gap between two DDP trainings is judged against."""
    model = make_model(cfg["seed"])
    before = [p.detach().clone() for p in model.parameters()]
    x, y = make_data(cfg["batch"], cfg["seed"])
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    for _ in range(cfg["steps"]):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    after = [p.detach() for p in model.parameters()]
    return max_gap(after, before), max(float(p.abs().max()) for p in before)


def train(name: str, rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """`steps` SGD steps of DDP with hook `name`: each step's local loss and every all-reduce's
    input (dtype, bytes) counted in the process group, parameters after DISTANCE_STEP and at the end."""
    ddp = DDP(make_model(cfg["seed"]))
    if HOOKS[name] is not None:
        state, hook = HOOKS[name]
        ddp.register_comm_hook(state(), hook)
    x, y = (t.tensor_split(world)[rank] for t in make_data(cfg["batch"], cfg["seed"]))
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg["lr"])
    losses, calls, snapshot = [], [], []
    for step in range(1, cfg["steps"] + 1):
        opt.zero_grad()
        with counting() as counts:   # a hook calls dist.all_reduce: every tensor it hands over is seen
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
        opt.step()
        losses.append(loss.item())
        calls.append([(dtype, nbytes) for op, dtype, nbytes in counts.tensors if op == "all_reduce"])
        if step == min(DISTANCE_STEP, cfg["steps"]):
            snapshot = [p.detach().clone() for p in ddp.parameters()]
    params = [p.detach().clone() for p in ddp.parameters()]
    del ddp   # before the next DDP or the group's end (a live DDP object at exit aborted ranks here)
    return {"losses": losses, "calls": calls, "early": snapshot, "params": params}


def try_broken(name: str, rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """A hook registered and run for START_ITER + 1 steps (PowerSGD's first compressed one): the
    error it ends in, whole, and the function of torch's that raised it (an AssertionError has no text)."""
    state, hook = BROKEN[name]
    ddp = DDP(make_model(cfg["seed"]))
    x, y = (t.tensor_split(world)[rank] for t in make_data(cfg["batch"], cfg["seed"]))
    try:
        ddp.register_comm_hook(state(), hook)
        for _ in range(START_ITER + 1):
            F.mse_loss(ddp(x), y).backward()
    except Exception as err:  # noqa: BLE001 - the error is the finding, reported whole
        return described(err)
    finally:
        del ddp
    return {"error": "", "raised_in": "", "whole": ""}


def described(err: Exception) -> dict[str, str]:
    """An error as a reader meets it: its innermost error's first line (DDP wraps an error raised in
    a hook's callback twice, with the callback's frames under "At:"), and the function that raised
    it (an AssertionError of torch's has no text of its own)."""
    text = f"{type(err).__name__}: {err}".rstrip(": ")
    inner = text.split("when running the callback: ")[-1].splitlines()[0]
    at = re.search(r"/([^/\s]+\.py)\(\d+\): (\w+)", text)    # the callback's frame, innermost first
    frame = traceback.extract_tb(err.__traceback__)[-1]
    where = (at.group(2), at.group(1)) if at else (frame.name, os.path.basename(frame.filename))
    return {"error": inner, "raised_in": f"{where[0]} ({where[1]})", "whole": innermost_frames(text)}


def innermost_frames(text: str) -> str:
    """The error's text with each "At:" list of frames cut to its innermost, path from the package.

    A callback that runs at once (its future already done) is given the caller's whole stack, one
    run later on gloo's thread only its own frame: which happens is a race, so the rest is dropped.
    """
    def first(block: re.Match) -> str:
        frame = block.group(1).strip().splitlines()[0].strip()
        return "At:\n  " + re.sub(r"^.*/site-packages/", "", frame) + "\n"
    return re.sub(r"At:\n((?:  .*\n?)+)", first, text)


def hooks_worker(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    return {"runs": {name: train(name, rank, world, cfg) for name in HOOKS},
            "broken": {name: try_broken(name, rank, world, cfg) for name in BROKEN}}


# ---- our side: what a hook should hand to all_reduce, from the layers' shapes --------------------
DEFAULT_CAP_BYTES = 25 * MiB   # DDP's bucket_cap_mb=None: 25 MiB, the first bucket 1 MiB


def param_shapes() -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in make_model(0).parameters()]


def powersgd_payload(shapes: list[tuple[int, ...]], rank: int, min_rate: float = 2.0) -> list[int]:
    """Elements of PowerSGD's three all-reduces for one bucket: the tensors it leaves whole
    (vectors, and matrices that rank-r factors would not shrink `min_rate`-fold), then P (n×r
    per matrix) and Q (m×r per matrix). Its error feedback changes what is sent, not how much."""
    whole, p_elems, q_elems = 0, 0, 0
    for shape in shapes:
        n, m = shape[0], math.prod(shape[1:])
        r = min(n, m, rank)
        if (n + m) * r * min_rate < n * m:
            p_elems, q_elems = p_elems + n * r, q_elems + m * r
        else:
            whole += n * m
    return [whole, p_elems, q_elems]


def predicted_calls(name: str, shapes: list[tuple[int, ...]]) -> list[int]:
    """Input bytes of each all_reduce hook `name` makes in a compressed step: DDP's buckets by
    ddp_sim's rule (backward order, 1 MiB then 25 MiB), each bucket as the hook packs it."""
    sizes = [math.prod(s) * ELEM for s in shapes]
    calls = []
    for bucket in assign_buckets(sizes, DEFAULT_CAP_BYTES, DEFAULT_FIRST_BUCKET_BYTES):
        elems = sum(sizes[i] for i in bucket) // ELEM
        if name.startswith("PowerSGD"):
            calls += [n * ELEM for n in powersgd_payload([shapes[i] for i in bucket], rank=1)]
        else:
            calls.append(elems * (2 if name == "fp16_compress_hook" else ELEM))
    return calls


def ring_price(world: int, call_bytes: list[int]) -> float:
    """Ring model (costmodel): the bytes a rank would send for these all-reduces on a ring, 2(K−1)/K
    of each input. A price, not a measurement: gloo's own algorithm may route them otherwise."""
    return sum(algorithm("ring all-reduce").busiest_bytes(world, n) for n in call_bytes)


def max_gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def match_words(gap: float) -> str:
    """What a gap between two trainings is, in the words the output uses: "bit-exact" only at 0."""
    return "bit-exact" if gap == 0 else f"within round-off, {gap:.3g}"


# ---- the parts: the parent compares and prints ----------------------------------------------------
def part1_allreduce_hook(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]],
                         moved: float) -> None:
    gap = max(max_gap(r["runs"]["allreduce_hook"]["params"], r["runs"]["DDP (no hook)"]["params"])
              for r in ranks)
    words = match_words(gap)
    rep.value("allreduce_hook_vs_ddp", gap)
    rep.value("allreduce_hook_match", words)
    # the row says bit-exact where it should be (K = 4); the mark only that the two train alike,
    # judged against how far the weights moved (a hook that forgets 1/K is K−1 times the movement off)
    same, _ = rep.mark_trained("allreduce_hook", gap, moved, share=FLOAT32_MOVED_SHARE,
                               against="DDP without a hook")
    rep.table(["hook", "trained", "max |Δparam| from DDP without a hook", "expected",
               f"within {FLOAT32_MOVED_SHARE:g} of the movement"],
              [["allreduce_hook", f"{args.steps} SGD steps, lr {args.lr:g}, {args.world_size} ranks",
                f"{gap:.3g} ({words}), every rank" if gap == 0 else f"{words}, every rank",
                rep.notes_text("EN-L15-hook-allreduce-equals-ddp"), same]],
              name="allreduce_hook")
    rep.compare_with_notes(in_table=True)
    rep.note("with a hook registered DDP no longer scales the gradients itself: allreduce_hook divides the "
             "bucket by K, then all-reduces it; without a hook the Reducer multiplies each gradient by 1/K "
             "as it copies it into the bucket (its 'reducer::mul_out'), then all-reduces. The two round "
             "alike when 1/K is exact in binary (K = 2, 4, 8: bit-exact); at other K they may differ in "
             "the last bit of a step, and the training carries that on (a hook that multiplies by 1/K "
             "instead is bit-exact at 3 ranks too).")


SHORT = {"allreduce_hook": "allreduce", "fp16_compress_hook": "fp16",
         "PowerSGD r=1, error feedback": "psgd_ef", "PowerSGD r=1, no error feedback": "psgd_noef"}
# The values the rows of lecture15/engines.toml compare, under the names they write (grep finds both):
# each hook's bytes a step counted and by our rule, and PowerSGD's each call's bytes.
BYTES = {"allreduce_hook": ("allreduce_bytes_counted", "allreduce_bytes_predicted"),
         "fp16_compress_hook": ("fp16_bytes_counted", "fp16_bytes_predicted"),
         "PowerSGD r=1, error feedback": ("psgd_ef_bytes_counted", "psgd_ef_bytes_predicted"),
         "PowerSGD r=1, no error feedback": ("psgd_noef_bytes_counted", "psgd_noef_bytes_predicted")}
CALL_BYTES = {"allreduce_hook": ("allreduce_call_bytes_counted", "allreduce_call_bytes_predicted"),
              "fp16_compress_hook": ("fp16_call_bytes_counted", "fp16_call_bytes_predicted"),
              "PowerSGD r=1, error feedback": ("psgd_ef_call_bytes_counted", "psgd_ef_call_bytes_predicted"),
              "PowerSGD r=1, no error feedback": ("psgd_noef_call_bytes_counted",
                                                  "psgd_noef_call_bytes_predicted")}
# ... and after the steps, how far each hook's training is from plain DDP's, and its final loss over it
DISTANCE = {"allreduce_hook": ("allreduce_distance", "allreduce_loss_ratio"),
            "fp16_compress_hook": ("fp16_distance", "fp16_loss_ratio"),
            "PowerSGD r=1, error feedback": ("psgd_ef_distance", "psgd_ef_loss_ratio"),
            "PowerSGD r=1, no error feedback": ("psgd_noef_distance", "psgd_noef_loss_ratio")}


def part2_bytes(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    k, shapes, rows = args.world_size, param_shapes(), []
    plain = sum(predicted_calls("allreduce_hook", shapes))
    # (hook, rank) pairs whose calls, step by step, are not rank 0's: the table shows rank 0's alone
    uneven = sum(r["runs"][n]["calls"] != ranks[0]["runs"][n]["calls"] for n in SHORT for r in ranks)
    for name, short in SHORT.items():
        counted = ranks[0]["runs"][name]["calls"][-1]            # the last step: PowerSGD compresses by then
        got, want = [n for _, n in counted], predicted_calls(name, shapes)
        rows.append([name, "/".join(sorted({d for d, _ in counted})), "+".join(map(str, got)),
                     "+".join(map(str, want)), f"{sum(got) / plain:.3f}", fmt_bytes(ring_price(k, got))])
        (counted_bytes, predicted_bytes), (counted_each, predicted_each) = BYTES[name], CALL_BYTES[name]
        rep.value(counted_bytes, sum(got))
        rep.value(predicted_bytes, sum(want))
        rep.value(f"{short}_ring_sent", ring_price(k, got))
        rep.value(f"{short}_calls_counted", len(got))
        rep.value(f"{short}_calls_predicted", len(want))
        # each call's bytes in order: the rows judge the calls, not only their sum
        rep.value(counted_each, "+".join(map(str, got)))
        rep.value(predicted_each, "+".join(map(str, want)))
    rep.table(["hook", "dtype", "bytes counted", "our rule's bytes", "÷ allreduce_hook's",
               "ring model: bytes sent per rank"], rows, name="bytes_per_step")
    rep.compare_with_notes(in_table=True)
    same = rep.mark("calls handed to all_reduce (counted): every rank as rank 0", uneven == 0,
                    f"max |difference| {uneven:.3g}, above the tolerance 0")
    rep.line(f"  every rank counted the same calls as rank 0 at every step: {same}")
    early = [n for _, n in ranks[0]["runs"]["PowerSGD r=1, error feedback"]["calls"][0]]
    buckets = len(predicted_calls("allreduce_hook", shapes))
    rep.note(f"a compressed step (the last of {args.steps}), one figure per all_reduce call. Counted: the "
             "bytes of each tensor the hook handed to all_reduce, seen in the process group (dist_count). "
             f"Ours: DDP's buckets by the simulator's rule ({buckets} here), "
             "fp16 2 bytes an element, PowerSGD three all-reduces a bucket: the tensors it leaves whole (the "
             "biases), P = Σ n·r and Q = Σ m·r over the matrices it factors. Ring model: the cost model's "
             "price of the counted calls, 2(K−1)/K of each input sent by a rank on a ring; not measured on "
             "the wire here (gloo's own algorithm may route them otherwise). Its first "
             f"{START_ITER} steps all-reduce the whole bucket ({' + '.join(fmt_bytes(n) for n in early)}, "
             "counted).")


def global_losses(ranks: list[dict[str, Any]], name: str) -> list[float]:
    """The whole batch's loss at each step: equal shards, so the mean of the ranks' means."""
    per_rank = [r["runs"][name]["losses"] for r in ranks]
    return [sum(step) / len(step) for step in zip(*per_rank)]


# Part 3's checks of ours (engines.toml), beside the column each judges
EXPECTED = {"fp16_compress_hook": ("Δparam", "EN-L15-hook-fp16-distance"),
            "PowerSGD r=1, error feedback": ("loss ÷", "EN-L15-hook-powersgd-ef-slows"),
            "PowerSGD r=1, no error feedback": ("loss ÷", "EN-L15-hook-powersgd-noef-stalls")}


def part3_convergence(rep: Report, args: argparse.Namespace, ranks: list[dict[str, Any]]) -> None:
    exact = global_losses(ranks, "DDP (no hook)")
    curves, rows = {}, []
    for name in HOOKS:
        curves[name] = losses = global_losses(ranks, name)
        early = max(max_gap(r["runs"][name]["early"], r["runs"]["DDP (no hook)"]["early"]) for r in ranks)
        end = max(max_gap(r["runs"][name]["params"], r["runs"]["DDP (no hook)"]["params"]) for r in ranks)
        rows.append([name, f"{early:.2g}", f"{end:.2g}", f"{losses[0]:.4g}", f"{losses[-1]:.4g}",
                     f"{losses[-1] / exact[-1]:.3g}",
                     f"{EXPECTED[name][0]} {rep.notes_text(EXPECTED[name][1])}" if name in EXPECTED else ""])
        if name in DISTANCE:
            distance, loss_ratio = DISTANCE[name]
            rep.value(distance, end)
            rep.value(loss_ratio, losses[-1] / exact[-1])
    at = min(DISTANCE_STEP, args.steps)
    rep.table(["hook", f"max |Δparam| after {at} steps", f"after {args.steps} steps", "loss, step 1",
               f"loss, step {args.steps}", "final loss ÷ plain DDP's", "expected"],
              rows, name="convergence")
    rep.compare_with_notes(in_table=True)
    rep.note(f"SGD, lr {args.lr:g}, the same {args.batch} samples every step (a teacher network labels "
             f"them, so the loss can reach 0); PowerSGD all-reduces whole gradients for its first "
             f"{START_ITER} steps. "
             "Without error feedback rank-1 PowerSGD applies only the gradient's top direction each step and "
             "drops the rest; with it each rank adds back what compression dropped the step before.")
    if rep.figure_dir() is not None:   # matplotlib (1-2 s to import) only when a figure was asked for
        rep.save_figure(convergence_figure(curves, exact, args.world_size), "convergence")


def convergence_figure(curves: dict[str, list[float]], exact: list[float], world_size: int) -> Any:
    """Each hook's loss against the step, plain DDP's among them."""
    fig, ax = new_figure(figsize=(7, 4))
    for name, losses in curves.items():
        ax.semilogy(range(1, len(losses) + 1), losses, label=name,
                    linestyle="--" if "allreduce" in name else "-")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (whole batch)")
    ax.set_title(f"DDP comm hooks on {world_size} gloo ranks: loss against plain DDP")
    # curves within 0.1 % of plain DDP's at the end draw one line: say so, or the legend names lines
    # the reader cannot find
    same = [name for name, losses in curves.items() if abs(losses[-1] / exact[-1] - 1) < 1e-3]
    ax.legend(fontsize=8, title_fontsize=8,
              title=f"one line: {', '.join(same)}" if len(same) > 1 else None)
    return fig


def part4_broken(rep: Report, ranks: list[dict[str, Any]]) -> None:
    for name in BROKEN:
        seen: dict[str, list[int]] = {}            # each error as the ranks met it -> those ranks
        for rank, r in enumerate(ranks):
            seen.setdefault(r["broken"][name]["error"] or "(none: it ran)", []).append(rank)
        where = ranks[0]["broken"][name]["raised_in"]
        rep.line(f"  {name}: raised in {where}" if where else f"  {name}: it ran")
        for error, on in seen.items():
            rep.line(f"    rank{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}: {error}")
        fails, error = BROKEN_VALUES[name]
        rep.value(fails, all(r["broken"][name]["error"] for r in ranks))
        rep.value(error, " / ".join(seen))
        # in --json, every line of it
        rep.value(f"{name}_whole_error", ranks[0]["broken"][name]["whole"], compared=False)
    rep.compare_with_notes(in_table=True)
    rep.note("bf16_compress_hook is refused by its name when it is registered, though gloo all-reduces "
             "bfloat16 on the CPU (handbook_details.py Part 2 runs it under another name). The batched "
             "PowerSGD hook packs a bucket into one square matrix and hands its 2-D factor to "
             "_orthogonalize, which in 2.13 takes only a batch of matrices (3-D): nothing here is gloo's "
             "doing. The quantization hook takes fut.wait()[0] of its all-gather as the list of every rank's "
             "(scale, zero), but here it is rank 0's pair alone: indexing it by rank, ranks 0 and 1 get a "
             "number, the others run off its end; DDP reports the error wrapped twice.")


def check_args(args: argparse.Namespace) -> None:
    if args.world_size < 2:
        raise UsageError(f"--world-size must be at least 2 (a hook all-reduces between ranks), "
                         f"got {args.world_size}")
    if args.batch % args.world_size:
        raise UsageError(f"--batch {args.batch} must be a multiple of --world-size {args.world_size} "
                         "(equal shards: the ranks' mean losses then average to the whole batch's)")
    if args.steps <= START_ITER:
        raise UsageError(f"--steps must be above {START_ITER}: PowerSGD compresses from step "
                         f"{START_ITER + 1}")


if __name__ == "__main__":
    run_main(main)
