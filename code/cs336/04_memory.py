"""CS336 lecture 8 (内存账本、ZeRO、框架对比、Megatron 3D): what training keeps in GPU memory.
A model only: the ledger of cs336.ledger and the α-β formulas of common.costmodel.steps, no torch.

    python code/cs336/04_memory.py
    python code/cs336/04_memory.py --params 70B --world-size 64 --tp 8 --pp 4 --dp 32 --seq-len 4096

Part 1: the 16-bytes-per-parameter ledger for the notes' models, activations beside. Part 2: ZeRO-1/2/3
per GPU for --params P on --world-size p, checked against the ledger, and each stage's traffic.
Part 3: Megatron's 3D split of GPT-3 175B (--tp, --pp, --dp): what a GPU holds, which link each axis
uses and what it carries per step. Part 4: the framework table, where a number follows from the model.
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
import re

from common.cli import make_parser
from common.costmodel.link import CS336_INFINIBAND, CS336_NVLINK
from common.costmodel.steps import (
    CollectiveCall,
    pp_step_bytes_per_device,
    pp_step_send_time,
    zero_step_bytes_per_device,
    zero_step_collectives,
)
from common.error_types import UsageError
from common.flags import positive_int
from common.output import Report
from common.script_end import run_main
from common.units import GiB, fmt_bytes, fmt_time
from cs336 import ledger as lg

NOTES_P, NOTES_PARAMS, NOTES_GPU_GB, NOTES_BATCH, FP16 = 4, 13e9, 80.0, 128, 2
NOTES_TP, NOTES_PP, NOTES_DP, GPUS_PER_NODE = 8, 8, 16, 8
# GPT-3's own setting (Brown et al. 2020): 2048-token sequences, 3.2M-token batches = 1536 sequences.
SEQ_LEN, GLOBAL_BATCH, MICRO_BATCH = 2048, 1536, 1
# What ZeRO does per step (ZeRO paper §7): AR = all-reduce, RS = reduce-scatter, AG = all-gather.
SHORT = {"all-reduce": "AR", "reduce-scatter": "RS", "all-gather": "AG"}
ENTRY = {"fp16 parameters": "params", "fp16 gradients": "grads", "fp32 master weights": "master",
         "Adam m (fp32)": "m", "Adam v (fp32)": "v"}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBtT]?)\s*$")


def main() -> None:
    # Every flag's cost is a closed form, whatever its value; the devices are bounded as in every model
    # (common.model_bounds): p, and Part 3's TP × PP × DP, up to 4,096.
    parser = make_parser(__doc__, world_size=NOTES_P, batch=NOTES_BATCH, gpu_memory_gb=NOTES_GPU_GB,
                         layers=lg.LLAMA2_13B.layers, tp=NOTES_TP, pp=NOTES_PP, dp=NOTES_DP,
                         micro_batch_size=MICRO_BATCH,
                         context={"batch": "Part 1's MLP", "layers": "Part 2: what ZeRO-3 gathers one at a "
                                  "time; Llama 2 13B's", "tp": "Part 3", "pp": "Part 3", "dp": "Part 3",
                                  "micro_batch_size": "Part 3"})
    add = parser.add_argument
    add("--params", type=param_count, default=NOTES_PARAMS, metavar="COUNT",
        help="Parts 2 and 4: parameters P, 13B or 1.3e10 (default: 13B)")
    add("--seq-len", type=positive_int, default=SEQ_LEN, help="Part 3: tokens per sequence")
    add("--global-batch", type=positive_int, default=GLOBAL_BATCH, help="Part 3: sequences per step")
    args = parser.parse_args()
    if args.global_batch % (args.dp * args.micro_batch_size):
        raise UsageError(f"--global-batch {args.global_batch} must be a multiple of --dp × "
                         f"--micro-batch-size = {args.dp * args.micro_batch_size}")
    rep = Report(__file__, "memory: the 16-byte ledger, ZeRO, Megatron 3D, frameworks", args)
    P, p = args.params, args.world_size
    rep.part(1, "the ledger: 16 bytes per parameter (mixed precision, Adam)")
    part1_ledger(rep, args)       # 2 + 2 + 4 + 8 bytes per parameter for the notes' models
    rep.part(2, f"ZeRO per GPU: P = {P / 1e9:g}B parameters on p = {p} GPUs")
    part2_zero(rep, args)         # ZeRO-1/2/3 per GPU from the ledger, and each stage's traffic
    rep.part(3, f"Megatron 3D: {lg.GPT3_175B.name} on TP {args.tp} × PP {args.pp} × DP {args.dp}")
    part3_megatron_3d(rep, args)  # GPT-3 175B on TP × PP × DP GPUs: memory and traffic per axis
    rep.part(4, f"frameworks: per-GPU training state for P = {P / 1e9:g}B on p = {p} GPUs")
    part4_frameworks(rep, args)   # Megatron-LM, DeepSpeed, FSDP: the numbers a model can give
    rep.finish()


def param_count(text: str) -> float:
    """A parameter count: 13B, 175B, 200M, 1.3e10 (K = 1e3, M = 1e6, B = 1e9, T = 1e12)."""
    match = _COUNT.match(text)
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
    if not match:
        raise argparse.ArgumentTypeError(f"a parameter count expected (13B, 200M, 1e9), got {text!r}")
    value = float(match.group(1)) * scale[match.group(2).lower()]
    if not (1 <= value < 1e16):
        raise argparse.ArgumentTypeError(f"parameter count must be 1 to 1e16, got {text!r}")
    return value


def both(nbytes: float) -> str:
    return f"{fmt_bytes(nbytes)} = {fmt_bytes(nbytes, binary=True)}"


def part1_ledger(rep: Report, args: argparse.Namespace) -> None:
    models = (lg.NOTES_200M, lg.MLP_12, lg.LLAMA2_13B)
    # The notes' ledger rows, Adam's m and v together as they give them: (entry, bytes/param, row id)
    entries = [("fp16 parameters", lg.LEDGER["fp16 parameters"], "param"),
               ("fp16 gradients", lg.LEDGER["fp16 gradients"], "grad"),
               ("fp32 master weights", lg.LEDGER["fp32 master weights"], "master"),
               ("Adam m + v (fp32)", lg.LEDGER["Adam m (fp32)"] + lg.LEDGER["Adam v (fp32)"], "adam"),
               ("total", lg.BYTES_PER_PARAM, "")]
    llama_rows = {"param": "params", "grad": "grads", "master": "master", "adam": "adam", "": "total"}
    rows = []
    for name, b, key in entries:
        cells = [fmt_bytes(b * m.params, binary=not key and m is not lg.LLAMA2_13B) for m in models]
        rows.append([name, b,
                     rep.notes_text(f"CS-mem-ledger-{key}" if key else "CS-mem-bytes-per-param")] + cells
                    + [rep.notes_text(f"CS-llama-mem-{llama_rows[key]}")])
    rows[-1][3] += f" (notes: {rep.notes_text('CS-mem-200m')})"
    rep.table(["entry", "B/param", "notes B/param", "200M", "12-layer MLP", "Llama 2 13B", "notes 13B"],
              rows,
              name="ledger")
    total = lg.training_state_bytes(lg.LLAMA2_13B.params)
    fits = total <= args.gpu_memory_gb * 1e9
    rep.line(f"  Llama 2 13B's state fits one {args.gpu_memory_gb:g} GB card: {'yes' if fits else 'no'}")
    (_, param_b, _), (_, grad_b, _), (_, master_b, _), (_, adam_b, _) = entries[:4]
    llama = lg.LLAMA2_13B.params
    rep.value("ledger_param_b", param_b)
    rep.value("ledger_grad_b", grad_b)
    rep.value("ledger_master_b", master_b)
    rep.value("ledger_adam_b", adam_b)
    rep.value("bytes_per_param", lg.BYTES_PER_PARAM)
    rep.value("state_200m_gib", lg.training_state_bytes(lg.NOTES_200M.params) / GiB)
    rep.value("state_200m_gb", lg.training_state_bytes(lg.NOTES_200M.params) / 1e9)
    rep.value("llama_state_gb", total / 1e9)
    rep.value("llama_params_gb", param_b * llama / 1e9)
    rep.value("llama_grads_gb", grad_b * llama / 1e9)
    rep.value("llama_master_gb", master_b * llama / 1e9)
    rep.value("llama_adam_gb", adam_b * llama / 1e9)
    rep.value("llama_fits_one_card", fits)
    rep.compare_with_notes(in_table=True)
    d, layers = lg.MLP_12.width, lg.MLP_12.layers
    act = lg.activation_bytes(args.batch, d, FP16)
    mlp_state = lg.training_state_bytes(lg.MLP_12.params)
    rep.line(f"  activations beside the state, 12-layer MLP at B = {args.batch}: B × d × 2 B = "
             f"{fmt_bytes(act, binary=True)} per layer,\n  {fmt_bytes(layers * act, binary=True)} for "
             f"{layers} layers = {100 * layers * act / mlp_state:.2g} % of its "
             f"{fmt_bytes(mlp_state, binary=True)} of state; they grow with B, the state does not")


def part2_zero(rep: Report, args: argparse.Namespace) -> None:
    P, p = args.params, args.world_size
    zero_memory_table(rep, args)
    zero_formula_values(rep, P, p)
    rep.compare_with_notes()
    zero_traffic_table(rep, args)
    z = {stage: lg.zero_bytes_per_gpu(stage, P, p) for stage in lg.STAGES}
    n_calls = {stage: sum(c.calls for c in zero_step_collectives(stage, 1.0, args.layers))
               for stage in lg.STAGES}
    rep.line(f"  ZeRO-2 saves {fmt_bytes(z['DDP'] - z['ZeRO-2'])} per GPU over DDP for no extra bytes; "
             f"ZeRO-3 saves {fmt_bytes(z['ZeRO-2'] - z['ZeRO-3'])} more\n  for half of DDP's traffic again, "
             f"in {n_calls['ZeRO-3'] - n_calls['ZeRO-2']} more collectives (the notes' case for ZeRO-2)")
    rep.note(f"AR all-reduce, RS reduce-scatter, AG all-gather; fp16 gradients and parameters (2P bytes);\n"
             f"ZeRO-3 gathers {args.layers} layers one at a time, forward and backward, and reduce-scatters\n"
             "each layer's gradients: 3(p-1)/p·2P, 1.5× DDP. The paper's ZeRO-1 RS and AG are the two\n"
             "halves of the all-reduce they replace: no extra bytes; the notes' text's ZeRO-1: why: below")
    comm = {stage: " + ".join(SHORT[c.kind] for c in zero_step_collectives(stage, 1.0))
            for stage in lg.STAGES}
    # The notes' own ZeRO-1: their ZeRO-2 'reduce-scatter 代替 all-reduce' (puts a reduce-scatter in
    # place of the all-reduce), so their ZeRO-1 keeps DDP's all-reduce, then all-gathers the updated
    # parameters (their ZeRO-1 text); PyTorch's ZeroRedundancyOptimizer under DDP likewise keeps the
    # all-reduce (then broadcasts each shard from its owner).
    notes_zero1 = notes_zero1_collectives(FP16 * P)
    ranks = max(p, 2)   # the ratio is the same for every p >= 2; at p = 1 nothing is sent at all
    notes_zero1_bytes = sum(c.calls * c.ring.busiest_bytes(ranks, c.nbytes) for c in notes_zero1)
    ddp_bytes = zero_step_bytes_per_device("DDP", ranks, FP16 * P)
    rep.value("comm_ddp", comm["DDP"])
    rep.value("comm_zero1", comm["ZeRO-1"])
    rep.value("comm_zero2", comm["ZeRO-2"])
    rep.value("comm_zero3", comm["ZeRO-3"])
    rep.value("comm_zero1_notes", " + ".join(SHORT[c.kind] for c in notes_zero1))
    rep.value("zero1_notes_over_ddp", notes_zero1_bytes / ddp_bytes)
    rep.value("zero2_saves_for_no_bytes", zero2_is_best_value())
    rep.compare_with_notes(in_table=True)


def zero_memory_table(rep: Report, args: argparse.Namespace) -> None:
    """Part 2's first table: each stage's bytes per GPU, from the ledger, the notes' formula and
    the busiest rank of a real flattened buffer."""
    P, p = args.params, args.world_size
    rows = []
    for stage in lg.STAGES:
        ours, notes = lg.zero_bytes_per_gpu(stage, P, p), lg.zero_notes_formula(stage, P, p)
        exact = max(lg.zero_bytes_per_rank(stage, round(P), p))
        rows.append([stage, ", ".join(ENTRY[n] for n in lg.SHARDED[stage]) or "nothing",
                     fmt_bytes(ours), fmt_bytes(notes), fmt_bytes(exact),
                     "yes" if ours <= args.gpu_memory_gb * 1e9 else "no"])
    rep.table(["stage", "sharded", "from the ledger", "notes' formula", "busiest rank",
               f"≤ {args.gpu_memory_gb:g} GB"], rows, name="zero_memory")
    rep.note("the ledger: kept entries whole, sharded ones / p (the first P mod p ranks one more)")


def zero_formula_values(rep: Report, P: float, p: int) -> None:
    """The ledger against the notes' closed forms, and what ZeRO-1 and ZeRO-2 take off a card."""
    # the closed forms are linear in 1/p: a few p, odd and even, small and large, decide them
    formulas_ok = {stage: all(math.isclose(lg.zero_bytes_per_gpu(stage, 1.0, k),
                                           lg.zero_notes_formula(stage, 1.0, k))
                              for k in (1, 2, 3, 4, 7, 8, 64, 1000, 1024)) for stage in lg.STAGES}
    adam = sum(lg.ledger_bytes(P)[k] for k in ("Adam m (fp32)", "Adam v (fp32)"))
    rep.value("ddp_formula_ok", formulas_ok["DDP"])
    rep.value("zero1_formula_ok", formulas_ok["ZeRO-1"])
    rep.value("zero2_formula_ok", formulas_ok["ZeRO-2"])
    rep.value("zero3_formula_ok", formulas_ok["ZeRO-3"])
    rep.value("zero1_adam_gb", adam / p / 1e9)
    rep.value("zero2_grads_gb", lg.ledger_bytes(P)["fp16 gradients"] / p / 1e9)
    opt = sum(lg.ledger_bytes(P)[k] for k in lg.OPTIMIZER_STATE)
    rep.note(f"ZeRO-1 shards the whole optimizer state, master weights too: {fmt_bytes(opt)} → "
             f"{fmt_bytes(opt / p)} per card\n(Adam's m and v alone: {fmt_bytes(adam)} → "
             f"{fmt_bytes(adam / p)})")


def zero_traffic_table(rep: Report, args: argparse.Namespace) -> None:
    """Part 2's second table: each stage's collectives per step, bytes per rank and α-β times."""
    P, p = args.params, args.world_size
    rows, ddp_bytes = [], None
    # ZeRO-1 twice: the ZeRO paper's (RS + AG) and the notes' text's (DDP's AR kept, then AG): the
    # notes' cell is set beside the latter, the ZeRO-1 their own words describe
    stages = [(stage, stage, zero_step_collectives(stage, FP16 * P, layers=args.layers))
              for stage in lg.STAGES]
    stages.insert(2, ("ZeRO-1 (notes' text)", "ZeRO-1", notes_zero1_collectives(FP16 * P)))
    for label, stage, calls in stages:
        sent = sum(c.calls * c.ring.busiest_bytes(p, c.nbytes) for c in calls)
        ddp_bytes = sent if ddp_bytes is None else ddp_bytes
        notes = "-" if label == "ZeRO-1" else rep.notes_text(f"CS-zero-comm-{stage.lower().replace('-', '')}")
        rows.append([label + (" (paper)" if label == "ZeRO-1" else ""),
                     " + ".join(f"{c.calls} {SHORT[c.kind]}" for c in calls), notes, fmt_bytes(sent),
                     f"{sent / ddp_bytes:.2g}" if ddp_bytes else "-",
                     fmt_time(sum(c.calls * c.ring.time(p, c.nbytes, CS336_NVLINK) for c in calls)),
                     fmt_time(sum(c.calls * c.ring.time(p, c.nbytes, CS336_INFINIBAND) for c in calls))])
    rep.table(["stage", "collectives per step", "notes", "bytes per rank", "× DDP", "NVLink", "InfiniBand"],
              rows, name="zero_traffic")


def notes_zero1_collectives(param_bytes: float) -> list[CollectiveCall]:
    """ZeRO-1 as the notes' text describes it: DDP's collectives (the gradients' all-reduce, which
    their ZeRO-2 replaces by a reduce-scatter), then the all-gather of the updated parameters."""
    return [*zero_step_collectives("DDP", param_bytes),
            CollectiveCall("all-gather", "updated parameters", 1, param_bytes)]


def zero2_is_best_value() -> bool:
    """At the notes' 13B on 4 cards: ZeRO-2 holds less than DDP and moves its bytes; ZeRO-3 moves 1.5×."""
    sent = {stage: zero_step_bytes_per_device(stage, NOTES_P, FP16 * NOTES_PARAMS) for stage in lg.STAGES}
    held = {stage: lg.zero_bytes_per_gpu(stage, NOTES_PARAMS, NOTES_P) for stage in lg.STAGES}
    return (held["ZeRO-2"] < held["DDP"] and math.isclose(sent["ZeRO-2"], sent["DDP"])
            and math.isclose(sent["ZeRO-3"], 1.5 * sent["DDP"]))


def part3_megatron_3d(rep: Report, args: argparse.Namespace) -> None:
    m, tp, pp, dp = lg.GPT3_175B, args.tp, args.pp, args.dp
    gpus = tp * pp * dp
    rep.value("megatron_gpus", gpus)
    megatron_memory_table(rep, args)
    stage_layers, micro = math.ceil(m.layers / pp), args.global_batch // (dp * args.micro_batch_size)
    act = lg.activation_bytes(args.micro_batch_size, m.width, FP16, tokens_per_sample=args.seq_len)
    rep.note(f"per step: {args.global_batch} sequences of {args.seq_len} tokens, {micro} micro-batches of "
             f"{args.micro_batch_size} per replica;\none micro-batch's activation b × s × d × 2 B = "
             f"{fmt_bytes(act)}; a stage holds {stage_layers} of {m.layers} layers.\nTP: 2 all-reduces "
             "forward + 2 backward per layer (attention, MLP), no recomputation.\nPP: each GPU sends its "
             "micro-batch's full activation and gradient (Megatron's scatter/gather\ncuts that by TP). DP: "
             f"fp16 gradients. One InfiniBand port per GPU; {GPUS_PER_NODE} GPUs a node.")
    rep.table(["axis", "ways", "link", "calls per step", "bytes per GPU", "α-β time"],
              megatron_traffic_rows(args, stage_layers, micro, act), name="megatron_traffic")
    rep.line(f"  {gpus // GPUS_PER_NODE if gpus >= GPUS_PER_NODE else 1} nodes of {GPUS_PER_NODE}; TP stays "
             f"on NVLink{'' if tp <= GPUS_PER_NODE else ' only up to 8 ways: here it crosses nodes'}, PP and "
             "DP cross nodes on InfiniBand")


def megatron_memory_table(rep: Report, args: argparse.Namespace) -> None:
    """Part 3's first table: a GPU's parameters and training state, without and with ZeRO-1."""
    m, tp, pp, dp = lg.GPT3_175B, args.tp, args.pp, args.dp
    local = m.params / (tp * pp)
    plain = lg.model_split_bytes_per_gpu(m.params, tp, pp, dp)
    dist = lg.model_split_bytes_per_gpu(m.params, tp, pp, dp, distributed_optimizer=True)
    fits = {state: "yes" if state <= args.gpu_memory_gb * 1e9 else "no" for state in (plain, dist)}
    rep.table(["per GPU", "value"],
              [["parameters P/(TP·PP)", f"{local / 1e9:.4g}B"],
               ["training state, 16 B each", both(plain)],
               [f"with ZeRO-1 across the {dp} DP replicas", both(dist)],
               [f"fits {args.gpu_memory_gb:g} GB (state only)", f"{fits[plain]} / {fits[dist]}"]],
              name="megatron_memory")


def megatron_traffic_rows(args: argparse.Namespace, stage_layers: int, micro: int, act: float) -> list[list]:
    """Part 3's traffic rows, TP, PP, DP: calls, bytes and α-β time per GPU and step."""
    tp, pp, dp = args.tp, args.pp, args.dp
    local = lg.GPT3_175B.params / (tp * pp)
    tp_link = CS336_NVLINK if tp <= GPUS_PER_NODE else CS336_INFINIBAND
    axes = [("TP", tp, tp_link, [CollectiveCall("all-reduce", "activations", 4 * stage_layers * micro, act)])]
    axes.append(("DP", dp, CS336_INFINIBAND, [CollectiveCall("all-reduce", "gradients", 1, FP16 * local)]))
    rows = []
    for axis, ways, link, calls in axes:
        if ways == 1:
            rows.append([axis, 1, "-", 0, "0 B", "-"])
            continue
        rows.append([axis, ways, link.name.split(" (")[0], sum(c.calls for c in calls),
                     fmt_bytes(sum(c.calls * c.ring.busiest_bytes(ways, c.nbytes) for c in calls)),
                     fmt_time(sum(c.calls * c.ring.time(ways, c.nbytes, link) for c in calls))])
    pp_row = ["PP", pp, CS336_INFINIBAND.name.split(" (")[0], 2 * micro if pp > 1 else 0,
              fmt_bytes(pp_step_bytes_per_device(micro * act) if pp > 1 else 0),
              fmt_time(pp_step_send_time(micro, micro * act, CS336_INFINIBAND)) if pp > 1 else "-"]
    rows.insert(1, pp_row)
    return rows


def part4_frameworks(rep: Report, args: argparse.Namespace) -> None:
    P, p = args.params, args.world_size
    tp = math.gcd(p, GPUS_PER_NODE)
    rows = [[f.framework, f.setting, f.how, both(f.bytes_per_gpu)]
            for f in lg.framework_layouts(P, p, tp, p // tp)]
    rep.table(["framework", "setting", "per GPU", "bytes"], rows, name="frameworks")
    rep.note(f"Megatron splits the model over all {p} GPUs here: TP {tp} inside a node, PP {p // tp} "
             "across;\nwith DP replicas its distributed optimizer shards the optimizer state as ZeRO-1 (Part "
             "3)")
    gpu = args.gpu_memory_gb * 1e9
    sizes = [1e9, 10e9, 100e9, 1e12] + ([P] if P not in (1e9, 10e9, 100e9, 1e12) else [])
    rows = [[f"{n / 1e12:g}T" if n >= 1e12
             else f"{n / 1e9:g}B"] + [str(lg.gpus_to_hold(n, gpu, stage) or "never") for stage in lg.STAGES]
            for n in sorted(sizes)]
    rep.table(["P", "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP full"], rows, name="gpus_to_hold")
    rep.note(f"fewest {args.gpu_memory_gb:g} GB GPUs that hold the training state (no activations): what "
             "the\nnotes' 'typical scale' of each framework means in GPUs; their other rows are qualitative")


if __name__ == "__main__":
    run_main(main)
