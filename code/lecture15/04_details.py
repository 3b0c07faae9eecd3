"""Lecture 15 §4 (三个细节): no_sync and gradient accumulation, unused parameters, BatchNorm buffers.

    python code/lecture15/04_details.py                # 2 gloo ranks on the CPU
    python code/lecture15/04_details.py --micro-batches 8 --steps 5

Each part is one launch of real DDP ranks; the ranks return what they saw, the parent prints it.
A comm hook counts the all-reduces DDP launches (one per bucket; these models fit in one bucket).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
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

from common.cli import UsageError, make_parser, run_main
from common.launcher import capture_stderr, launch, preload_for_ddp
from common.output import MEASURED, Report, fmt_time
from lecture14.data_parallel import flat_params  # all parameters as one vector, to compare replicas

DATA_SEED = 1234
IN, HIDDEN = 8, 16           # Part 1's model: 8 -> 16 -> 1, far below one bucket's cap
MICRO_BATCH = 4              # samples per micro-batch and rank
LR = 0.1
MODES = {                    # Part 1: where the no_sync() context goes
    "sync": "synchronise every micro-batch",
    "backward": "no_sync around backward only (wrong)",
    "forward": "no_sync around forward + backward, last one outside",
}


def counting_allreduce_hook(state: dict[str, int], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default hook plus a counter. The parameter must be called `bucket`; with a hook
    registered DDP no longer divides by the world size, so we do (SUM then divide is portable)."""
    state["allreduces"] += 1
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])


def mlp(dtype: torch.dtype = torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)).to(dtype)


def accumulation_data(steps: int, micro: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x[step, micro-batch, rank] and y[...]: every rank can make all of it and take its own slice."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(steps, micro, world_size, MICRO_BATCH, IN, generator=gen, dtype=torch.float64)
    return x, x.sum(-1, keepdim=True).sin()


def no_sync_worker(rank: int, world_size: int, steps: int, micro: int) -> dict[str, Any]:
    """Part 1: the same accumulation written three ways; all-reduces counted per optimiser step."""
    x, y = accumulation_data(steps, micro, world_size)
    out: dict[str, Any] = {}
    for mode in MODES:
        ddp = DDP(mlp())
        state = {"allreduces": 0}
        ddp.register_comm_hook(state, counting_allreduce_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        counts = []
        for step in range(steps):
            opt.zero_grad()
            before = state["allreduces"]
            for m in range(micro):
                last = m == micro - 1
                xb, yb = x[step, m, rank], y[step, m, rank]
                if mode == "sync" or last:
                    loss = nn.functional.mse_loss(ddp(xb), yb) / micro
                    loss.backward()
                elif mode == "backward":
                    loss = nn.functional.mse_loss(ddp(xb), yb) / micro  # forward outside: DDP already armed
                    with ddp.no_sync():
                        loss.backward()
                else:
                    with ddp.no_sync():  # forward inside: DDP reads the flag here and skips the sync
                        (nn.functional.mse_loss(ddp(xb), yb) / micro).backward()
            opt.step()
            counts.append(state["allreduces"] - before)
        out[mode] = {"params": flat_params(ddp.module).numpy(), "counts": counts}
        del ddp, opt
    return out


def reference_accumulation(steps: int, micro: int, world_size: int) -> np.ndarray:
    """One process, all ranks' micro-batches: the gradient DDP should reproduce (average over ranks)."""
    x, y = accumulation_data(steps, micro, world_size)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        opt.zero_grad()
        for m in range(micro):
            for r in range(world_size):
                (nn.functional.mse_loss(model(x[step, m, r]), y[step, m, r]) / (micro * world_size)).backward()
        opt.step()
    return flat_params(model).numpy()


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


def deep_mlp(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(16, 16), nn.Tanh())])


def time_find_unused(layers: int, steps: int) -> tuple[list[float], list[float], str]:
    """Seconds per forward+backward without and with find_unused_parameters, every parameter used,
    and the warning torch prints about it (captured, so the parent shows it beside the timing).
    The two models take turns step by step, so a burst of load on the shared cores hits both."""
    plain, searching = DDP(deep_mlp(layers)), DDP(deep_mlp(layers), find_unused_parameters=True)
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
    del plain, searching
    return times[0], times[1], "".join(warned)


def unused_worker(rank: int, world_size: int, layers: int, steps: int) -> dict[str, Any]:
    """Part 2: the default DDP fails on an unused branch; find_unused_parameters=True copes, at a cost."""
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(DATA_SEED + rank))
    out: dict[str, Any] = {}
    ddp = DDP(Branchy())  # find_unused_parameters=False
    try:
        ddp(x, use_b=False).backward()  # b and never: no gradient, so the one bucket never fills
        ddp(x, use_b=False)             # DDP checks the previous reduction here, at the next forward
        out["error"] = None
    except RuntimeError as err:
        out["error"] = str(err)
    del ddp

    ddp = DDP(Branchy(), find_unused_parameters=True)
    local = copy.deepcopy(ddp.module)  # same (broadcast) parameters, no DDP: this rank's own gradient
    local(x, use_b=rank == 0).backward()
    ddp(x, use_b=rank == 0).backward()  # b is used on rank 0 only, never on no rank
    out["local"] = {n: grad_or_none(p) for n, p in local.named_parameters() if n.endswith("weight")}
    out["ddp"] = {n: grad_or_none(p) for n, p in ddp.module.named_parameters() if n.endswith("weight")}
    del ddp
    out["time_default"], out["time_find_unused"], out["torch_warned"] = time_find_unused(layers, steps)
    return out


def buffers_worker(rank: int, world_size: int) -> dict[str, np.ndarray]:
    """Part 3: BatchNorm with different data per rank; watch running_mean around two forwards."""
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


def part1_no_sync(rep: Report, args) -> None:
    steps, micro = min(args.steps, 2) if args.quick else args.steps, args.micro_batches
    results = launch(no_sync_worker, args.world_size, steps, micro, timeout_s=args.timeout_s)
    reference = reference_accumulation(steps, micro, args.world_size)
    rows = []
    for mode, label in MODES.items():
        ranks_equal = all(np.array_equal(r[mode]["params"], results[0][mode]["params"]) for r in results)
        rows.append([label, " ".join(map(str, results[0][mode]["counts"])), ranks_equal,
                     float(np.abs(results[0][mode]["params"] - results[0]["sync"]["params"]).max()),
                     float(np.abs(results[0][mode]["params"] - reference).max())])
    rep.table(["how", "all-reduces per step", "ranks identical", "max |p - p_sync|", "max |p - 1 process|"],
              rows, name="no_sync")
    per_step = [results[0][mode]["counts"][0] for mode in MODES]
    expected = [micro, micro, 1]
    rep.line(f"  all-reduces per step (sync, backward-only no_sync, forward no_sync): "
             f"{' '.join(map(str, per_step))}; one bucket, {micro} micro-batches: expected {' '.join(map(str, expected))}")
    rep.claim("only no_sync around the forward saves all-reduces", per_step == expected, True, kind=MEASURED,
              setting=(), ref="L15-4.1-only-forward-saves",
              why="no_sync() sets a flag DDP reads at the end of forward; a backward alone inside it still syncs")
    rep.claim("the three ways give the same parameters on every rank, equal to one process (float64, "
              "max diff < 1e-12)", all(r[2] for r in rows) and max(max(r[3], r[4]) for r in rows) < 1e-12,
              notes=True, kind=MEASURED, setting=(), ref="L15-4.1-same-result",
              why="all-reduce is linear: averaging each micro-batch or only their sum gives one gradient")
    rep.note(f"{args.world_size} ranks, {micro} micro-batches of {MICRO_BATCH} samples per step, {steps} steps, "
             "loss / micro-batches, float64.\nno_sync() only sets a flag that DDP reads in forward: a forward "
             "outside it arms the gradient hooks, so the backward inside still synchronises.\n"
             "All-reduce is linear, so syncing each micro-batch or only the sum gives the same gradient;\n"
             "the last column compares with one process running every rank's micro-batches.")


def first_sentence(message: str | None) -> str:
    return "no error" if not message else message.split(". ")[0].strip() + "."


def show(values: np.ndarray | None) -> str:
    return "None" if values is None else np.array2string(values.reshape(-1)[:3], precision=3)


def part2_unused_parameters(rep: Report, args) -> None:
    layers, steps = (4, 5) if args.quick else (args.layers, args.timing_steps)
    results = launch(unused_worker, args.world_size, layers, steps, timeout_s=args.timeout_s)
    rep.line("find_unused_parameters=False, branch b unused, then the next forward, on each rank:")
    names = [n for n, _ in Branchy().named_parameters()]
    for rank, res in enumerate(results):
        rep.line(f"  rank {rank}: {first_sentence(res['error'])}")
        indices = re.search(r"did not receive grad for rank \d+: ([\d ]+)", res["error"] or "")
        if indices:
            unused = [names[int(i)] for i in indices.group(1).split()]
            rep.line(f"          parameters without a gradient (from the message): {', '.join(unused)}")
    rep.claim("the next forward raises 'Expected to have finished reduction ...' on every rank",
              all(r["error"] and "Expected to have finished reduction" in r["error"] for r in results),
              notes=True, kind=MEASURED, setting=(), ref="L15-4.2-error",
              why="b's bucket never fills, so the reduction of that iteration is still pending at the next forward")
    rep.line("\nfind_unused_parameters=True, b used on rank 0 only, `never` used nowhere (first 3 entries of .weight.grad):")
    w = args.world_size
    rows = []
    for name in results[0]["ddp"]:
        locals_ = [r["local"][name] for r in results]
        present = [g for g in locals_ if g is not None]
        expected = None if not present else sum(present) / w  # unused ranks contribute zeros
        for rank, res in enumerate(results):
            got = res["ddp"][name]
            match = (got is None) if expected is None else (got is not None and np.allclose(got, expected, atol=1e-7))
            rows.append([name, rank, show(locals_[rank]), show(expected), show(got), match])
    rep.table(["parameter", "rank", "local grad g_r", "expected sum(g_r)/W", "grad after DDP", "match"], rows,
              name="unused")
    b_rows = [r for r in rows if r[0] == "b.weight"]
    rep.claim(f"b (used on rank 0 only) gets g0/{w} on every rank", all(r[5] for r in b_rows), notes=True,
              kind=MEASURED, setting=(), ref="L15-4.2-partial-use",
              why="ranks that did not use b contribute zeros to its all-reduce")
    rep.claim("`never` (unused everywhere) keeps grad None", all(r["ddp"]["never.weight"] is None for r in results),
              notes=True, kind=MEASURED, setting=(), ref="L15-4.2-grad-none",
              why="the global usage bitmap says no rank used it, so DDP leaves .grad alone")
    t_off = statistics.median(t for r in results for t in r["time_default"])
    t_on = statistics.median(t for r in results for t in r["time_find_unused"])

    def spread(key: str) -> str:
        values = [t for r in results for t in r[key]]
        return f"{fmt_time(min(values))} – {fmt_time(max(values))}"

    rep.table(["find_unused_parameters", "median forward+backward", "range (all steps, all ranks)"],
              [["False", fmt_time(t_off), spread("time_default")], ["True", fmt_time(t_on), spread("time_find_unused")]],
              name="cost")
    rep.claim("extra time per iteration with find_unused_parameters=True (all parameters used)",
              (t_on - t_off) * 1e3, unit="ms", kind=MEASURED)
    rep.claim("find_unused_parameters=True is slower even when every parameter is used", t_on > t_off,
              notes=True, kind=MEASURED, setting=("world_size", "layers", "timing_steps", "quick"),
              ref="L15-4.2-find-unused-cost",
              why=f"medians {fmt_time(t_on)} against {fmt_time(t_off)}: a small difference on a loaded 2-core "
                  "machine, where noise can flip it (--quick times a smaller model)")
    rep.note(f"Timing model: {layers} x (Linear(16, 16), Tanh), batch 16, {steps} steps taken in turn with\n"
             "and without the option, medians over ranks. The option costs a walk over the autograd graph\n"
             "after every forward and one more all-reduce (of the 'used' bitmap); the gradients are the same.")
    warned = [rank for rank, r in enumerate(results) if "find_unused_parameters=True" in r["torch_warned"]]
    if warned:
        rep.note(f"PyTorch says so itself: ranks {', '.join(map(str, warned))} printed the warning "
                 "'find_unused_parameters=True was specified in DDP constructor, but did not find any unused "
                 "parameters in the forward pass' (captured from their stderr, shown here instead)")


def part3_buffers(rep: Report, args) -> None:
    results = launch(buffers_worker, args.world_size, timeout_s=args.timeout_s)
    keys = list(results[0])
    rep.table(["rank"] + [f"running_mean, {k}" for k in keys],
              [[rank] + [show(res[k]) for k in keys] for rank, res in enumerate(results)], name="buffers")
    differ = not all(np.array_equal(r["after forward 1"], results[0]["after forward 1"]) for r in results[1:])
    replaced = all(np.array_equal(r["start of forward 2"], results[0]["after forward 1"]) for r in results)
    rep.claim("running_mean differs between ranks after a forward", differ, notes=True, kind=MEASURED,
              setting=(), ref="L15-4.3-buffers-differ", why="each rank updates BatchNorm with its own data")
    rep.claim("at the next forward every rank's running_mean is rank 0's", replaced, notes=True, kind=MEASURED,
              setting=(), ref="L15-4.3-rank0-wins", why="broadcast_buffers: rank 0's buffers at the start of forward")
    rep.note("Rank r's data is centred at 10 r, BatchNorm momentum 0.1. DDP broadcasts rank 0's buffers at\n"
             "the start of each forward (broadcast_buffers / forward_sync_buffers); in between they differ,\n"
             "and the statistics kept are rank 0's alone. SyncBatchNorm computes them across ranks.")


def main() -> None:
    parser = make_parser(__doc__, world_size=2, steps=3, micro_batches=4, layers=64, timing_steps=30, real=True,
                         context={"steps": "Part 1's optimiser steps", "micro_batches": "Part 1",
                                  "layers": "Part 2's timing model", "timing_steps": "Part 2"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError(f"--world-size {args.world_size}: these parts compare ranks, use at least 2")
    preload_for_ddp(args.world_size)  # DDP() imports torch._dynamo: see there
    rep = Report(__file__, "no_sync, unused parameters and buffers in real DDP", args)
    rep.part(1, "no_sync and gradient accumulation")  # where no_sync must go, counted by a comm hook
    part1_no_sync(rep, args)
    rep.part(2, "unused parameters")  # the default's error, find_unused_parameters' grads and cost
    part2_unused_parameters(rep, args)
    rep.part(3, "buffers: rank 0's BatchNorm statistics win")  # broadcast at the start of each forward
    part3_buffers(rep, args)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
