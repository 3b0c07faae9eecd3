"""Lecture 15 §3 (重叠：桶多大最好): backward overlapped with bucketed all-reduce, as a timeline model.

    python code/lecture15/03_overlap.py [--world-size 16] [--alpha-us 10] [--beta-gbs 10]
                                        [--bucket-cap-mb 25MB] [--first-bucket-cap-mb 1] [--save-figs DIR]

Model only (lecture15.ddp_sim; no torch, no processes): one stream computes the gradients in reverse
layer order, another all-reduces the buckets in index order with the ring α-β cost. Part 1 draws one
ResNet-50 step without and with overlap, Part 2 sweeps the bucket cap, Part 3 shrinks the first
bucket, Part 4 registers BERT-large's parameters in the wrong order.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse

from common.cli import link_from_args, make_parser, nonnegative_float, positive_float, run_main
from common.costmodel import Link
from common.output import ASSUMPTION, EXACT, Report, fmt_bytes
from lecture15.ddp_sim import (
    MB,
    NOTES_BERT_REVERSED_STEP_S,
    NOTES_RESNET_STEP_S,
    ComputeModel,
    MiB,
    Timeline,
    ascii_timeline,
    assign_buckets_in_order,
    gradient_ready_times,
    notes_resnet_compute,
    registration_order,
    resnet50,
    simulate_ddp,
)
from lecture15.ddp_sim import gantt_figure as ddp_gantt

# isort: split

from lecture15.cap_sweep import LINK, SLOW_ALPHA_US, SLOW_BETA_GBS, bert_compute, ms, part2_bucket_cap

# The notes' "25 MB" cap is 25 × 10^6 B (it gives their bucket counts; PyTorch's 25 MiB does not).
EXPLICIT_25_MIB = 25 * MiB  # bucket_cap_mb=25 written out: every bucket, the first too, capped at 25 MiB
SHUFFLE_SEEDS = 5     # Part 4: how many shuffled registrations to show


READING_LABEL = {"--bucket-cap-mb": "flag", "bucket_cap_mb=None (default)": "None", "bucket_cap_mb=25": "=25"}


def cap_text(nbytes: int) -> str:
    """A cap as a reader would write it: 25 MB when it is a whole number of 10^6 B, else MiB."""
    return f"{nbytes / MB:g} MB" if nbytes % MB == 0 else f"{nbytes / MiB:g} MiB"




def part1_timeline(rep: Report, args: argparse.Namespace, link: Link) -> list[tuple[str, Timeline]]:
    """ResNet-50, one step without and with overlap; the cap as given, and PyTorch's two readings."""
    model, k = resnet50(batch=32), args.world_size
    flops, compute = ComputeModel(), notes_resnet_compute()
    gmac = model.forward_flops / 2 / 32 / 1e9
    rep.note(f"compute: backward of a layer = 2 × its forward FLOPs (conv at its output resolution, "
             f"{model.description}: {gmac:.3f} GMAC per image), BatchNorm/bias ≈ 0; at "
             f"{flops.flops_per_s / 1e12:g} TFLOP/s the backward is {ms(flops.backward_s(model))} ms. The notes "
             f"do not state theirs: it is calibrated openly, × {compute.calibration:.4f} (backward "
             f"{ms(compute.backward_s(model))} ms, {gmac * compute.calibration:.3f} GMAC per image), so that the "
             f"model gives their Part 3 step of {NOTES_RESNET_STEP_S * 1e3:g} ms at their setting (K 16, α 10 µs, "
             "β 10 GB/s, 25 MB). Every other figure is a check; 'uncalibrated' = the plain FLOP count.")
    rep.note(f"comm: ring all-reduce 2(K−1)(α + n/(Kβ)) per bucket, K = {k}, {link.describe()}; "
             "buckets in index order on one stream")
    readings = (("--bucket-cap-mb", args.bucket_cap_bytes, None),
                ("bucket_cap_mb=None (default)", EXPLICIT_25_MIB, MiB),
                ("bucket_cap_mb=25", EXPLICIT_25_MIB, None))
    rows, timelines = [], {}
    for reading, cap, first in readings:
        off = simulate_ddp(model, k, link, cap, first, overlap=False, compute=compute)
        on = simulate_ddp(model, k, link, cap, first, overlap=True, compute=compute)
        raw = simulate_ddp(model, k, link, cap, first, overlap=True, compute=flops)
        timelines[reading] = (off, on, raw)
        shown = [f"{b / MB:.0f}" for b in on.bucket_bytes[:4]]  # a bucket per gradient: 161 of them
        sizes = ", ".join(shown) + (", …" if len(on.bucket_bytes) > 4 else "")
        label = f"{cap_text(cap)}" + (" + 1 MiB first" if first else "")
        rows.append([f"{label} ({READING_LABEL[reading]})", len(on.buckets), sizes, ms(on.comm_total_s),
                     ms(off.step_s), ms(on.step_s), f"{100 * (off.step_s / on.step_s - 1):.0f} %", ms(raw.step_s)])
    rep.table(["bucket cap", "buckets", "bucket sizes (MB)", "comm (ms)", "no overlap (ms)", "overlap (ms)",
               "faster by", "overlap, uncal. (ms)"], rows, name="steps")
    rep.note("(flag) = --bucket-cap-mb; (None) = DDP's default, bucket_cap_mb=None: 25 MiB with a 1 MiB "
             "first bucket; (=25) = an explicit bucket_cap_mb=25: 25 MiB, no separate first bucket")
    off, on, raw = timelines["--bucket-cap-mb"]
    rep.line(f"\n  no overlap: step {ms(off.step_s)} ms (cap {cap_text(args.bucket_cap_bytes)}; each chart spans its "
             "own step)")
    for text in ascii_timeline(off):
        rep.line("    " + text)
    rep.line(f"  overlap (DDP): step {ms(on.step_s)} ms")
    for text in ascii_timeline(on):
        rep.line("    " + text)
    setting = LINK + ("bucket_cap_bytes",)
    uncal = simulate_ddp(model, k, link, args.bucket_cap_bytes, overlap=False, compute=flops)
    why = (f"ours with the calibrated backward ({ms(compute.backward_s(model))} ms, fitted to the notes' Part 3 "
           f"step, not to this figure); uncalibrated: {ms(uncal.step_s)} ms without overlap, {ms(raw.step_s)} "
           "ms with")
    rep.claim("step without overlap", off.step_s * 1e3, 53.3, "ms", ASSUMPTION, places=1, why=why,
              setting=setting, ref="L15-3.1-step-no-overlap")
    rep.claim("step with overlap", on.step_s * 1e3, 37.8, "ms", ASSUMPTION, places=1, why=why,
              setting=setting, ref="L15-3.1-step-overlap")
    rep.claim("overlap faster by", 100 * (off.step_s / on.step_s - 1), 41, "%", ASSUMPTION, places=0,
              why=why + f"; uncalibrated {100 * (uncal.step_s / raw.step_s - 1):.1f} %", setting=setting,
              ref="L15-3.1-faster")
    rep.claim("exposed comm ≥ the last bucket's all-reduce", on.exposed_comm_s >= on.comm_s[-1] - 1e-12, True,
              kind=EXACT, setting=(), ref="L15-3.1-last-bucket-exposed",
              why="the last bucket holds the first layers' gradients, ready only when the backward ends")
    return [("no overlap", off), ("overlap", on)]


def part3_first_bucket(rep: Report, args: argparse.Namespace, link: Link) -> list[tuple[str, Timeline]]:
    """ResNet-50 with the first bucket capped (PyTorch's default first_bucket_bytes = 1 MiB)."""
    model, k = resnet50(batch=32), args.world_size
    cap, first = args.bucket_cap_bytes, args.first_bucket_cap_bytes
    rep.note(f"later buckets capped at {cap_text(cap)} (as in Part 1); a bucket is sealed once it reaches its cap, "
             "so it can end up to one tensor above it")
    compute = notes_resnet_compute()
    plain = simulate_ddp(model, k, link, cap, compute=compute)
    small = simulate_ddp(model, k, link, cap, first_cap_bytes=first, compute=compute)
    raw = [simulate_ddp(model, k, link, cap, first_cap_bytes=f) for f in (None, first)]  # uncalibrated
    rows = [[label, len(t.buckets), f"{t.bucket_bytes[0] / MB:.3f}", ms(t.bucket_ready_s[0]),
             ms(t.first_comm_start_s), ms(t.exposed_comm_s), ms(t.step_s), ms(u.step_s)]
            for label, t, u in (("one cap for all", plain, raw[0]), (f"first cap {cap_text(first)}", small, raw[1]))]
    rep.table(["buckets", "count", "bucket 0 (MB)", "bucket 0 ready (ms)", "first comm (ms)", "exposed (ms)",
               "step (ms)", "step, uncal. (ms)"], rows, name="first_bucket")
    first_names = [model.params[i].name for i in small.buckets[0]]
    rep.line(f"  bucket 0 with the first cap: {', '.join(first_names[:4])}{', …' if len(first_names) > 4 else ''} "
             f"({fmt_bytes(small.bucket_bytes[0], binary=True)})")
    for text in ascii_timeline(small):
        rep.line("    " + text)
    last = model.params[plain.buckets[0][-1]].name
    setting = LINK + ("bucket_cap_bytes", "first_bucket_cap_bytes")
    share = 1.88e-3 / compute.backward_s(model)
    rep.claim("first comm starts, no first-bucket cap", plain.first_comm_start_s * 1e3, 1.88, "ms", ASSUMPTION,
              places=2, setting=setting[:4], ref="L15-3.2-first-comm-start",
              why=f"bucket 0 is ready when its last gradient ({last}) is, {ms(plain.bucket_ready_s[0])} ms into "
                  f"the calibrated backward (uncalibrated {ms(raw[0].first_comm_start_s)} ms); 1.88 ms would need "
                  f"{100 * share:.2f} % of the backward before it, ours is "
                  f"{100 * plain.bucket_ready_s[0] / compute.backward_s(model):.2f} %: the notes' per-layer "
                  "compute split is not ours, and they do not state it")
    rep.claim("first comm starts, first bucket capped", small.first_comm_start_s * 1e3, 0.02, "ms", ASSUMPTION,
              places=2, setting=setting, ref="L15-3.2-first-comm-capped",
              why=f"the 1 MiB bucket holds only the fc layer's gradients, ready after {ms(small.bucket_ready_s[0])} ms")
    rep.claim("step, no first-bucket cap", plain.step_s * 1e3, 37.75, "ms", ASSUMPTION, places=2,
              setting=setting[:4], ref="L15-3.2-step-no-first-cap",
              why=f"the calibration target: agrees by construction (uncalibrated {ms(raw[0].step_s)} ms)")
    rep.claim("step, first bucket capped", small.step_s * 1e3, 35.04, "ms", ASSUMPTION, places=2,
              setting=setting, ref="L15-3.2-step-first-cap",
              why=f"a check of the calibration fitted on {NOTES_RESNET_STEP_S * 1e3:g} ms (uncalibrated {ms(raw[1].step_s)} ms)")
    return [("one cap for all", plain), ("small first cap", small)]


def part4_bucket_order(rep: Report, args: argparse.Namespace, link: Link) -> list[tuple[str, Timeline]]:
    """BERT-large registered in the right, a shuffled and the reversed order, with PyTorch 1.5's buckets
    (fixed at construction in reverse registration order, never rebuilt)."""
    bert, compute, flops_backward = bert_compute()
    k, cap, n = args.world_size, args.bucket_cap_bytes, len(bert.params)
    rep.note(f"compute: {bert.description}, every weight matrix 2 · tokens · size FLOPs plus attention scores, "
             f"backward = 2 × forward at {ComputeModel().flops_per_s / 1e12:g} TFLOP/s = {ms(flops_backward)} ms. "
             f"The notes do not state theirs: it is calibrated openly, × {compute.calibration:.4f} (backward "
             f"{ms(compute.backward_s(bert))} ms; perhaps the softmax, GELU, LayerNorm a matmul count omits), so "
             f"that the reversed order gives their {NOTES_BERT_REVERSED_STEP_S * 1e3:g} ms at their setting (K 16, "
             "α 10 µs, β 10 GB/s, 25 MB). Last column: the step without that calibration. Buckets as PyTorch 1.5 "
             "made them: at construction, in reverse registration order, never rebuilt.")
    seeds = range(args.seed, args.seed + (2 if args.quick else SHUFFLE_SEEDS))
    orders = [("correct", "correct", 0)] + [(f"shuffled, seed {s}", "shuffled", s) for s in seeds]
    orders.append(("reversed", "reversed", 0))
    rows, kept = [], {}
    for label, kind, seed in orders:
        registration = registration_order(n, kind, seed)
        tl = simulate_ddp(bert, k, link, cap, registration=registration, compute=compute)
        raw = simulate_ddp(bert, k, link, cap, registration=registration)
        mib = simulate_ddp(bert, k, link, EXPLICIT_25_MIB, registration=registration, compute=compute)
        kept[label] = tl
        rows.append([label, len(tl.buckets), ms(tl.bucket_ready_s[0]), ms(tl.first_comm_start_s), ms(tl.step_s),
                     ms(mib.step_s), ms(raw.step_s)])
    rep.table(["registration order", "buckets", "bucket 0 ready (ms)", "first comm (ms)", "step (ms)",
               "step, bucket_cap_mb=25", "step, uncalibrated"], rows, name="order")
    for label in ("correct", "reversed"):
        rep.line(f"  {label}: step {ms(kept[label].step_s)} ms")
        for text in ascii_timeline(kept[label]):
            rep.line("    " + text)
    setting = LINK + ("bucket_cap_bytes",)
    rep.claim("step, correct order", kept["correct"].step_s * 1e3, 270.3, "ms", ASSUMPTION, places=1,
              setting=setting, ref="L15-3.2-order-correct",
              why=f"a check of the calibration fitted on the reversed order (uncalibrated {rows[0][-1]} ms)")
    shuffled = kept[f"shuffled, seed {args.seed}"]
    spread = [float(r[4]) for r in rows if r[0].startswith("shuffled")]
    rep.claim(f"step, shuffled (seed {args.seed})", shuffled.step_s * 1e3, 425.7, "ms", ASSUMPTION, places=1,
              setting=setting + ("seed",), ref="L15-3.2-order-shuffled",
              why=f"the notes' permutation is unknown; the {len(spread)} shuffles here give {min(spread):.1f}–"
                  f"{max(spread):.1f} ms, and any shuffle lands between the correct and the reversed order")
    rep.claim("step, reversed order", kept["reversed"].step_s * 1e3, 444.7, "ms", ASSUMPTION, places=1,
              setting=setting, ref="L15-3.2-order-reversed",
              why=f"the calibration target: agrees by construction (uncalibrated {rows[-1][-1]} ms)")
    # Today's DDP (find_unused_parameters=False, the default): iteration 1 in one bucket, then buckets
    # rebuilt in the order gradients became ready, whatever the registration order was.
    ready = gradient_ready_times(bert, compute)
    ready_order = sorted(range(n), key=lambda i: (ready[i], -i))
    rebuilt = simulate_ddp(bert, k, link, cap, compute=compute,
                           buckets=assign_buckets_in_order(bert.param_bytes(), ready_order, cap))
    rep.line(f"  today's DDP, buckets rebuilt in the gradients' ready order, any registration order: step "
             f"{ms(rebuilt.step_s)} ms, {len(rebuilt.buckets)} buckets")
    rep.note("when the rebuild happens (torch 2.13, checked in 02_buckets.py Part 1): with the default "
             "find_unused_parameters=False iteration 1 runs as one bucket and the buckets are rebuilt before "
             "iteration 2; with static_graph=True iterations 1 and 2 run as one bucket, rebuilt from iteration 3; "
             "with find_unused_parameters=True never: the constructor's buckets stay, and a wrong registration "
             "order costs what the table shows, as in PyTorch 1.5.")
    return [(label, kept[label]) for label in ("correct", f"shuffled, seed {args.seed}", "reversed")]


def save_gantt(rep: Report, args: argparse.Namespace, link: Link, timelines: list[tuple[str, Timeline]],
               name: str, what: str) -> None:
    if rep.figure_dir():
        first = f", first bucket {cap_text(args.first_bucket_cap_bytes)}" if name == "first_bucket" else ""
        title = (f"{what}: K = {args.world_size}, α = {link.alpha_s * 1e6:g} µs, β = {link.beta_Bps / 1e9:g} GB/s, "
                 f"cap {cap_text(args.bucket_cap_bytes)}{first}")
        rep.save_figure(ddp_gantt(timelines, title), name)


def main() -> None:
    parser = make_parser(__doc__, world_size=16, alpha_us=10.0, beta_gbs=10.0, bucket_cap_mb="25MB",
                         first_bucket_cap_mb=1.0, seed=0, figs=True,
                         context={"bucket_cap_mb": "Parts 1, 3, 4; default: the notes' 25 MB",
                                  "first_bucket_cap_mb": "Part 3", "seed": "Part 4's first shuffle"})
    parser.add_argument("--slow-alpha-us", type=nonnegative_float, default=SLOW_ALPHA_US,
                        help="Part 2's slow link α in µs")
    parser.add_argument("--slow-beta-gbs", type=positive_float, default=SLOW_BETA_GBS,
                        help="Part 2's slow link β in GB/s")
    args = parser.parse_args()
    link = link_from_args(args, "fast")
    rep = Report(__file__, "overlapping backward with bucketed all-reduce (model)", args)
    rep.part(1, "timeline without and with overlap (ResNet-50, batch 32)")
    figs = part1_timeline(rep, args, link)              # §3.1: 53.3 -> 37.8 ms
    save_gantt(rep, args, link, figs, "timeline", "ResNet-50 (batch 32), no overlap vs overlap")
    rep.part(2, "bucket cap sweep")
    part2_bucket_cap(rep, args, link)                   # §3.2: too small and too big both lose
    rep.part(3, "a small first bucket")
    figs = part3_first_bucket(rep, args, link)          # §3.2: first comm 1.88 -> 0.02 ms
    save_gantt(rep, args, link, figs, "first_bucket", "ResNet-50 (batch 32)")
    rep.part(4, "bucket order (BERT-large)")
    figs = part4_bucket_order(rep, args, link)          # §3.2: 270.3 / 425.7 / 444.7 ms
    save_gantt(rep, args, link, figs, "bucket_order", "BERT-large, registration order (PyTorch 1.5 buckets)")
    rep.finish()


if __name__ == "__main__":
    run_main(main)
