"""Lecture 15 §1 (DDP 是什么): the process group, the broadcast at construction, and real DDP training.

    python code/lecture15/01_ddp_basics.py            # 4 gloo ranks on the CPU
    python code/lecture15/01_ddp_basics.py --world-size 3 --steps 20

Part 1 shows the torchrun-style environment every rank sees; Part 2 gives each rank a different
random initialisation, wraps it in DDP (rank 0's parameters are broadcast) and trains 10 steps on a
1/W shard each, against single-process full-batch training; Part 3 times a step on this CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import make_parser
from common.error_types import UsageError
from common.flags import positive_int
from common.launch import launch, preload_for_ddp
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.trained_weights import movement_floor
from common.units import fmt_time
from lecture14.data_parallel import flat_params

IN_FEATURES, HIDDEN = 16, 32  # Part 2's MLP: 16 -> 32 -> 1; PyTorch's default init, bound 1/sqrt(fan_in)
DATA_SEED = 1234              # the same data on every rank; each rank takes its own shard


# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up and Part 2's DDP training, then Part 3's
# timed steps of 3 Linear(w, w) (each rank's gradients all-reduced over W ranks on 2 cores). Memory:
# Part 3's model (float32) about four times in every process (weights, gradients, DDP's buckets,
# the optimizer), its batch, and Part 2's whole batch of 16 float64 features in every process.
COST = Cost([Term("1", 5.7, lambda a: 1), Term("W²", 0.02, lambda a: a.world_size**2),
             Term("W·steps", 0.012, lambda a: a.world_size * a.steps),
             Term("timing-steps·W·(w/512)²", 0.0066,
                  lambda a: a.timing_steps * a.world_size * (a.timing_width / 512) ** 2),
             Term("timing-steps·(B/128)·(w/512)²", 0.057,
                  lambda a: a.timing_steps * a.timing_batch / 128 * (a.timing_width / 512) ** 2)],
            memory=lambda a: (a.world_size + 1) * (4 * 12 * a.timing_width**2 + 16 * a.timing_batch
                                                   * a.timing_width + 2 * 8 * 16 * a.batch))


def main() -> None:
    parser = make_parser(__doc__, world_size=4, steps=10, batch=64, lr=0.1, timing_steps=15, real=True,
                         cost=COST,
                         quick={"timing_width": 128, "timing_batch": lambda a: max(64, a.world_size),
                                "timing_steps": 5},
                         context={"steps": "Part 2", "batch": "Part 2", "lr": "Part 2's SGD",
                                  "timing_steps": "Part 3"})
    parser.add_argument("--timing-width", type=positive_int, default=512, help="Part 3's layer width")
    parser.add_argument("--timing-batch", type=positive_int, default=128, help="Part 3's global batch")
    args = parser.parse_args()
    for flag, value in (("--batch", args.batch), ("--timing-batch", args.timing_batch)):
        if value < args.world_size:
            raise UsageError(f"{flag} {value} must be at least --world-size {args.world_size} "
                             "(a sample per rank)")
    preload_for_ddp(args.world_size, parent_too=True)  # DDP() and the reference's SGD import torch._dynamo
    before, reference = single_process_training(args.batch, args.steps, args.lr)
    moved = refuse_unjudgeable(before, reference, args)  # before any rank starts
    rep = Report(__file__, "DDP basics on real gloo ranks", args)
    rep.part(1, "the process group: world size, ranks, rendezvous")  # what every rank sees
    part1_environment(rep, args)
    rep.part(2, "broadcast at construction, then training")  # different init -> identical -> trained
    part2_broadcast_and_training(rep, args, reference, moved)
    rep.part(3, "CPU timing: W processes against 1")  # why this machine shows no speed-up
    part3_cpu_timing(rep, args)
    rep.finish()


def small_mlp(seed: int, dtype: torch.dtype = torch.float64) -> nn.Module:
    """Part 2's model, initialised from `seed` (each rank passes a different one on purpose)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)).to(dtype)


def make_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression problem of n samples (float64), identical wherever it is made."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(n, IN_FEATURES, generator=gen, dtype=torch.float64)
    y = x[:, :1].sin() + 0.1 * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    return x, y


def environment_worker(rank: int, world_size: int) -> dict[str, str]:
    """Part 1: what torchrun would have put in this rank's environment, and what the group says."""
    keys = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: os.environ.get(k, "-") for k in keys}
    env["get_rank()"], env["get_world_size()"] = str(dist.get_rank()), str(dist.get_world_size())
    env["backend"] = dist.get_backend()
    return env


def shard_loss(out: torch.Tensor, y: torch.Tensor, world_size: int, n: int) -> torch.Tensor:
    """This shard's squared error summed, times W/n: DDP divides the summed gradients by W, which
    then gives the full-batch mean even when n is not divisible by W (a local mean would not)."""
    return ((out - y) ** 2).sum() * (world_size / n)


def training_worker(rank: int, world_size: int, n: int, steps: int, lr: float) -> dict[str, np.ndarray]:
    """Part 2: different init per rank -> DDP broadcast -> `steps` SGD steps on this rank's shard."""
    model = small_mlp(seed=rank)  # deliberately different on every rank
    before = flat_params(model).numpy()
    ddp = DDP(model)              # the constructor broadcasts rank 0's parameters and buffers
    after_wrap = flat_params(model).numpy()
    x, y = make_data(n)
    x_local, y_local = torch.tensor_split(x, world_size)[rank], torch.tensor_split(y, world_size)[rank]
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        shard_loss(ddp(x_local), y_local, world_size, n).backward()   # gradients averaged in here
        opt.step()
    trained = flat_params(model).numpy()
    del ddp, opt  # no DDP object may outlive the process group
    return {"before": before, "after_wrap": after_wrap, "trained": trained}


def single_process_training(n: int, steps: int, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """The reference: rank 0's initial model, the whole batch, one process, mean loss; (its
    parameters before, after)."""
    model = small_mlp(seed=0)
    before = flat_params(model).numpy().copy()
    x, y = make_data(n)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return before, flat_params(model).numpy()


def refuse_unjudgeable(before: np.ndarray, after: np.ndarray, args) -> float:
    """How far one process moved the weights; a usage error, before any rank starts, where that is
    too little for Part 2's check to tell a wrong DDP from round-off (a tiny --lr), or not finite (an
    --lr so large that training diverges: every comparison would be NaN)."""
    moved = float(np.abs(after - before).max())
    setting = f"--lr {args.lr:g} --steps {args.steps} --batch {args.batch}"
    if not np.isfinite(after).all():
        raise UsageError(f"{setting}: one-process training diverges (weights not finite): a smaller --lr")
    floor = movement_floor(float(np.abs(before).max()), float(np.finfo(before.dtype).eps))
    if not moved >= floor:
        raise UsageError(f"{setting}: the weights move {moved:.1e} in one process, under {floor:.1e}: too "
                         "little to tell a wrong DDP from round-off (a larger --lr, or more --steps)")
    return moved


def timing_model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def time_steps(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[float]:
    """Seconds per training step (forward, backward, SGD update), after one warm-up step."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i > 0:
            times.append(time.perf_counter() - start)
    return times


def timing_data(batch: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(DATA_SEED)
    return torch.randn(batch, width, generator=gen), torch.randint(0, 10, (batch,), generator=gen)


def timing_worker(rank: int, world_size: int, batch: int, width: int, steps: int) -> dict[str, list[float]]:
    """Part 3: the same ranks, the same 1/W batch, first without any communication, then in DDP."""
    x, y = timing_data(batch, width)
    x, y = torch.tensor_split(x, world_size)[rank], torch.tensor_split(y, world_size)[rank]
    model = timing_model(width)
    dist.barrier()
    local = time_steps(model, x, y, steps)
    ddp = DDP(model)
    dist.barrier()
    with_ddp = time_steps(ddp, x, y, steps)
    del ddp
    return {"local": local, "ddp": with_ddp}


def part1_environment(rep: Report, args) -> None:
    envs = launch(environment_worker, args.world_size, timeout_s=args.timeout_s)
    keys = list(envs[0])
    rep.table(keys, [[env[k] for k in keys] for env in envs], name="environment")
    rep.note("The launcher sets the variables torchrun does; init_process_group reads them. M machines "
             "of G processes: global rank = machine × G + local rank, WORLD_SIZE = M × G (exercise 1).")


def part2_broadcast_and_training(rep: Report, args, reference: np.ndarray, moved: float) -> None:
    results = launch(training_worker, args.world_size, args.batch, args.steps, args.lr,
                     timeout_s=args.timeout_s)
    rows = []
    for rank, res in enumerate(results):
        rows.append([rank, float(np.abs(res["before"] - results[0]["before"]).max()),
                     bool(np.array_equal(res["after_wrap"], results[0]["after_wrap"])),
                     bool(np.array_equal(res["trained"], results[0]["trained"]))])
    rep.table(["rank", "max |p − p_rank0| before", "same after DDP()", f"same after {args.steps} steps"],
              rows, name="ranks")
    # every rank against one process: the check below, once (not a column of the same gap too)
    gap = max(float(np.abs(res["trained"] - reference).max()) for res in results)
    # float64: a right DDP is off by the order of its sums (~1e-17), a wrong one (no average, a stale
    # replica, another learning rate) by a share of how far one process moved the weights
    rep.check_trained(f"DDP on {args.world_size} ranks after {args.steps} steps", gap, moved)
    shards = [len(s) for s in torch.tensor_split(torch.empty(args.batch), args.world_size)]
    rep.note(f"Linear({IN_FEATURES}, {HIDDEN}), ReLU, Linear({HIDDEN}, 1), PyTorch's default init "
             f"uniform(±1/sqrt(fan_in)): two ranks' weights differ by at most 2/sqrt({IN_FEATURES}) = "
             f"{2 / IN_FEATURES ** 0.5:g}; rank r starts from seed r. {args.batch} samples in shards of "
             f"{shards}, SGD lr {args.lr:g}, float64; the reference trains rank 0's initial model on the "
             "whole batch.")
    rep.value("init_gap", max(r[1] for r in rows))
    rep.value("identical_after_wrap", all(r[2] for r in rows))
    rep.value("identical_after_training", all(r[3] for r in rows))
    rep.value("single_process_gap", gap)
    rep.value("shards", shards, compared=False)   # the batch's split over the ranks, for --json


def part3_cpu_timing(rep: Report, args) -> None:
    width, batch, steps = args.timing_width, args.timing_batch, args.timing_steps
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the single-process baseline gets one thread, like each rank
    try:
        x, y = timing_data(batch, width)
        single_times = time_steps(timing_model(width), x, y, steps)
        single = statistics.median(single_times)
    finally:
        torch.set_num_threads(threads)
    results = launch(timing_worker, args.world_size, batch, width, steps, timeout_s=args.timeout_s)
    local = statistics.median(t for r in results for t in r["local"])
    ddp = statistics.median(t for r in results for t in r["ddp"])
    grad_bytes = sum(p.numel() * 4 for p in timing_model(width).parameters())

    def spread(times: list[float]) -> str:
        return f"{fmt_time(min(times))} – {fmt_time(max(times))}"

    w = args.world_size
    rep.table(["setting", "median step", "range, all steps and ranks", "speed-up"],
              [["1 process, whole batch", fmt_time(single), spread(single_times), 1.0],
               [f"{w} processes, 1/{w} batch each, no communication",
                fmt_time(local), spread([t for r in results for t in r["local"]]), single / local],
               ["  the notes", "", "", rep.notes_text("L15-1.4-local-not-quarter")],
               [f"{w} processes in DDP (gloo)", fmt_time(ddp), spread([t for r in results for t in r["ddp"]]),
                single / ddp],
               ["  the notes", "", "", rep.notes_text("L15-1.4-speedup-here")]], name="timing")
    # the gloo cost per rank: its own DDP median minus its own no-communication median
    costs = sorted(statistics.median(r["ddp"]) - statistics.median(r["local"]) for r in results)
    rep.line(f"  gloo cost per step (DDP − no communication): {(ddp - local) * 1e3:.1f} ms (the notes: "
             f"{rep.notes_text('L15-1.4-gloo-cost')}); by rank: median "
             f"{statistics.median(costs) * 1e3:.1f} ms, range {costs[0] * 1e3:.1f} – "
             f"{costs[-1] * 1e3:.1f} ms over {len(costs)} ranks ({steps} steps each)")
    rep.value("speedup_here", single / ddp, timed=True)
    rep.value("gloo_cost_ms", (ddp - local) * 1e3, timed=True)
    rep.value("local_speedup", single / local, timed=True)
    rep.compare_with_notes(in_table=True)
    speedup = f"{'No speed-up' if single / ddp < 1 else 'Only'} {single / ddp:.2f}x"
    rep.note(f"3 Linear layers of width {width} ({grad_bytes / 1e6:.2f} MB of float32 gradients), batch "
             f"{batch}, {steps} timed steps, medians over all ranks, one thread per rank, {os.cpu_count()} "
             f"cores. {speedup}: the ranks share the cores and the memory bandwidth, so 1/W of the batch "
             "does not take 1/W of the time, and gloo all-reduces every gradient over TCP loopback on those "
             "same cores. Real DDP shows correctness here; speed is for the models of §3 and §5.")


if __name__ == "__main__":
    run_main(main)
