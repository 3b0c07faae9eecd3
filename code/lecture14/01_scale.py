"""Lecture 14 §1 (为什么要分布式): scale, the memory and compute walls, data vs model parallelism,
and the parameter server's traffic. A model only: no processes, no torch.

    python code/lecture14/01_scale.py
    python code/lecture14/01_scale.py --peak-tflops 1979 --tp 8 --pp 8 --world-size 256 --size 810GB

Part 1 turns two real training runs back into FLOP/s per GPU with 6ND; Part 2 shows that one GPU
can neither hold nor train a 405B model; Part 3 what data and model parallelism do to the memory
of one worker; Part 4 why a parameter server's link is the bottleneck as workers are added.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math
from dataclasses import dataclass

from common.cli import link_from_args, make_parser
from common.costmodel.collectives import algorithm
from common.output import Report
from common.script_end import run_main
from common.units import fmt_bytes, fmt_time
from lecture14 import collectives as col

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_YEAR = 365.25 * 24 * 3600.0
DAYS_PER_MONTH = 365.25 / 12
NOTES_PEAK_TFLOPS = 989.0  # dense BF16 peak of an H100 SXM; the H800 has the same compute units
NOTES_GPU_MEMORY_GB = 80.0  # H100 / H800: 80 GB of HBM
NOTES_TP, NOTES_PP = 8, 16

# Training state per parameter with mixed-precision Adam (no activations, no buffers).
BYTES_PER_PARAM = {
    "bf16 weights": 2,
    "bf16 gradients": 2,
    "fp32 master weights": 4,
    "fp32 Adam m": 4,
    "fp32 Adam v": 4,
}


@dataclass(frozen=True)
class TrainingRun:
    """A published training run: what it trained and what it cost."""

    name: str
    total_params: float   # parameters held in memory
    active_params: float  # parameters each token goes through (MoE: fewer than total)
    tokens: float
    gpu_hours: float
    gpus: int
    gpu: str


# Slides p.7 for GPUs and GPU-hours; token counts from the two technical reports.
DEEPSEEK_V3 = TrainingRun("DeepSeek-V3", 671e9, 37e9, 14.8e12, 2.664e6, 2048, "H800")
LLAMA_31 = TrainingRun("LLaMA 3.1 405B", 405e9, 405e9, 15.6e12, 30.84e6, 16000, "H100")
RUNS = (DEEPSEEK_V3, LLAMA_31)


def main() -> None:
    parser = make_parser(__doc__, world_size=64, alpha_us=5.0, beta_gbs=25.0, size="2GB",
                         peak_tflops=NOTES_PEAK_TFLOPS, tp=NOTES_TP, pp=NOTES_PP,
                         gpu_memory_gb=NOTES_GPU_MEMORY_GB,
                         context={"world_size": "the largest K in Part 4", "size": "Part 4's N: gradients = "
                                                                                   "parameters",
                                  "peak_tflops": "dense BF16", "tp": "Part 3", "pp": "Part 3"})
    args = parser.parse_args()
    rep = Report(__file__, "why distributed training: scale, two walls, parameter server", args)
    rep.part(1, "6ND: FLOPs of two real training runs and the fraction of peak")
    part1_six_nd(rep, args)          # what two real runs got out of each GPU
    rep.part(2, "one GPU: the memory wall and the compute wall")
    part2_two_walls(rep, args)       # one GPU can neither hold nor train a 405B model
    rep.part(3, "memory per worker: split the data or split the model")
    part3_data_vs_model(rep, args)   # pure data parallelism vs tensor × pipeline
    rep.part(4, "parameter server: traffic per step, each worker 2N, the server 2KN")
    part4_parameter_server(rep, args)  # the server's one link carries every worker's push and pull
    rep.finish()


def training_flops(active_params: float, tokens: float) -> float:
    """6ND: forward 2 FLOPs per parameter per token, backward twice that."""
    return 6.0 * active_params * tokens


def achieved_flops_per_gpu(run: TrainingRun) -> float:
    """Average FLOP/s one GPU delivered: the run's 6ND spread over its GPU-seconds."""
    return training_flops(run.active_params, run.tokens) / (run.gpu_hours * SECONDS_PER_HOUR)


def fraction_of_peak(run: TrainingRun, peak_flops: float) -> float:
    return achieved_flops_per_gpu(run) / peak_flops


def training_state_bytes(params: float) -> float:
    """Weights, gradients and Adam state: 16 bytes per parameter with the breakdown above."""
    return params * sum(BYTES_PER_PARAM.values())


def years_on_one_gpu(run: TrainingRun, flops_per_s: float) -> float:
    return training_flops(run.active_params, run.tokens) / flops_per_s / SECONDS_PER_YEAR


def parameter_server_step_bytes(k: int, nbytes: float) -> dict[str, float]:
    """Bytes each party moves (sent + received) in one step, push then pull, counted over every
    message by collectives.traffic on a one-byte buffer and scaled to N bytes (every message
    carries the whole buffer, so the counts are linear in N)."""
    res = col.traffic("parameter server", k, 1)
    moved = (res.sent + res.received) * nbytes  # devices 0..K-1, then the server
    return {"server": float(moved[k]), **{f"worker {i}": float(moved[i]) for i in range(k)}}


def ks_up_to(top: int) -> list[int]:
    """1, 2, 4, ... up to `top`, and `top` itself when it is not a power of two."""
    ks = [2**i for i in range(top.bit_length()) if 2**i <= top]
    return ks if ks[-1] == top else ks + [top]


def part1_six_nd(rep: Report, args: argparse.Namespace) -> None:
    peak = args.peak_tflops * 1e12
    what_peak = " (dense BF16, the same for H100 and H800)" if rep.at_notes_setting(("peak_tflops",)) else ""
    rep.note(f"peak = {args.peak_tflops:g} TFLOP/s per GPU{what_peak};\n"
             "N = parameters each token passes through (DeepSeek-V3 is MoE: 37B of 671B active)")
    rows = []
    for run in RUNS:
        flops = training_flops(run.active_params, run.tokens)
        rows.append([run.name, f"{run.gpus:,} {run.gpu}", f"{run.active_params / 1e9:g}B",
                     f"{run.tokens / 1e12:g}T", flops, f"{run.gpu_hours / 1e6:g}M",
                     achieved_flops_per_gpu(run) / 1e12, f"{100 * fraction_of_peak(run, peak):.1f} %"])
    rep.table(["run", "GPUs", "N (active)", "D tokens", "6ND FLOPs", "GPU-hours", "TFLOP/s per GPU",
               "of peak"], rows, name="six_nd")
    ratio_params = DEEPSEEK_V3.total_params / LLAMA_31.total_params
    ratio_hours = LLAMA_31.gpu_hours / DEEPSEEK_V3.gpu_hours
    days = DEEPSEEK_V3.gpu_hours / DEEPSEEK_V3.gpus / 24
    # MoE: DeepSeek-V3 holds more parameters than LLaMA yet pays for only the active ones per token.
    # The ratios and the days are the comparison's rows (and its footnote): printed there, once.
    rep.value("peak_tflops", args.peak_tflops)
    rep.value("deepseek_peak_pct", 100 * fraction_of_peak(DEEPSEEK_V3, peak))
    rep.value("llama_peak_pct", 100 * fraction_of_peak(LLAMA_31, peak))
    rep.value("params_ratio", ratio_params)
    rep.value("gpu_hours_ratio", ratio_hours)
    rep.value("deepseek_days", days)
    rep.value("deepseek_months", days / DAYS_PER_MONTH)
    rep.value("deepseek_tokens_t", DEEPSEEK_V3.tokens / 1e12)
    rep.value("llama_tokens_t", LLAMA_31.tokens / 1e12)


def part2_two_walls(rep: Report, args: argparse.Namespace) -> None:
    breakdown = " + ".join(f"{b} {name}" for name, b in BYTES_PER_PARAM.items())
    rep.note(f"training state = {sum(BYTES_PER_PARAM.values())} B per parameter: {breakdown} "
             "(activations not counted)")
    gpu_bytes = args.gpu_memory_gb * 1e9
    peak = args.peak_tflops * 1e12
    rows = []
    for run in RUNS:
        state = training_state_bytes(run.total_params)
        rows.append([run.name, f"{run.total_params / 1e9:g}B", fmt_bytes(state), state / gpu_bytes,
                     years_on_one_gpu(run, peak), years_on_one_gpu(run, achieved_flops_per_gpu(run))])
    rep.table(["model", "parameters", "training state", f"× one {args.gpu_memory_gb:g} GB GPU",
               "years at peak", "years at its rate"], rows, name="walls")
    state_405b = training_state_bytes(LLAMA_31.total_params)
    shortfall = state_405b / gpu_bytes
    rep.value("state_405b_tb", state_405b / 1e12)
    rep.value("gpu_memory_gb", args.gpu_memory_gb)
    rep.value("memory_shortfall", shortfall)
    rep.value("memory_shortfall_log10", math.log10(shortfall))
    rep.value("llama_years_at_peak", years_on_one_gpu(LLAMA_31, peak))


def part3_data_vs_model(rep: Report, args: argparse.Namespace) -> None:
    state = training_state_bytes(LLAMA_31.total_params)
    gpu_bytes = args.gpu_memory_gb * 1e9
    tp, pp = args.tp, args.pp
    layouts = [("pure data parallelism (any number of workers)", 1),
               (f"tensor parallel {tp}", tp), (f"pipeline parallel {pp}", pp),
               (f"tensor {tp} × pipeline {pp}", tp * pp)]
    rows = [[name, ways, fmt_bytes(state / ways), "yes" if state / ways <= gpu_bytes else "no"]
            for name, ways in layouts]
    rep.table(["layout (405B, 16 B/param)", "model split", "state per GPU",
               f"fits {args.gpu_memory_gb:g} GB?"], rows, name="per_worker")
    rep.note("data parallelism copies the whole model to every worker: it makes training finish sooner,\n"
             "not fit; splitting the model (tensor × pipeline) divides the state by the number of pieces")
    rep.value("dp_state_per_worker_tb", state / 1e12)
    rep.value("tp_pp_state_gb", state / (tp * pp) / 1e9)


def part4_parameter_server(rep: Report, args: argparse.Namespace) -> None:
    link = link_from_args(args, "server link")
    n = args.size
    rep.note(f"N = {fmt_bytes(n)} of gradients (pushed) and of parameters (pulled); {link.describe()};\n"
             "s+r = bytes sent + received, counted by our simulator; times from our cost model; a ring\n"
             "all-reduce beside it")
    ks = ks_up_to(args.world_size)
    rows, worker_bytes, server_bytes = [], [], []
    server = algorithm("parameter server").time
    for k in ks:
        moved = parameter_server_step_bytes(k, n)
        worker_bytes.append(max(v for who, v in moved.items() if who != "server"))
        server_bytes.append(moved["server"])
        rows.append([k, fmt_bytes(worker_bytes[-1]), fmt_bytes(server_bytes[-1]),
                     fmt_time(server(k, n, link)),
                     fmt_time(server(k, n, link) / 2),  # a duplex link: its two rounds at once
                     fmt_bytes(2 * algorithm("ring all-reduce").busiest_bytes(k, n)),
                     fmt_time(algorithm("ring all-reduce").time(k, n, link))])
    rep.table(["K", "busiest worker s+r", "server s+r", "server time", "server time, duplex",
               "ring: device s+r", "ring time"], rows, name="ps_traffic")
    rep.value("ps_ks", ", ".join(map(str, ks)))
    rep.value("ps_worker_moves_2n", all(math.isclose(w, 2 * n) for w in worker_bytes))
    rep.value("ps_server_moves_2kn", all(math.isclose(s / w, k)
                                       for k, s, w in zip(ks, server_bytes, worker_bytes)))


if __name__ == "__main__":
    run_main(main)
