"""Lecture 15 §4 (三个细节): no_sync and gradient accumulation, unused parameters, BatchNorm buffers.

    python code/lecture15/04_details.py                # 2 gloo ranks on the CPU
    python code/lecture15/04_details.py --micro-batches 8 --steps 5

Each part is one launch of real DDP ranks; the ranks return what they saw, the parent prints it.
A comm hook counts the all-reduces DDP launches (one per bucket; these models fit in one bucket).
"""

# No `from __future__ import annotations`: DDP checks a comm hook's annotation is dist.GradBucket itself.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import copy
import re
import statistics
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import make_parser
from common.error_types import UsageError
from common.launch import capture_stderr, launch, preload_for_ddp
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import fmt_time
from lecture14.data_parallel import flat_params

DATA_SEED = 1234
IN, HIDDEN = 8, 16           # Part 1's model: 8 -> 16 -> 1, far below one bucket's cap
MICRO_BATCH = 4              # samples per micro-batch and rank
LR = 0.1
# Part 1 in float64: accumulation on W ranks = one process up to rounding. The self-check judges the
# gap against how far the weights moved (Report.check_trained); the notes' "the same result" row asks
# for round-off as well as bit-identical ranks.
SAME_TRAINING_TOL = 1e-12
MODES = {                    # Part 1: where the no_sync() context goes
    "sync": "synchronise every micro-batch",
    "backward": "no_sync around backward only (wrong)",
    "forward": "no_sync around forward + backward, last one outside",
}

# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up, Part 1's steps of M micro-batches,
# Part 2's timed steps of an L-layer MLP (16 wide) in two DDPs, on W ranks sharing 2 cores. Memory:
# Part 2's two models, about 1 KiB a layer four times over, in every rank.
COST = Cost([Term("1", 8.8, lambda a: 1), Term("W²", 0.032, lambda a: a.world_size**2),
             Term("W·steps·M", 0.027, lambda a: a.world_size * a.steps * a.micro_batches),
             Term("timing-steps·L·W", 0.00043, lambda a: a.timing_steps * a.layers * a.world_size)],
            memory=lambda a: (a.world_size + 1) * 8 * 1100 * a.layers)


def main() -> None:
    parser = make_parser(__doc__, world_size=2, steps=3, micro_batches=4, layers=64, timing_steps=30,
                         real=True, cost=COST, quick={"steps": 2, "layers": 4, "timing_steps": 5},
                         context={"steps": "Part 1's optimiser steps", "micro_batches": "Part 1",
                                  "layers": "Part 2's timing model", "timing_steps": "Part 2"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError(f"--world-size {args.world_size}: these parts compare ranks, use at least 2")
    # DDP() imports torch._dynamo, and so does Part 1's one-process reference (its optimizer)
    preload_for_ddp(args.world_size, parent_too=True)
    rep = Report(__file__, "no_sync, unused parameters and buffers in real DDP", args)
    rep.part(1, "no_sync and gradient accumulation")  # where no_sync must go, counted by a comm hook
    part1_no_sync(rep, args)
    rep.part(2, "unused parameters")  # the default's error, find_unused_parameters' grads and cost
    part2_unused_parameters(rep, args)
    rep.part(3, "buffers: rank 0's BatchNorm statistics win")  # broadcast at the start of each forward
    part3_buffers(rep, args)
    rep.finish()


# ---- Part 1: no_sync, three ways ------------------------------------------------------------------
def counting_hook(state: dict[str, int], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default hook plus a counter. The parameter must be called `bucket`; with a hook
    registered DDP no longer divides by the world size, so we do (SUM then divide is portable)."""
    state["allreduces"] += 1
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)).double()


def accumulation_data(steps: int, micro: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x[step, micro-batch, rank] and y[...]: every rank can make all of it and take its own slice."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(steps, micro, world_size, MICRO_BATCH, IN, generator=gen, dtype=torch.float64)
    return x, x.sum(-1, keepdim=True).sin()


def accumulate(ddp: DDP, mode: str, xs: torch.Tensor, ys: torch.Tensor) -> None:
    """One optimiser step's micro-batches, with no_sync placed as `mode` says."""
    micro = len(xs)
    for m, (xb, yb) in enumerate(zip(xs, ys)):
        if mode == "sync" or m == micro - 1:    # the last micro-batch always synchronises
            (nn.functional.mse_loss(ddp(xb), yb) / micro).backward()
        elif mode == "backward":
            loss = nn.functional.mse_loss(ddp(xb), yb) / micro  # forward outside: DDP already armed
            with ddp.no_sync():
                loss.backward()
        else:
            with ddp.no_sync():  # forward inside: DDP reads the flag here and skips the sync
                (nn.functional.mse_loss(ddp(xb), yb) / micro).backward()


def no_sync_worker(rank: int, world_size: int, steps: int, micro: int) -> dict[str, Any]:
    """The same accumulation written three ways; all-reduces counted per optimiser step."""
    x, y = accumulation_data(steps, micro, world_size)
    out: dict[str, Any] = {}
    for mode in MODES:
        ddp = DDP(mlp())
        state = {"allreduces": 0}
        ddp.register_comm_hook(state, counting_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        counts = []
        for step in range(steps):
            opt.zero_grad()
            before = state["allreduces"]
            accumulate(ddp, mode, x[step, :, rank], y[step, :, rank])
            opt.step()
            counts.append(state["allreduces"] - before)
        out[mode] = {"params": flat_params(ddp.module).numpy(), "counts": counts}
        del ddp, opt
    return out


def reference_accumulation(steps: int, micro: int, world_size: int) -> tuple[np.ndarray, float]:
    """One process, all ranks' micro-batches: the gradient DDP should reproduce (average over ranks);
    the trained parameters and how far they moved (what Part 1's check is judged against)."""
    x, y = accumulation_data(steps, micro, world_size)
    model = mlp()
    before = flat_params(model).numpy().copy()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        opt.zero_grad()
        for xb, yb in zip(x[step].flatten(0, 1), y[step].flatten(0, 1)):
            (nn.functional.mse_loss(model(xb), yb) / (micro * world_size)).backward()
        opt.step()
    after = flat_params(model).numpy()
    return after, float(np.abs(after - before).max())


def part1_no_sync(rep: Report, args) -> None:
    steps, micro = args.steps, args.micro_batches
    results = launch(no_sync_worker, args.world_size, steps, micro, timeout_s=args.timeout_s)
    reference, moved = reference_accumulation(steps, micro, args.world_size)
    rows = []
    for mode, label in MODES.items():
        ranks_equal = all(np.array_equal(r[mode]["params"], results[0][mode]["params"]) for r in results)
        rows.append([label, " ".join(map(str, results[0][mode]["counts"])), ranks_equal])
    rep.table(["how", "all-reduces per step", "ranks identical"], rows, name="no_sync")
    # the three placements against one process: the check below, once (not a column of the same gap too)
    gap = max(float(np.abs(r[mode]["params"] - reference).max()) for mode in MODES for r in results)
    rep.check_trained(f"no_sync accumulation on {args.world_size} ranks (3 placements)", gap, moved)
    per_step = [results[0][mode]["counts"][0] for mode in MODES]
    rep.note(f"{args.world_size} ranks, {micro} micro-batches of {MICRO_BATCH} samples per step, {steps} "
             "steps, loss / micro-batches, float64; one bucket, so syncing every micro-batch costs "
             f"{micro} all-reduces a step. One process: every rank's micro-batches in one.")
    rep.value("only_forward_saves", per_step == [micro, micro, 1])
    rep.value("same_result", all(r[2] for r in rows)
               and gap < SAME_TRAINING_TOL)
    rep.value("allreduces_per_step", " ".join(map(str, per_step)))


# ---- Part 2: unused parameters -----------------------------------------------------------------------
class Branchy(nn.Module):
    """`a` is always used, `b` only when asked, `never` never: a conditional branch / an idle expert."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.never = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, use_b: bool) -> torch.Tensor:
        h = self.a(x)
        return (h + self.b(x) if use_b else h).pow(2).sum()


def grad_or_none(p: nn.Parameter) -> np.ndarray | None:
    return None if p.grad is None else p.grad.detach().numpy().copy()


def time_find_unused(layers: int, steps: int) -> tuple[list[float], list[float], str]:
    """Seconds per forward+backward without and with find_unused_parameters, every parameter used, and
    torch's warning (captured: the parent shows it). The two take turns, so a burst of load hits both."""
    def deep_mlp() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(16, 16), nn.Tanh())])

    plain, searching = DDP(deep_mlp()), DDP(deep_mlp(), find_unused_parameters=True)
    x = torch.randn(16, 16)
    times: tuple[list[float], list[float]] = ([], [])
    with capture_stderr() as warned:
        for i in range(steps + 2):
            for ddp, samples in zip((plain, searching), times):
                dist.barrier()  # start together, so one rank's lag is not counted as the other's cost
                start = time.perf_counter()
                ddp(x).sum().backward()
                if i >= 2:  # two warm-up steps: the first builds, the second rebuilds the buckets
                    samples.append(time.perf_counter() - start)
        # One more step of each under the profiler: the all-reduces DDP issued (the gradient bucket's,
        # and with find_unused_parameters=True the 'used' bitmap's, which no comm hook sees).
        calls = []
        for ddp in (plain, searching):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                ddp(x).sum().backward()
            calls.append(sum(1 for e in prof.events() if e.name == "c10d::allreduce_"))
    del plain, searching
    return times[0], times[1], "".join(warned), calls


def unused_worker(rank: int, world_size: int, layers: int, steps: int) -> dict[str, Any]:
    """The default DDP fails on an unused branch; find_unused_parameters=True copes, at a cost."""
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(DATA_SEED + rank))
    out: dict[str, Any] = {}
    ddp = DDP(Branchy())  # find_unused_parameters=False
    try:
        ddp(x, use_b=False).backward()  # b and never: no gradient, so the one bucket never fills
        ddp(x, use_b=False)             # DDP checks the previous reduction here, at the next forward
        out["error"] = None
    except RuntimeError as err:  # the staged error, raised by this rank itself before any collective
        if "Expected to have finished reduction" not in str(err):
            raise  # anything else (a peer gone, a bug) is a real failure of this rank: the launcher names it
        out["error"] = str(err)
    del ddp

    ddp = DDP(Branchy(), find_unused_parameters=True)
    local = copy.deepcopy(ddp.module)  # same (broadcast) parameters, no DDP: this rank's own gradient
    local(x, use_b=rank == 0).backward()
    ddp(x, use_b=rank == 0).backward()  # b is used on rank 0 only, never on no rank
    out["local"] = {n: grad_or_none(p) for n, p in local.named_parameters() if n.endswith("weight")}
    out["ddp"] = {n: grad_or_none(p) for n, p in ddp.module.named_parameters() if n.endswith("weight")}
    del ddp
    (out["time_default"], out["time_find_unused"], out["torch_warned"],
     out["allreduce_calls"]) = time_find_unused(layers, steps)
    return out


def show(values: np.ndarray | None) -> str:
    return "None" if values is None else np.array2string(values.reshape(-1)[:3], precision=3)


def show_error(rep: Report, results: list[dict[str, Any]]) -> None:
    """What each rank's next forward raised, and the parameters DDP names in the message."""
    rep.line("find_unused_parameters=False, branch b unused, then the next forward:")
    names = [n for n, _ in Branchy().named_parameters()]
    said: dict[str, list[int]] = {}   # what was raised -> the ranks that raised it
    for rank, res in enumerate(results):
        indices = re.search(r"did not receive grad for rank \d+: ([\d ]+)", res["error"] or "")
        unused = ", ".join(names[int(i)] for i in indices.group(1).split()) if indices else "-"
        first_sentence = (res["error"] or "no error").split(". ")[0]
        said.setdefault(f"{first_sentence}. (no gradient: {unused})", []).append(rank)
    for text, ranks in said.items():
        rep.line(f"  rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {text}")


def part2_unused_parameters(rep: Report, args) -> None:
    results = launch(unused_worker, args.world_size, args.layers, args.timing_steps, timeout_s=args.timeout_s)
    show_error(rep, results)
    rep.line("\nfind_unused_parameters=True, b used on rank 0 only, `never` nowhere (.weight.grad[:3]):")
    rows = []
    for name in results[0]["ddp"]:
        locals_ = [r["local"][name] for r in results]
        present = [g for g in locals_ if g is not None]
        expected = None if not present else sum(present) / args.world_size  # unused ranks contribute zeros
        for rank, res in enumerate(results):
            got = res["ddp"][name]
            match = (got is None) if expected is None else (got is not None and np.allclose(got, expected))
            rows.append([name, rank, show(locals_[rank]), show(expected), show(got), match])
    rep.table(["parameter", "rank", "local grad g_r", "expected sum(g_r)/W", "grad after DDP", "match"], rows,
              name="unused")
    times = {k: [t for r in results for t in r[k]] for k in ("time_default", "time_find_unused")}
    t_off, t_on = (statistics.median(ts) for ts in times.values())
    rep.table(["find_unused_parameters", "median forward+backward", "range (all steps, all ranks)"],
              [[flag, fmt_time(statistics.median(ts)), f"{fmt_time(min(ts))} – {fmt_time(max(ts))}"]
               for flag, ts in zip(("False", "True"), times.values())], name="cost")
    warned = any("find_unused_parameters=True" in r["torch_warned"] for r in results)
    rep.note(f"{args.layers} x (Linear(16, 16), Tanh), batch 16, {args.timing_steps} steps in turn with and "
             "without the option, medians over ranks: it walks the autograd graph after every forward and "
             "all-reduces the 'used' bitmap once more; the gradients are the same."
             + (" PyTorch warned it found no unused parameter (the ranks' stderr)." if warned else ""))
    rep.value("error_every_rank", all(r["error"] and "Expected to have finished reduction" in r["error"]
                                    for r in results))
    rep.value("partial_use_averaged", all(r[5] for r in rows if r[0] == "b.weight"))
    rep.value("never_grad_none", all(r["ddp"]["never.weight"] is None for r in results))
    calls = [r["allreduce_calls"] for r in results]   # per rank: [without, with] find_unused_parameters
    rep.line(f"  all-reduces in one step, every parameter used (profiler, c10d::allreduce_): "
             f"{calls[0][0]} without find_unused_parameters, {calls[0][1]} with it"
             + ("" if all(c == calls[0] for c in calls) else f" (ranks: {calls})"))
    rep.value("bitmap_extra_allreduces", min(c[1] - c[0] for c in calls))
    rep.value("allreduce_calls_text", f"{calls[0][0]} without, {calls[0][1]} with")
    rep.value("find_unused_extra_ms", (t_on - t_off) * 1e3, timed=True)
    rep.value("t_on_ms", t_on * 1e3, timed=True)
    rep.value("t_off_ms", t_off * 1e3, timed=True)


# ---- Part 3: buffers ---------------------------------------------------------------------------------
def buffers_worker(rank: int, world_size: int) -> dict[str, np.ndarray]:
    """BatchNorm with different data per rank; watch running_mean around two forwards."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 1))
    ddp = DDP(model)
    seen: dict[str, np.ndarray] = {}

    def record_start(module: nn.Module, inputs: tuple) -> None:
        # Runs after DDP's pre-forward broadcast of buffers and before BatchNorm updates them.
        seen[f"start of forward {len(seen) // 2 + 1}"] = module.running_mean.numpy().copy()

    handle = model[0].register_forward_pre_hook(record_start)
    gen = torch.Generator().manual_seed(DATA_SEED + rank)
    for i in (1, 2):
        x = torch.randn(32, 3, generator=gen) + 10.0 * rank  # rank r's data is centred at 10 r
        ddp(x).sum().backward()
        seen[f"after forward {i}"] = model[0].running_mean.numpy().copy()
    handle.remove()
    del ddp
    return seen


def part3_buffers(rep: Report, args) -> None:
    results = launch(buffers_worker, args.world_size, timeout_s=args.timeout_s)
    keys = list(results[0])
    rep.table(["rank"] + [f"running_mean, {k}" for k in keys],
              [[rank] + [show(res[k]) for k in keys] for rank, res in enumerate(results)], name="buffers")
    rep.note("Rank r's data is centred at 10 r, BatchNorm momentum 0.1. The statistics kept are rank 0's "
             "alone; SyncBatchNorm computes them across ranks.")
    first = results[0]["after forward 1"]
    rep.value("buffers_differ", not all(np.array_equal(r["after forward 1"], first) for r in results[1:]))
    rep.value("rank0_wins", all(np.array_equal(r["start of forward 2"], first) for r in results))


if __name__ == "__main__":
    run_main(main)
