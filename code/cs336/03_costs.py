"""CS336 lecture 8 (通信复杂度、互联带宽、Llama 2 13B、TP vs DP、四卡算例): communication costs, computed.
A model only: the α-β formulas of common.costmodel and the ledger of cs336.ledger, no torch.

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math

import numpy as np

from common.cli import UsageError, make_parser, run_main
from common.costmodel import (
    CS336_ETHERNET,
    CS336_INFINIBAND,
    CS336_NVLINK,
    CollectiveCall,
    Link,
    alpha_beta_time,
    pp_step_bytes_per_device,
    pp_step_send_time,
    ring_allreduce_balance_bytes,
    ring_allreduce_bytes_per_device,
    ring_allreduce_terms,
    ring_allreduce_time,
    tp_step_bytes_per_device,
    zero_step_collectives,
)
from common.output import ASSUMPTION, EXACT, Report, bar, fmt_bytes, fmt_time
from cs336.ledger import LEDGER, LLAMA2_13B, MLP_12, OPTIMIZER_STATE, activation_bytes, training_state_bytes
from lecture14 import collectives as col

KiB, MiB, GiB = 2**10, 2**20, 2**30
NOTES_P, NOTES_ALPHA_US, NOTES_SIZE, NOTES_BETA = 4, 5.0, 64 * MiB, 50 * GiB  # Part 1: MiB, GiB/s
NOTES_BATCH, TP_EXAMPLE_WIDTH, FP16 = 128, 1024, 2
STEP_MS = (200.0, 400.0)  # the notes' forward + backward of Llama 2 13B on an A100
LLAMA2_CONTEXT = 4096     # tokens per sequence, for the caveat on the notes' A = B × d
# The interconnect table: (link, the notes' figure, its value, unit, the notes' direction, latency µs, scope).
INTERCONNECTS = [
    ("NVLink 4.0 (H100)", "900 GB/s", 900.0, "GB/s", "two-way", (1, 2), "GPUs in a node"),
    ("NVSwitch (DGX)", "900 GB/s", 900.0, "GB/s", "two-way", (1, 5), "8 GPUs in a node"),
    ("PCIe 5.0 x16", "64 GB/s", 64.0, "GB/s", "two-way", (2, 5), "GPU-CPU"),
    ("InfiniBand NDR", "400 Gb/s", 400.0, "Gb/s", "one way", (1, 2), "across nodes"),
    ("RoCE / Ethernet 100G", "100 Gb/s", 100.0, "Gb/s", "one way", (5, 20), "across nodes"),
]
EFFICIENCY = (0.60, 0.85)  # the notes: effective bandwidth is usually 60-85 % of peak
# PCIe 5.0: 32 GT/s per lane, 128b/130b line code: what x16 carries in each direction.
PCIE5_X16_ONE_WAY_GBS = 32 * 16 * 128 / 130 / 8


def main() -> None:
    parser = make_parser(__doc__, world_size=NOTES_P, alpha_us=NOTES_ALPHA_US, beta_gbs=None, size="64MiB",
                         micro_batches=8, context={"beta_gbs": "Part 1; default: the notes' 50 GiB/s = 53.69 GB/s",
                                                   "micro_batches": "Part 6's pipeline; the notes give none"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be >= 2: with one GPU nothing is communicated")
    rep = Report(__file__, "communication costs: α-β, links, Llama 2 13B, DP vs TP, 4-GPU MLP", args)
    part1_alpha_beta(rep, args)     # α·N_msg + S/B; the 4-rank 64 MiB example; where α dominates
    part2_interconnects(rep)        # the link table in one unit and one direction; the notes' ratios
    part3_llama_allreduce(rep, args)  # 26 GB of gradients through a ring: NVLink, InfiniBand, Ethernet
    part4_dp_vs_tp(rep, args)       # per step: one big all-reduce against 2L small collectives
    part5_tp_activation(rep, args)  # B = 128, d = 1024: what one TP layer sends per rank
    part6_four_gpu_mlp(rep, args)   # 12 layers, d = 4096 on p GPUs: DP, TP, PP side by side
    rep.finish()


def part1_alpha_beta(rep: Report, args: argparse.Namespace) -> None:
    p, s = args.world_size, args.size
    beta = NOTES_BETA if args.beta_gbs is None else args.beta_gbs * 1e9
    link = Link(args.alpha_us * 1e-6, beta, "Part 1's link")
    rep.part(1, f"T ≈ α·N_msg + S/B: ring all-reduce of {fmt_bytes(s, binary=True)} on p = {p}")
    rep.line("  ring all-reduce: 2(p-1) messages, 2(p-1)/p·S bytes per rank:  T = 2(p-1)α + 2(p-1)/p·S/B")
    rep.note(f"{link.describe()}" + (" (= 50 GiB/s, the notes' figure)" if args.beta_gbs is None else ""))
    latency, bandwidth = ring_allreduce_terms(p, s, link)
    rep.line(f"  2(p-1)α = {2 * (p - 1)}α = {fmt_time(latency)};  2(p-1)/p·S/B = {2 * (p - 1) / p:g} × "
             f"{fmt_bytes(s, binary=True)} / {beta / GiB:.4g} GiB/s = {fmt_time(bandwidth)};  "
             f"T = {fmt_time(ring_allreduce_time(p, s, link))}")
    stand_in = col.ring_allreduce([np.zeros(p, dtype=np.uint8)] * p)  # one byte per chunk, scaled
    counted = stand_in.busiest_sent / p * s
    same = stand_in.n_rounds == 2 * (p - 1) and math.isclose(counted, ring_allreduce_bytes_per_device(p, s))
    rep.line(f"  counted by lecture14.collectives (a p-byte stand-in, scaled to S): {stand_in.n_rounds} rounds, "
             f"{fmt_bytes(counted, binary=True)} per rank: {'same' if same else 'DIFFERENT'}")
    # The notes' first-order model with the counted messages and bytes: the same T as the closed form.
    first_order = alpha_beta_time(stand_in.n_rounds, counted, link)
    rep.line(f"  α·N_msg + S_sent/B with the counted N_msg = {stand_in.n_rounds} and S_sent = "
             f"{fmt_bytes(counted, binary=True)}: {fmt_time(first_order)}")
    at_notes = (p, args.alpha_us, s, beta) == (NOTES_P, NOTES_ALPHA_US, NOTES_SIZE, NOTES_BETA)
    if at_notes:
        readings = [("as the notes state: 64 MiB / 50 GiB/s", 64 * MiB / (50 * GiB)),
                    ("both decimal: 64 MB / 50 GB/s", 64e6 / 50e9),
                    ("mixed: 64 MiB / 50 GB/s", 64 * MiB / 50e9)]
        rep.table(["reading of 1.5 × 64/50", "S/B", "1.5 × S/B"],
                  [[w, fmt_time(t), f"{1.5 * t * 1e3:.4g} ms"] for w, t in readings], name="units")
    rep.claim("latency term 6α", latency * 1e6, 30 if at_notes else None, "µs", EXACT, places=0)
    rep.claim("bandwidth term 1.5 × S/B", bandwidth * 1e3, 1.92 if at_notes else None, "ms", EXACT, places=2,
              erratum=True, why=f"1.92 = 1.5 × 64/50 is 64 MB / 50 GB/s; in the stated MiB and GiB/s it is {bandwidth * 1e3:.4g}"
              if at_notes else "")
    if at_notes:
        rep.note("64 MiB / 50 GiB/s = 2^26 / (50·2^30) s = 1.25 ms: MiB over GiB is 1/1024, not 1/1000.\n"
                 "The notes' 'close to 2 ms' holds either way.")
    balance = ring_allreduce_balance_bytes(p, link)
    if balance > 0:
        rep.line(f"  small tensors: the two terms are equal at S = p·α·B = {fmt_bytes(balance, binary=True)};\n"
                 "  below it start-ups take most of T")
    else:
        rep.line("  α = 0: no start-up cost, the bandwidth term is all of T at every size")
    sizes = [KiB * 4**i for i in range(0, 11, 2 if args.quick else 1)]
    rows = []
    for size in sizes:
        lat, bw = ring_allreduce_terms(p, size, link)
        share = lat / (lat + bw)  # bw > 0: p >= 2 and S >= 1 KiB
        rows.append([fmt_bytes(size, binary=True), fmt_time(lat), fmt_time(bw), f"{100 * share:.1f} %",
                     size / (lat + bw) / 1e9, bar(share, 1, 25)])
    rep.table(["S", "2(p-1)α", "2(p-1)/p·S/B", "α's share", "S/T (GB/s)", ""], rows, name="sweep")


def part2_interconnects(rep: Report) -> None:
    rep.part(2, "interconnects: one unit (GB/s), one direction")
    rows, one_way = [], {}
    for name, figure, value, unit, direction, (lat_lo, lat_hi), scope in INTERCONNECTS:
        gbs = value / 8 if unit == "Gb/s" else value           # bits → bytes
        one_way[name] = gbs / 2 if direction == "two-way" else gbs  # a two-way total is both directions
        lo, hi = (e * one_way[name] for e in EFFICIENCY)
        rows.append([name, figure, direction, one_way[name], f"{lo:.3g}-{hi:.3g}", f"{lat_lo}-{lat_hi}", scope])
    rep.table(["link", "notes", "notes say", "one way GB/s", "60-85 %", "latency µs", "scope"], rows, name="links")
    rep.note("converted as the notes label each figure: Gb/s ÷ 8, a two-way total ÷ 2. Their column is\n"
             "headed 'one way', yet NVLink's 900 GB/s is a two-way total (18 links × 25 GB/s each way).")
    nv, ib, eth = one_way["NVLink 4.0 (H100)"], one_way["InfiniBand NDR"], one_way["RoCE / Ethernet 100G"]
    rep.claim("InfiniBand NDR 400 Gb/s in GB/s", ib, 50, "GB/s", EXACT, places=0)
    rep.claim("RoCE 100 Gb/s in GB/s", eth, 12.5, "GB/s", EXACT, places=1)
    rep.claim("NVLink / InfiniBand, one way each", nv / ib, 18, "×", EXACT, factor=1.2,
              erratum=True, why="18 = 900/50: NVLink two-way over InfiniBand one way; like for like 450/50 = 9")
    rep.note("'~18' is read within a factor of 1.2; two-way each it is 900/100 = 9 as well")
    rep.claim("InfiniBand / Ethernet 100G, one way each", ib / eth, 4, "×", EXACT, places=0)
    pcie_two_way = 2 * PCIE5_X16_ONE_WAY_GBS
    rep.claim("PCIe 5.0 x16 two-way", pcie_two_way, 64, "GB/s", EXACT, places=0,
              erratum=True, why=f"x16 carries {PCIE5_X16_ONE_WAY_GBS:.1f} GB/s each way (32 GT/s, 128b/130b): 64 is one way")
    rep.note(f"so '900 → 64 GB/s' sets NVLink's two-way total against PCIe's one-way rate; like for like\n"
             f"the drop is {nv:g} → {PCIE5_X16_ONE_WAY_GBS:.0f} GB/s one way ({nv / PCIE5_X16_ONE_WAY_GBS:.1f}×), "
             f"not {900 / 64:.1f}×")
    rep.line("  the worked examples use 'effective' bandwidths: NVLink 450, InfiniBand 40 GB/s; the table's\n"
             f"  caption puts effective at {100 * EFFICIENCY[0]:.0f}-{100 * EFFICIENCY[1]:.0f} % of peak")
    rep.claim("NVLink's 450 GB/s is 60-85 % of peak", EFFICIENCY[0] <= 450 / nv <= EFFICIENCY[1], True,
              kind=EXACT, erratum=True, why=f"450 = 900/2 is the whole one-way peak; 60-85 % of it is "
              f"{EFFICIENCY[0] * nv:.0f}-{EFFICIENCY[1] * nv:.0f} GB/s")
    rep.claim("InfiniBand's 40 GB/s is 60-85 % of peak", EFFICIENCY[0] <= 40 / ib <= EFFICIENCY[1], True, kind=EXACT)
    ib_alpha_us = CS336_INFINIBAND.alpha_s * 1e6
    rep.claim("InfiniBand's 5 µs (TP paragraph) in 1-2 µs", 1 <= ib_alpha_us <= 2, True, kind=EXACT,
              erratum=True, why="the table says ~1-2 µs, the TP paragraph computes with ~5 µs (so do we)")


def part3_llama_allreduce(rep: Report, args: argparse.Namespace) -> None:
    p = args.world_size
    grads = LLAMA2_13B.params * FP16
    rep.part(3, f"Llama 2 13B: all-reduce of {fmt_bytes(grads)} of fp16 gradients on p = {p}")
    rep.claim("gradients 13B × 2 B", grads / 1e9, 26, "GB", EXACT, places=0)
    at8 = ring_allreduce_bytes_per_device(8, grads)
    rep.claim("ring volume per rank, 8 cards", at8 / 1e9, 39, "GB", EXACT, places=0,
              erratum=True, why=f"2·7/8·26 GB = {at8 / 1e9:g} GB; 39 GB is 4 cards (2·3/4·26)")
    rep.note(f"the conversion paragraph says 8 cards, but its 87 ms and 975 ms follow from 39 GB (4 cards);\n"
             f"at 8 cards they would be {at8 / 450e9 * 1e3:.0f} ms and {at8 / 40e9 * 1e3:.0f} ms")
    volume = ring_allreduce_bytes_per_device(p, grads)
    at_notes = p == NOTES_P
    rep.claim(f"ring volume per rank, p = {p}", volume / 1e9, 39 if at_notes else None, "GB", EXACT, places=0)
    rep.note("links: the notes' effective one-way bandwidths, α = 1 µs NVLink, 5 µs otherwise;\n"
             "InfiniBand's 40 and Ethernet's 10 GB/s are 80 % of 50 and 12.5; NVLink's 450 is 100 %.\n"
             f"compute: {STEP_MS[0]:g}-{STEP_MS[1]:g} ms forward + backward (the notes' A100); backward ≈ 2/3")
    eth_peak = Link(CS336_ETHERNET.alpha_s, 12.5e9, "100G Ethernet at peak")
    nv_eff = Link(CS336_NVLINK.alpha_s, 0.8 * 450e9, "NVLink at 80 % (360)")
    rows, times = [], {}
    for link in (CS336_NVLINK, nv_eff, CS336_INFINIBAND, CS336_ETHERNET, eth_peak):
        t = times[link.name] = ring_allreduce_time(p, grads, link)
        hidden = "yes" if t <= 2 / 3 * STEP_MS[0] / 1e3 else ("at 400 ms" if t <= 2 / 3 * STEP_MS[1] / 1e3 else "no")
        rows.append([link.name, link.beta_Bps / 1e9, f"{t * 1e3:.5g} ms", f"{t * 1e3 / STEP_MS[1]:.2f}-"
                     f"{t * 1e3 / STEP_MS[0]:.2f}", f"{100 * t / (t + STEP_MS[1] / 1e3):.0f}-"
                     f"{100 * t / (t + STEP_MS[0] / 1e3):.0f} %", hidden])
    rep.table(["link", "GB/s", "all-reduce", "÷ compute", "no-overlap share", "in backward?"], rows,
              name="llama_links")
    rep.claim("all-reduce time, NVLink 450 GB/s", times[CS336_NVLINK.name] * 1e3, 87 if at_notes else None, "ms",
              EXACT, places=0)
    rep.claim("all-reduce time, InfiniBand 40 GB/s", times[CS336_INFINIBAND.name] * 1e3, 975 if at_notes else None,
              "ms", EXACT, places=0)
    rep.claim("all-reduce time, 100G Ethernet", times[CS336_ETHERNET.name] * 1e3, 3900 if at_notes else None, "ms",
              ASSUMPTION, places=0, why="only at 10 GB/s (80 % of 12.5)" if at_notes else "")
    rep.note("the notes' 3900 ms is 39 GB / 10 GB/s: Ethernet at 80 % of its 12.5 GB/s, as InfiniBand's\n"
             "40 is of 50; at the full 12.5 GB/s it is 3120 ms. Only NVLink is taken at its whole peak.")


def part4_dp_vs_tp(rep: Report, args: argparse.Namespace) -> None:
    p, m = args.world_size, LLAMA2_13B
    rep.part(4, f"DP vs TP traffic per step: {m.name}, L = {m.layers}, d = {m.width}, B = {NOTES_BATCH}, p = {p}")
    rep.table(["", "DP (DDP)", "TP"], [
        ["collectives per step", "1 all-reduce (gradients)", "2L: each layer forward + backward"],
        ["bytes per call, per rank", "2(p-1)/p·LW", "2(p-1)/p·A (the notes); (p-1)/p·A (all-gather)"],
        ["bytes per step, per rank", "2(p-1)/p·LW", "2L·2(p-1)/p·A (the notes); 2L·(p-1)/p·A"]], name="formulas")
    act = activation_bytes(NOTES_BATCH, m.width, FP16)
    rep.claim("TP activation A = 128 × 5120 × 2 B", act / 1e6, 1.25, "MB", EXACT, places=2,
              erratum=True, why=f"{act:,.0f} B is {act / MiB:g} MiB = {act / 1e6:.2f} MB: the notes write MB for MiB")
    calls = 2 * m.layers
    rep.claim("TP collectives per step (2L)", calls, 80, kind=EXACT, places=0)
    rep.claim("DP collectives per step", sum(c.calls for c in zero_step_collectives("DDP", m.params * FP16)), 1,
              kind=EXACT, places=0)
    tp_notes = tp_step_bytes_per_device(m.layers, act, p)
    tp_ag = tp_step_bytes_per_device(m.layers, act, p, per_call="all-gather")
    rep.claim("TP per step per rank, 80 × A × 3/4 × 2", tp_notes / 1e6, 150 if p == NOTES_P else None, "MB",
              EXACT, places=0, erratum=True, why=f"= {tp_notes / MiB:g} MiB: the notes' 150 is MiB, as their A is" if p == NOTES_P else "")
    dp = ring_allreduce_bytes_per_device(p, m.params * FP16)
    calls_tp = [CollectiveCall("all-gather", "activation, forward", m.layers, act),
                CollectiveCall("reduce-scatter", "its gradient, backward", m.layers, act)]
    rows = []
    for name, n_calls, nbytes, rounds, t in [
            ("DP: all-reduce of 26 GB", 1, dp, 2 * (p - 1), lambda lk: ring_allreduce_time(p, m.params * FP16, lk)),
            ("TP, the notes: 2L all-reduce-sized", calls, tp_notes, calls * 2 * (p - 1),
             lambda lk: calls * ring_allreduce_time(p, act, lk)),
            ("TP: L all-gathers + L reduce-scatters", calls, tp_ag, calls * (p - 1),
             lambda lk: sum(c.time(p, lk) for c in calls_tp))]:
        rows.append([name, n_calls, fmt_bytes(nbytes), rounds, fmt_time(t(CS336_NVLINK)), fmt_time(t(CS336_INFINIBAND))])
    rep.table(["per step, per rank", "calls", "bytes", "α's (ring rounds)", "NVLink", "InfiniBand"], rows, name="dp_tp")
    rep.line(f"  DP moves {dp / tp_notes:.0f}× the bytes of TP (the notes' count) but in one call")
    rep.claim("TP moves under a tenth of DP's bytes", tp_notes < dp / 10, True, kind=ASSUMPTION,
              why=f"only for A = B × d; with {LLAMA2_CONTEXT}-token sequences TP moves "
                  f"{tp_notes * LLAMA2_CONTEXT / dp:.0f}× DP's")
    rep.claim("TP start-ups, 80 calls × 1 µs (NVLink)", calls * CS336_NVLINK.alpha_s * 1e6, 80, "µs", EXACT, places=0)
    rep.claim("TP start-ups, 80 calls × 5 µs (InfiniBand)", calls * CS336_INFINIBAND.alpha_s * 1e6, 400, "µs", EXACT,
              places=0)
    rep.note(f"the notes charge one α per call; a ring call is {p - 1}-{2 * (p - 1)} rounds, each with its own α\n"
             "(column 'α's'). Their A = B × d counts one token per sequence; with Llama 2's "
             f"{LLAMA2_CONTEXT} tokens\nA = {fmt_bytes(act * LLAMA2_CONTEXT)} per layer and TP's "
             f"{fmt_bytes(tp_notes * LLAMA2_CONTEXT)} per step is {tp_notes * LLAMA2_CONTEXT / dp:.0f}× DP's")


def part5_tp_activation(rep: Report, args: argparse.Namespace) -> None:
    p = args.world_size
    act = int(activation_bytes(NOTES_BATCH, TP_EXAMPLE_WIDTH, FP16))
    rep.part(5, f"TP activation: B = {NOTES_BATCH}, d = {TP_EXAMPLE_WIDTH}, fp16, {p}-way")
    rep.claim("activation A = 128 × 1024 × 2 B", act / KiB, 256, "KiB", EXACT, places=0)
    gathered = col.traffic("all-gather", p, act).busiest_sent  # counted message by message, no data moved
    reduced = col.traffic("ring all-reduce", p, act).busiest_sent
    rep.table(["collective on A, per rank", "formula", "counted (collectives.py)"], [
        ["all-gather (forward)", f"(p-1)/p·A = {fmt_bytes((p - 1) / p * act, binary=True)}",
         fmt_bytes(gathered, binary=True)],
        ["all-gather + reduce-scatter (fwd + bwd)", f"2(p-1)/p·A = {fmt_bytes(2 * (p - 1) / p * act, binary=True)}",
         fmt_bytes(2 * gathered, binary=True)],
        ["all-reduce", f"2(p-1)/p·A = {fmt_bytes(2 * (p - 1) / p * act, binary=True)}",
         fmt_bytes(reduced, binary=True)]], name="tp_layer")
    rep.claim("4-way all-gather per layer per rank", gathered / KiB, 384 if p == NOTES_P else None, "KiB", EXACT,
              places=0, erratum=True, why="an all-gather sends (p-1)/p·A = 0.75A; 1.5A is an all-reduce's volume" if p == NOTES_P else "")
    rep.note("the notes' 1.5A = 2(p-1)/p·A is right for a layer's forward all-gather plus its backward\n"
             "reduce-scatter together, or for an all-reduce; one all-gather is half of it")


def part6_four_gpu_mlp(rep: Report, args: argparse.Namespace) -> None:
    p, m, mb = args.world_size, MLP_12, args.micro_batches
    d, layers, batch = m.width, m.layers, NOTES_BATCH
    rep.part(6, f"{m.name}, B = {batch}, fp16, on p = {p}: DP, TP, PP")
    rep.claim("parameters per layer d²", d * d / 1e6, 16.8, "M", EXACT, places=1)
    rep.claim("one layer's weights, fp16", d * d * FP16 / MiB, 32, "MiB", EXACT, places=0)
    rep.claim("parameters, 12 layers", m.params / 1e6, 201, "M", EXACT, places=0)
    state = training_state_bytes(m.params)
    rep.claim("training state 201M × 16 B", state / GiB, 3.2, "GiB", EXACT, places=1,
              erratum=True, why=f"{state:,.0f} B = {state / 1e9:.2f} GB = exactly 3 GiB: 3.2 is the GB figure")
    act = activation_bytes(batch, d, FP16)
    rep.claim("activation 128 × 4096 × 2 B", act / MiB, 1, "MiB", EXACT, places=0)
    stages = min(p, layers)
    tp_cols, pp_layers, local_batch = math.ceil(d / p), math.ceil(layers / stages), math.ceil(batch / p)
    held = {"DP": m.params, "TP": layers * d * tp_cols, "PP": pp_layers * d * d}
    acts = {"DP": layers * activation_bytes(local_batch, d, FP16), "TP": layers * act, "PP": pp_layers * act}
    rep.note(f"per GPU: DP the whole model, local batch {local_batch}; TP {tp_cols} of {d} columns of every layer;\n"
             f"PP {pp_layers} of {layers} layers (GPipe: every micro-batch's activations kept until backward).\n"
             "Activations: one B × d output per layer kept for backward (the notes' measure; autograd also\n"
             "keeps each pre-GELU value, twice this). Optimizer = fp32 master + Adam m, v (12 B/param).")
    rows = []
    for way in ("DP", "TP", "PP"):
        opt = sum(LEDGER[k] for k in OPTIMIZER_STATE) * held[way]
        parts = [LEDGER["fp16 parameters"] * held[way], LEDGER["fp16 gradients"] * held[way], opt, acts[way]]
        rows.append([way] + [fmt_bytes(x, binary=True) for x in parts + [sum(parts)]])
    rep.table(["", "weights", "gradients", "optimizer", "activations", "total per GPU"], rows, name="memory")
    collectives = {
        "DP": [CollectiveCall("all-reduce", "gradients", 1, FP16 * m.params)],
        "TP": [CollectiveCall("all-gather", "activation, forward", layers, act),
               CollectiveCall("reduce-scatter", "gradient, backward", layers, act)],
    }
    rows = []
    for way, calls in collectives.items():
        rows.append([way, " + ".join(f"{c.calls} {c.kind}" for c in calls), sum(c.calls for c in calls),
                     fmt_bytes(sum(c.bytes_per_device(p) for c in calls), binary=True),
                     fmt_time(sum(c.time(p, CS336_NVLINK) for c in calls)),
                     fmt_time(sum(c.time(p, CS336_INFINIBAND) for c in calls))])
    sends = 2 * mb if stages > 1 else 0
    pp_bytes = pp_step_bytes_per_device(act) if stages > 1 else 0.0
    pp_t = {lk.name: pp_step_send_time(mb, act, lk) if stages > 1 else 0.0 for lk in (CS336_NVLINK, CS336_INFINIBAND)}
    rows.append(["PP", f"{sends} sends (middle stage)", sends, fmt_bytes(pp_bytes, binary=True),
                 fmt_time(pp_t[CS336_NVLINK.name]), fmt_time(pp_t[CS336_INFINIBAND.name])])
    rep.table(["", "per step", "calls", "bytes per GPU", "NVLink", "InfiniBand"], rows, name="traffic")
    bubble = (stages - 1) / (mb + stages - 1)
    rep.line(f"  PP's cost is idle time rather than bytes: with {stages} stages and {mb} micro-batches the "
             f"bubble is\n  (S-1)/(M+S-1) = {100 * bubble:.0f} % of the step" +
             (f" (only {layers} stages: one layer each)" if p > layers else ""))


if __name__ == "__main__":
    run_main(main)
