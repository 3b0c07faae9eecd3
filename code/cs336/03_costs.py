"""CS336 lecture 8 (通信复杂度、互联带宽、Llama 2 13B、TP vs DP、四卡算例): communication costs, computed.
A model only: the α-β formulas of cs336.first_order and common.costmodel.steps, the ledger of
cs336.ledger, no torch.

    python code/cs336/03_costs.py
    python code/cs336/03_costs.py --world-size 8 --alpha-us 10 --beta-gbs 25 --size 1MiB

Part 1: T ≈ α·N_msg + S/B and the ring all-reduce's two terms on the notes' 4-rank example, and where
start-ups dominate. Part 2: the interconnect table, converted to one bandwidth unit and direction.
Part 3: the Llama 2 13B gradient all-reduce on NVLink, InfiniBand and Ethernet. Part 4: DP vs TP
traffic per step. Part 5: the TP activation example. Part 6: a 12-layer MLP on 4 GPUs, three ways.
--world-size is p everywhere; --alpha-us, --beta-gbs and --size set Part 1's link and tensor.
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

import numpy as np

from common.cli import make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import CS336_ETHERNET, CS336_INFINIBAND, CS336_NVLINK, Link
from common.costmodel.steps import (
    CollectiveCall,
    pp_step_bytes_per_device,
    pp_step_send_time,
    tp_step_bytes_per_device,
    zero_step_collectives,
)
from common.error_types import UsageError
from common.model_bounds import Bound
from common.output import Report
from common.script_end import run_main
from common.text import bar
from common.units import GiB, KiB, MiB, fmt_bytes, fmt_time
from cs336.first_order import alpha_beta_time, ring_allreduce_balance_bytes, ring_allreduce_terms
from cs336.ledger import LEDGER, LLAMA2_13B, MLP_12, OPTIMIZER_STATE, activation_bytes, training_state_bytes
from lecture14 import collectives as col

RING_ALLREDUCE = algorithm("ring all-reduce")

NOTES_P, NOTES_ALPHA_US, NOTES_SIZE, NOTES_BETA = 4, 5.0, 64 * MiB, 50 * GiB  # Part 1: MiB, GiB/s
NOTES_BATCH, TP_EXAMPLE_WIDTH, FP16 = 128, 1024, 2
STEP_MS = (200.0, 400.0)  # the notes' forward + backward of Llama 2 13B on an A100 (their input)
LLAMA2_CONTEXT = 4096     # tokens per sequence, for the caveat on the notes' A = B × d
BOX_CARDS = 8             # the conversion box's card count
EFFECTIVE_SHARE = (0.60, 0.85)  # the interconnect table's caption: effective bandwidth is 60-85 % of peak
IB_TABLE_ALPHA_US = (1.0, 2.0)  # the interconnect table's InfiniBand latency (its TP paragraph takes 5 µs)
# Part 2's links, one-way GB/s from each one's specification (not from the notes' table, whose
# figures are the rows CS-links-*): NVLink 4.0 18 links × 25 GB/s each way; NVSwitch gives each
# GPU the same 900 GB/s two-way; PCIe 5.0 32 GT/s per lane, x16, 128b/130b line code; NDR 400 Gb/s
# and 100G Ethernet per direction.
PCIE5_X16_ONE_WAY_GBS = 32 * 16 * 128 / 130 / 8
LINKS = [("NVLink 4.0 (H100)", "nvlink", 18 * 25.0, "GPUs in a node"),
         ("NVSwitch (DGX)", "nvswitch", 18 * 25.0, "8 GPUs in a node"),
         ("PCIe 5.0 x16", "pcie", PCIE5_X16_ONE_WAY_GBS, "GPU-CPU"),
         ("InfiniBand NDR", "ib", 400 / 8, "across nodes"),
         ("RoCE / Ethernet 100G", "roce", 100 / 8, "across nodes")]
# Parts 1 and 5 count every message of four ring collectives on p devices, 6p(p−1) of them: about 2-3 s
# of CPU and 0.5 GB here at p = 2,048 (0.4 s at 1,024), four times that at 4,096. The other flags
# enter closed forms only: they cost the same at any value.
BOUNDS = {"world_size": Bound(2048, "Parts 1 and 5 count each message of four ring collectives, 6p(p−1) "
                                    "of them (about 0.1 µs and 20 B each here)")}


def main() -> None:
    parser = make_parser(__doc__, world_size=NOTES_P, alpha_us=NOTES_ALPHA_US, beta_gbs=None, size="64MiB",
                         micro_batches=8, context={"beta_gbs": "Part 1; default: the notes' 50 GiB/s = 53.69 "
                                                               "GB/s",
                                                   "micro_batches": "Part 6's pipeline; the notes give none"},
                         bounds=BOUNDS)
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be >= 2: with one GPU nothing is communicated")
    rep = Report(__file__, "communication costs: α-β, links, Llama 2 13B, DP vs TP, 4-GPU MLP", args)
    p, m = args.world_size, LLAMA2_13B
    rep.part(1, f"T ≈ α·N_msg + S/B: ring all-reduce of {fmt_bytes(args.size, binary=True)} on p = {p}")
    part1_alpha_beta(rep, args)     # α·N_msg + S/B; the 4-rank 64 MiB example; where α dominates
    rep.part(2, "interconnects: one unit (GB/s), one direction")
    part2_interconnects(rep)        # the link table in one unit and one direction; the notes' ratios
    rep.part(3, f"Llama 2 13B: all-reduce of {fmt_bytes(m.params * FP16)} of fp16 gradients on p = {p}")
    part3_llama_allreduce(rep, args)  # 26 GB of gradients through a ring: NVLink, InfiniBand, Ethernet
    rep.part(4, f"DP vs TP traffic per step: {m.name}, L = {m.layers}, d = {m.width}, B = {NOTES_BATCH}, "
                f"p = {p}")
    part4_dp_vs_tp(rep, args)       # per step: one big all-reduce against 2L small collectives
    rep.part(5, f"TP activation: B = {NOTES_BATCH}, d = {TP_EXAMPLE_WIDTH}, fp16, {p}-way")
    part5_tp_activation(rep, args)  # B = 128, d = 1024: what one TP layer sends per rank
    rep.part(6, f"{MLP_12.name}, B = {NOTES_BATCH}, fp16, on p = {p}: DP, TP, PP")
    part6_four_gpu_mlp(rep, args)   # 12 layers, d = 4096 on p GPUs: DP, TP, PP side by side
    rep.finish()


def part1_alpha_beta(rep: Report, args: argparse.Namespace) -> None:
    p, s = args.world_size, args.size
    beta = NOTES_BETA if args.beta_gbs is None else args.beta_gbs * 1e9
    link = Link(args.alpha_us * 1e-6, beta, "Part 1's link")
    rep.note(f"{link.describe()}" + (" (= 50 GiB/s, the notes' figure)" if args.beta_gbs is None else ""))
    latency, bandwidth = ring_allreduce_terms(p, s, link)
    rep.line(f"  2(p-1)α = {2 * (p - 1)}α = {fmt_time(latency)};  2(p-1)/p·S/B = {2 * (p - 1) / p:g} × "
             f"{fmt_bytes(s, binary=True)} / {beta / GiB:.4g} GiB/s = {fmt_time(bandwidth)};  "
             f"T = {fmt_time(RING_ALLREDUCE.time(p, s, link))}")
    stand_in = col.ring_allreduce([np.zeros(p, dtype=np.uint8)] * p)  # one byte per chunk, scaled
    counted = stand_in.busiest_sent / p * s
    same = (stand_in.n_rounds == RING_ALLREDUCE.rounds(p)
            and math.isclose(counted, RING_ALLREDUCE.busiest_bytes(p, s)))
    # The notes' first-order model with the counted messages and bytes: the same T as the closed form.
    first_order = alpha_beta_time(stand_in.n_rounds, counted, link)
    rep.line(f"  counted (a p-byte ring): N_msg = {stand_in.n_rounds}, S_sent = "
             f"{fmt_bytes(counted, binary=True)} a rank ({'same' if same else 'DIFFERENT'}); α·N_msg + "
             f"S_sent/B = {fmt_time(first_order)}")
    # The notes' 1.5 × 64/50 ms works their MiB and GiB/s as MB and GB/s: the same term in those units.
    bandwidth_decimal = bandwidth * (1e6 / MiB) * (GiB / 1e9)   # S in MB, B in GB/s
    # (shown in the comparison's row on the notes' 1.92 ms, not again on a line of its own)
    rep.value("latency_us", latency * 1e6)
    rep.value("bandwidth_ms", bandwidth * 1e3)
    rep.value("bandwidth_decimal_ms", bandwidth_decimal * 1e3)
    rep.value("first_order_same", same and math.isclose(
        first_order, RING_ALLREDUCE.time(p, s, link), rel_tol=1e-12))
    rep.value("ring_terms_counted", same)
    balance = ring_allreduce_balance_bytes(p, link)
    rep.value("balance_bytes", balance, compared=False)   # for --json
    if balance > 0:
        rep.line(f"  the two terms are equal at S = p·α·B = {fmt_bytes(balance, binary=True)}; below it "
                 "start-ups take most of T")
    else:
        rep.line("  α = 0: no start-up cost, the bandwidth term is all of T at every size")
    sizes = [KiB * 16**i for i in range(6)]   # 1 KiB … 1 GiB
    rows, shares = [], []
    for size in sizes:
        lat, bw = ring_allreduce_terms(p, size, link)
        share = lat / (lat + bw)  # bw > 0: p >= 2 and S >= 1 KiB
        shares.append(share)
        rows.append([fmt_bytes(size, binary=True), fmt_time(lat), fmt_time(bw), f"{100 * share:.1f} %",
                     size / (lat + bw) / 1e9, bar(share, 1, 25)])
    rep.table(["S", "2(p-1)α", "2(p-1)/p·S/B", "α's share", "S/T (GB/s)", "α's share, drawn"], rows,
              name="sweep")
    rep.value("alpha_share_falls", all(a > b for a, b in zip(shares, shares[1:])))


def part2_interconnects(rep: Report) -> None:
    one_way = {key: gbs for _, key, gbs, _ in LINKS}
    rows = [[name,
             rep.notes_text(f"CS-links-{key}-bw" if key in ("nvlink", "nvswitch") else f"CS-links-{key}"),
             gbs, rep.notes_text(f"CS-links-{key}-row"), scope] for name, key, gbs, scope in LINKS]
    rep.table(["link", "notes", "one way GB/s (spec)", "latency (notes)", "scope"], rows, name="links")
    rep.note("one way from each link's specification; the notes' 'one way' column tags NVLink's 900 and "
             "PCIe's 64 two-way ('双向'). "
             f"Like for like, '900 → 64 GB/s' is {one_way['nvlink']:g} → {PCIE5_X16_ONE_WAY_GBS:.0f} GB/s "
             f"one way ({one_way['nvlink'] / PCIE5_X16_ONE_WAY_GBS:.1f}×, not {900 / 64:.1f}×)")
    rep.value("ib_gbs", one_way["ib"])
    rep.value("roce_gbs", one_way["roce"])
    rep.value("nvlink_two_way_gbs", 2 * one_way["nvlink"])
    rep.value("nvlink_over_ib", one_way["nvlink"] / one_way["ib"])
    rep.value("ib_over_eth", one_way["ib"] / one_way["roce"])
    rep.value("pcie_one_way_gbs", PCIE5_X16_ONE_WAY_GBS)
    rep.value("pcie_two_way_gbs", 2 * PCIE5_X16_ONE_WAY_GBS)
    rep.value("nvlink_450_pct_of_peak", 100 * CS336_NVLINK.beta_Bps / 1e9 / one_way["nvlink"])
    rep.value("ib_40_pct_of_peak", 100 * CS336_INFINIBAND.beta_Bps / 1e9 / one_way["ib"])
    rep.value("ib_alpha_us", CS336_INFINIBAND.alpha_s * 1e6)
    # What the two places of the notes that disagree give (rows CS-links-nvlink-450, CS-links-ib-latency):
    # the box's 39 GB (4 cards) at the caption's 60 % and 85 % of NVLink's one-way 450 GB/s peak, and
    # Llama 2 13B's 2L TP calls' start-ups at the table's 1-2 µs and at the TP paragraph's 5 µs.
    box, calls = RING_ALLREDUCE.busiest_bytes(NOTES_P, LLAMA2_13B.params * FP16), 2 * LLAMA2_13B.layers
    rep.value("box_nvlink_60_ms", box / (EFFECTIVE_SHARE[0] * CS336_NVLINK.beta_Bps) * 1e3)
    rep.value("box_nvlink_85_ms", box / (EFFECTIVE_SHARE[1] * CS336_NVLINK.beta_Bps) * 1e3)
    rep.value("tp_startups_ib_table_lo_us", calls * IB_TABLE_ALPHA_US[0])
    rep.value("tp_startups_ib_table_hi_us", calls * IB_TABLE_ALPHA_US[1])
    rep.value("tp_startups_ib_paragraph_us", calls * CS336_INFINIBAND.alpha_s * 1e6)


def part3_llama_allreduce(rep: Report, args: argparse.Namespace) -> None:
    p = args.world_size
    grads = LLAMA2_13B.params * FP16
    # The conversion box: 8 cards by its words, 4 cards by its numbers (computed at both, whatever p).
    box = {cards: RING_ALLREDUCE.busiest_bytes(cards, grads) for cards in (NOTES_P, BOX_CARDS)}
    rep.value("grads_gb", grads / 1e9)
    rep.value("volume_8_cards_gb", box[BOX_CARDS] / 1e9)
    rep.value("box_nvlink_ms", box[NOTES_P] / CS336_NVLINK.beta_Bps * 1e3)
    rep.value("box_ib_ms", box[NOTES_P] / CS336_INFINIBAND.beta_Bps * 1e3)
    rep.value("box_nvlink_8_ms", box[BOX_CARDS] / CS336_NVLINK.beta_Bps * 1e3)
    rep.value("box_ib_8_ms", box[BOX_CARDS] / CS336_INFINIBAND.beta_Bps * 1e3)
    rep.note("the notes' effective one-way bandwidths, α = 1 µs NVLink, 5 µs otherwise; compute: "
             f"{STEP_MS[0]:g}-{STEP_MS[1]:g} ms forward + backward (the notes' A100), backward ≈ 2/3")
    eth_peak = Link(CS336_ETHERNET.alpha_s, 12.5e9, "100G Ethernet at peak")
    nv_eff = Link(CS336_NVLINK.alpha_s, 0.8 * 450e9, "NVLink at 80 % (360)")
    rows, times = [], {}
    backward = 2 / 3 * STEP_MS[0] / 1e3   # the shorter step's backward: what overlap can hide behind
    for link in (CS336_NVLINK, nv_eff, CS336_INFINIBAND, CS336_ETHERNET, eth_peak):
        t = times[link.name] = RING_ALLREDUCE.time(p, grads, link)
        hidden = "yes" if t <= backward else ("at 400 ms" if t <= 2 / 3 * STEP_MS[1] / 1e3 else "no")
        rows.append([link.name, link.beta_Bps / 1e9, f"{t * 1e3:.5g} ms", f"{t * 1e3 / STEP_MS[1]:.2f}-"
                     f"{t * 1e3 / STEP_MS[0]:.2f}", f"{100 * t / (t + STEP_MS[1] / 1e3):.0f}-"
                     f"{100 * t / (t + STEP_MS[0] / 1e3):.0f} %", hidden])
    rep.table(["link", "GB/s", "all-reduce", "÷ compute", "no-overlap share", "in backward?"], rows,
              name="llama_links")
    rep.note("InfiniBand's 40, Ethernet's 10 GB/s: 80 % of their peaks; NVLink's 450: its whole peak")
    rep.value("volume_gb", RING_ALLREDUCE.busiest_bytes(p, grads) / 1e9)
    rep.value("t_nvlink_ms", times[CS336_NVLINK.name] * 1e3)
    rep.value("t_ib_ms", times[CS336_INFINIBAND.name] * 1e3)
    rep.value("t_eth_ms", times[CS336_ETHERNET.name] * 1e3)
    rep.value("backward_ms", backward * 1e3)
    rep.value("nvlink_over_backward", times[CS336_NVLINK.name] / backward)


def part4_dp_vs_tp(rep: Report, args: argparse.Namespace) -> None:
    p, m = args.world_size, LLAMA2_13B
    act = activation_bytes(NOTES_BATCH, m.width, FP16)
    calls = 2 * m.layers
    tp_notes = tp_step_bytes_per_device(m.layers, act, p)
    tp_ag = tp_step_bytes_per_device(m.layers, act, p, per_call="all-gather")
    dp = RING_ALLREDUCE.busiest_bytes(p, m.params * FP16)
    calls_tp = [CollectiveCall("all-gather", "activation, forward", m.layers, act),
                CollectiveCall("reduce-scatter", "its gradient, backward", m.layers, act)]
    rows, ring_rounds = [], RING_ALLREDUCE.rounds(p)
    for name, n_calls, nbytes, rounds, t in [
            ("DP: all-reduce of 26 GB", 1, dp, ring_rounds,
             lambda lk: RING_ALLREDUCE.time(p, m.params * FP16, lk)),
            ("TP, the notes: 2L all-reduce-sized", calls, tp_notes, calls * ring_rounds,
             lambda lk: calls * RING_ALLREDUCE.time(p, act, lk)),
            ("TP: L all-gathers + L reduce-scatters", calls, tp_ag,
             sum(c.calls * c.ring.rounds(p) for c in calls_tp),
             lambda lk: sum(c.calls * c.ring.time(p, c.nbytes, lk) for c in calls_tp))]:
        rows.append([name, n_calls, fmt_bytes(nbytes), rounds, fmt_time(t(CS336_NVLINK)),
                     fmt_time(t(CS336_INFINIBAND))])
    rep.table(["per step, per rank", "calls", "bytes", "α's (ring rounds)", "NVLink", "InfiniBand"], rows,
              name="dp_tp")
    rep.note(f"the notes charge one α per call; a ring call is {p - 1}-{2 * (p - 1)} rounds, each with its "
             "own α (column 'α's'); their A = B × d counts one token a sequence (why: below)")
    # The DP vs TP table's per-call and per-step formulas at the notes' p = 4, in units of LW and A.
    one_call = col.traffic("ring all-gather", NOTES_P, 4000).busiest_sent / 4000
    rep.value("act_5120_b", act)
    rep.value("act_5120_mib", act / MiB)
    rep.value("act_5120_mb", act / 1e6)
    rep.value("tp_calls", calls)
    rep.value("dp_calls", sum(c.calls for c in zero_step_collectives("DDP", m.params * FP16)))
    rep.value("dp_step_LW", RING_ALLREDUCE.busiest_bytes(NOTES_P, 1.0))
    rep.value("tp_call_A", one_call)
    rep.value("tp_step_LA", 2 * one_call)
    rep.value("tp_step_mb", tp_ag / 1e6)
    rep.value("tp_step_mib", tp_ag / MiB)
    rep.value("tp_step_doubled_mb", tp_notes / 1e6)
    rep.value("tp_step_doubled_mib", tp_notes / MiB)
    rep.value("tp_over_dp", tp_ag / dp)
    rep.value("tp_doubled_over_dp", tp_notes / dp)
    rep.value("context", LLAMA2_CONTEXT)
    rep.value("tp_context_over_dp", tp_ag * LLAMA2_CONTEXT / dp)
    rep.value("tp_equals_dp_tokens", dp / tp_ag)
    rep.value("tp_startups_nvlink_us", calls * CS336_NVLINK.alpha_s * 1e6)
    rep.value("tp_startups_ib_us", calls * CS336_INFINIBAND.alpha_s * 1e6)


def part5_tp_activation(rep: Report, args: argparse.Namespace) -> None:
    p = args.world_size
    act = int(activation_bytes(NOTES_BATCH, TP_EXAMPLE_WIDTH, FP16))
    # counted message by message, no data moved
    gathered = col.traffic("ring all-gather", p, act).busiest_sent
    scattered = col.traffic("ring reduce-scatter", p, act).busiest_sent
    reduced = col.traffic("ring all-reduce", p, act).busiest_sent
    rep.table(["collective on A, per rank", "formula", "counted on the simulated ring"], [
        ["all-gather (forward)", f"(p-1)/p·A = {fmt_bytes((p - 1) / p * act, binary=True)}",
         fmt_bytes(gathered, binary=True)],
        ["all-gather + reduce-scatter (fwd + bwd)", "2(p-1)/p·A = "
                                                    f"{fmt_bytes(2 * (p - 1) / p * act, binary=True)}",
         fmt_bytes(gathered + scattered, binary=True)],
        ["all-reduce", f"2(p-1)/p·A = {fmt_bytes(2 * (p - 1) / p * act, binary=True)}",
         fmt_bytes(reduced, binary=True)]], name="tp_layer")
    # a layer's traffic: the forward all-gather and the backward reduce-scatter (the TP table's
    # '每层 2 次（前向+反向）', two calls a layer)
    rep.value("act_1024_kib", act / KiB)
    rep.value("ag_kib", gathered / KiB)
    rep.value("layer_fwd_bwd_kib", (gathered + scattered) / KiB)


def part6_four_gpu_mlp(rep: Report, args: argparse.Namespace) -> None:
    p, m, mb = args.world_size, MLP_12, args.micro_batches
    d, layers, batch = m.width, m.layers, NOTES_BATCH
    state = training_state_bytes(m.params)
    act = activation_bytes(batch, d, FP16)
    rep.value("layer_params_m", d * d / 1e6)
    rep.value("layer_mib", d * d * FP16 / MiB)
    rep.value("params_m", m.params / 1e6)
    rep.value("state_gib", state / GiB)
    rep.value("state_b", state)
    rep.value("state_gb", state / 1e9)
    rep.value("act_4096_mib", act / MiB)
    stages = min(p, layers)
    tp_cols, pp_layers, local_batch = math.ceil(d / p), math.ceil(layers / stages), math.ceil(batch / p)
    held = {"DP": m.params, "TP": layers * d * tp_cols, "PP": pp_layers * d * d}
    acts = {"DP": layers * activation_bytes(local_batch, d, FP16), "TP": layers * act, "PP": pp_layers * act}
    rep.note(f"per GPU: DP the whole model, local batch {local_batch}; TP {tp_cols} of {d} columns of every "
             f"layer;\nPP {pp_layers} of {layers} layers (GPipe: all micro-batches' activations). "
             "Activations: one B × d\noutput a layer (the notes' measure; autograd keeps twice). Optimizer: "
             "master + Adam, 12 B/param")
    rows = []
    for way in ("DP", "TP", "PP"):
        opt = sum(LEDGER[k] for k in OPTIMIZER_STATE) * held[way]
        parts = [LEDGER["fp16 parameters"] * held[way], LEDGER["fp16 gradients"] * held[way], opt, acts[way]]
        rows.append([way] + [fmt_bytes(x, binary=True) for x in parts + [sum(parts)]])
    rep.table(["strategy", "weights", "gradients", "optimizer", "activations", "total per GPU"], rows,
              name="memory")
    rep.table(["strategy", "per step", "calls", "bytes per GPU", "NVLink", "InfiniBand"],
              four_gpu_traffic_rows(p, mb, stages, act), name="traffic")
    bubble = (stages - 1) / (mb + stages - 1)
    rep.line(f"  PP costs idle time, not bytes: S = {stages}, M = {mb}, bubble (S-1)/(M+S-1) = "
             f"{100 * bubble:.0f} % of the step" + (f"\n  (only {layers} stages: one layer each)"
                                                    if p > layers else ""))


def four_gpu_traffic_rows(p: int, mb: int, stages: int, act: float) -> list[list]:
    """Part 6's traffic table: DP's and TP's collectives and PP's sends per step, bytes and α-β time."""
    m = MLP_12
    collectives = {
        "DP": [CollectiveCall("all-reduce", "gradients", 1, FP16 * m.params)],
        "TP": [CollectiveCall("all-gather", "activation, forward", m.layers, act),
               CollectiveCall("reduce-scatter", "gradient, backward", m.layers, act)],
    }
    rows = []
    for way, calls in collectives.items():
        rows.append([way, " + ".join(f"{c.calls} {c.kind}" for c in calls), sum(c.calls for c in calls),
                     fmt_bytes(sum(c.calls * c.ring.busiest_bytes(p, c.nbytes) for c in calls), binary=True),
                     fmt_time(sum(c.calls * c.ring.time(p, c.nbytes, CS336_NVLINK) for c in calls)),
                     fmt_time(sum(c.calls * c.ring.time(p, c.nbytes, CS336_INFINIBAND) for c in calls))])
    sends = 2 * mb if stages > 1 else 0
    pp_bytes = pp_step_bytes_per_device(act) if stages > 1 else 0.0
    pp_t = {lk.name: pp_step_send_time(mb, act, lk) if stages > 1 else 0.0
            for lk in (CS336_NVLINK, CS336_INFINIBAND)}
    rows.append(["PP", f"{sends} sends (middle stage)", sends, fmt_bytes(pp_bytes, binary=True),
                 fmt_time(pp_t[CS336_NVLINK.name]), fmt_time(pp_t[CS336_INFINIBAND.name])])
    return rows


if __name__ == "__main__":
    run_main(main)
