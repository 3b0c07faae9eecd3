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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import time

from common.cli import link_from_args, make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.flags import nonnegative_float, positive_float
from common.output import Report
from common.script_end import run_main
from common.units import MB, MiB, fmt_bytes, fmt_ms
from lecture15.ddp_sim import (
    ComputeModel,
    Timeline,
    ascii_timeline,
    assign_buckets_in_order,
    gantt_figure,
    gradient_ready_times,
    registration_order,
    simulate_ddp,
)
from lecture15.figures import sweep_figure
from lecture15.models import ModelSpec, bert_large, resnet50
from lecture15.notes_calibration import (
    BERT_TARGET,
    RESNET_TARGET,
    calibration_target_s,
    notes_bert_compute,
    notes_resnet_compute,
)

RING_ALLREDUCE = algorithm("ring all-reduce")

# The notes' "25 MB" cap is 25 × 10^6 B (it gives their bucket counts; PyTorch's 25 MiB does not).
EXPLICIT_25_MIB = 25 * MiB  # bucket_cap_mb=25 written out: every bucket, the first too, capped at 25 MiB
SHUFFLE_SEEDS = 5     # Part 4: how many shuffled registrations to show
# Part 2's slow link: 10 Gb/s Ethernet through TCP (gloo-like): 1.25 GB/s, 50 µs per message.
SLOW_ALPHA_US, SLOW_BETA_GBS = 50.0, 1.25
SLOW = ("slow_alpha_us", "slow_beta_gbs")
# Part 2's caps in MiB, as bucket_cap_mb; 0 = one bucket per gradient. A single bucket is added last.
SWEEP_CAPS_MIB = [0, 0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 200, 500]
QUICK_CAPS_MIB = [0, 1, 5, 25, 50, 100]


READING_LABEL = {"--bucket-cap-mb": "flag", "bucket_cap_mb=None (default)": "None", "bucket_cap_mb=25": "=25"}


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


def bert_compute() -> tuple[ModelSpec, ComputeModel, float]:
    """BERT-large (batch 4 × 512 tokens), its compute calibrated to the notes' reversed-order step."""
    bert = bert_large()
    return bert, notes_bert_compute(), ComputeModel().backward_s(bert)


def cap_text(nbytes: int) -> str:
    """A cap as a reader would write it: 25 MB when it is a whole number of 10^6 B, else MiB."""
    return f"{nbytes / MB:g} MB" if nbytes % MB == 0 else f"{nbytes / MiB:g} MiB"


def part1_timeline(rep: Report, args: argparse.Namespace, link: Link) -> list[tuple[str, Timeline]]:
    """ResNet-50, one step without and with overlap; the cap as given, and PyTorch's two readings."""
    model, k = resnet50(batch=32), args.world_size
    flops, compute = ComputeModel(), notes_resnet_compute()
    gmac = model.forward_flops / 2 / 32 / 1e9
    rep.note("compute: backward of a layer = 2 × its forward FLOPs (conv at its output resolution, "
             f"{model.description}: {gmac:.3f} GMAC per image), BatchNorm/bias ≈ 0; at "
             f"{flops.flops_per_s / 1e12:g} TFLOP/s the backward is {fmt_ms(flops.backward_s(model))} ms. "
             f"The notes do not state theirs: it is calibrated openly, × {compute.calibration:.4f} (backward "
             f"{fmt_ms(compute.backward_s(model))} ms, {gmac * compute.calibration:.3f} GMAC per image), so "
             f"that the model gives their Part 3 step of {calibration_target_s(RESNET_TARGET) * 1e3:g} ms at "
             "their setting (K 16, α 10 µs, β 10 GB/s, 25 MB). Every other figure is a check; 'uncalibrated' "
             "= the plain FLOP count.")
    rep.note(f"comm: ring all-reduce 2(K−1)(α + n/(Kβ)) per bucket, K = {k}, {link.describe()}; "
             "buckets in index order on one stream")
    readings = (("--bucket-cap-mb", args.bucket_cap_bytes, None),
                ("bucket_cap_mb=None (default)", EXPLICIT_25_MIB, MiB),
                ("bucket_cap_mb=25", EXPLICIT_25_MIB, None))
    rows, timelines = reading_rows(model, k, link, (compute, flops), readings)
    rep.table(["bucket cap", "buckets", "bucket sizes (MB)", "comm (ms)", "no overlap (ms)", "overlap (ms)",
               "faster by", "overlap, uncal. (ms)"], rows, name="steps")
    rep.note("(flag) = --bucket-cap-mb; (None) = DDP's default, bucket_cap_mb=None: 25 MiB with a 1 MiB "
             "first bucket; (=25) = an explicit bucket_cap_mb=25: 25 MiB, no separate first bucket")
    off, on, raw = timelines["--bucket-cap-mb"]
    print_charts(rep, off, on, args.bucket_cap_bytes)
    uncal = simulate_ddp(model, k, link, args.bucket_cap_bytes, overlap=False, compute=flops)
    rep.value("step_no_overlap_ms", off.step_s * 1e3)
    rep.value("step_overlap_ms", on.step_s * 1e3)
    rep.value("overlap_gain_pct", 100 * (off.step_s / on.step_s - 1))
    rep.value("backward_ms", compute.backward_s(model) * 1e3)
    rep.value("uncal_no_overlap_ms", uncal.step_s * 1e3)
    rep.value("uncal_overlap_ms", raw.step_s * 1e3)
    rep.value("uncal_gain_pct", 100 * (uncal.step_s / raw.step_s - 1))
    rep.value("last_bucket_exposed", on.exposed_comm_s >= on.comm_s[-1] - 1e-12)
    return [("no overlap", off), ("overlap", on)]


def reading_rows(model: ModelSpec, k: int, link: Link, computes: tuple[ComputeModel, ComputeModel],
                 readings: tuple[tuple[str, int, int | None], ...]
                 ) -> tuple[list[list], dict[str, tuple[Timeline, Timeline, Timeline]]]:
    """Part 1's table rows, one per reading of the cap: the step without and with overlap with the
    calibrated compute, and with overlap on the plain FLOP count (uncalibrated)."""
    compute, flops = computes
    rows, timelines = [], {}
    for reading, cap, first in readings:
        off = simulate_ddp(model, k, link, cap, first, overlap=False, compute=compute)
        on = simulate_ddp(model, k, link, cap, first, overlap=True, compute=compute)
        raw = simulate_ddp(model, k, link, cap, first, overlap=True, compute=flops)
        timelines[reading] = (off, on, raw)
        shown = [f"{b / MB:.0f}" for b in on.bucket_bytes[:4]]  # a bucket per gradient: 161 of them
        sizes = ", ".join(shown) + (", …" if len(on.bucket_bytes) > 4 else "")
        label = f"{cap_text(cap)}" + (" + 1 MiB first" if first else "")
        rows.append([f"{label} ({READING_LABEL[reading]})", len(on.buckets), sizes, fmt_ms(on.comm_total_s),
                     fmt_ms(off.step_s), fmt_ms(on.step_s), f"{100 * (off.step_s / on.step_s - 1):.0f} %",
                     fmt_ms(raw.step_s)])
    return rows, timelines


def print_charts(rep: Report, off: Timeline, on: Timeline, cap: int) -> None:
    """Part 1's two ASCII timelines, without and with overlap."""
    rep.line(f"\n  no overlap: step {fmt_ms(off.step_s)} ms (cap {cap_text(cap)}; "
             "each chart spans its own step)")
    for text in ascii_timeline(off):
        rep.line("    " + text)
    rep.line(f"  overlap (DDP): step {fmt_ms(on.step_s)} ms")
    for text in ascii_timeline(on):
        rep.line("    " + text)


def sweep(models: list[tuple[str, ModelSpec, ComputeModel]], links: list[Link], caps_mib: list[float],
          k: int) -> dict[tuple[str, str], list[Timeline]]:
    """Every (model, link) at every cap, then one single bucket (cap = the whole model)."""
    return {(name, link.name): [simulate_ddp(model, k, link, round(cap * MiB), compute=compute)
                                for cap in caps_mib + [model.nbytes / MiB]]
            for name, model, compute in models for link in links}


def part2_bucket_cap(rep: Report, args: argparse.Namespace, link: Link) -> None:
    """Step time against the bucket cap, ResNet-50 and BERT-large, fast and slow link."""
    bert, bert_cc, _ = bert_compute()
    models = [("ResNet-50", resnet50(batch=32), notes_resnet_compute()), ("BERT-large", bert, bert_cc)]
    fast = Link(link.alpha_s, link.beta_Bps, "fast")
    slow = Link(args.slow_alpha_us * 1e-6, args.slow_beta_gbs * 1e9, "slow")
    gloo_like = " (10 Gb/s Ethernet through TCP, gloo-like)" if rep.at_notes_setting(SLOW) else ""
    rep.note(f"fast = {fast.describe()}; slow = {slow.describe()}{gloo_like}; caps in MiB as bucket_cap_mb "
             f"(explicit: no separate first bucket); K = {args.world_size}; compute calibrated as in Part 1")
    caps = QUICK_CAPS_MIB if args.quick else SWEEP_CAPS_MIB
    started = time.perf_counter()
    results = sweep(models, [fast, slow], caps, args.world_size)
    took = time.perf_counter() - started
    columns = [(name, ln.name) for name, _, _ in models for ln in (fast, slow)]
    best = {col: min(range(len(caps) + 1), key=lambda i, c=col: results[c][i].step_s) for col in columns}
    no_overlap = {(name, ln.name): simulate_ddp(m, args.world_size, ln, 25 * MiB, overlap=False, compute=cc)
                  .step_s for name, m, cc in models for ln in (fast, slow)}
    rows = sweep_rows(caps, results, best, no_overlap, columns)
    rep.table(["cap (MiB)", "ResNet buckets", "BERT buckets"] + [f"{n} {ln} (ms)" for n, ln in columns],
              rows, name="sweep")
    rep.line(f"  ◀ = best cap; {len(results) * (len(caps) + 1)} simulations in {took * 1e3:.0f} ms")
    if args.world_size == 1:
        rep.note("K = 1: nothing to all-reduce, so every cap gives the same step; the 'best' cap below\n"
                 "is only the first of equals")
    rep.value("sweep_seconds", took, compared=False)
    specs = {name: m for name, m, _ in models}
    # "one bucket" ran with the whole model as its cap: that cap (MiB), not inf, is its value
    best_cap = {(n, ln): (caps + [specs[n].nbytes / MiB])[best[(n, ln)]] for n, ln in columns}
    cap0_costs(rep, args, results, no_overlap, columns, specs, {ln.name: ln for ln in (fast, slow)})
    if 25 in caps:
        overlap_gain_table(rep, args, results, no_overlap, columns, caps.index(25))
    record_best_caps(rep, caps, results, best_cap, columns)
    rep.note("why the model and the paper differ: α-β charges a bucket only α per message, while a real call "
             "also pays kernel launch and stream sync (so real small buckets cost more and the best cap "
             "moves up); and it lets bandwidth grow without limit, while gloo (the notes: paper's Fig. 2) "
             "saturates near 2 MB, so a bigger bucket there only delays the first all-reduce. No model "
             "replaces measuring.")
    if args.save_figs:
        rep.save_figure(sweep_figure(args, caps, results, no_overlap, columns), "bucket_cap_sweep")


def sweep_rows(caps: list[float], results: dict, best: dict, no_overlap: dict,
               columns: list[tuple[str, str]]) -> list[list[object]]:
    """Part 2's table: each cap's bucket counts and step per (model, link), the best marked ◀, then
    the step without overlap."""
    labels = [f"{c:g}" for c in caps] + ["one bucket"]
    rows: list[list[object]] = [
        [label, len(results[columns[0]][i].buckets), len(results[columns[2]][i].buckets)]
        + [fmt_ms(results[col][i].step_s) + (" ◀" if best[col] == i else "  ") for col in columns]
        for i, label in enumerate(labels)]
    rows.append(["no overlap, 25 MiB", "", ""] + [fmt_ms(no_overlap[col]) + "  " for col in columns])
    return rows


def cap0_costs(rep: Report, args: argparse.Namespace, results: dict, no_overlap: dict,
               columns: list[tuple[str, str]], specs: dict[str, ModelSpec], links: dict[str, Link]) -> None:
    """A bucket per gradient against no overlap at all, and one bucket = no overlap."""
    slower = {col: results[col][0].step_s > no_overlap[col] for col in columns}
    rep.line("  cap 0 slower than no overlap? " + ", ".join(f"{n} {ln}: {'yes' if slower[(n, ln)] else 'no'}"
                                                          for n, ln in columns))
    for n, ln in (col for col in columns if not slower[col]):
        tensors = len(specs[n].params)
        latency = tensors * RING_ALLREDUCE.time(args.world_size, 0, links[ln])   # 2(K−1)α per all-reduce
        rep.note(f"{n}, {ln} link: cap 0 still wins; the latency it adds ({tensors} × 2(K−1)α = "
                 f"{fmt_ms(latency)} ms) is less than what overlap hides")
    single = [results[c][-1] for c in columns]
    rep.value("cap0_slower_resnet_fast", slower[("ResNet-50", "fast")])
    rep.value("cap0_resnet_fast_ms", results[("ResNet-50", "fast")][0].step_s * 1e3)
    rep.value("no_overlap_resnet_fast_ms", no_overlap[("ResNet-50", "fast")] * 1e3)
    rep.value("one_bucket_is_no_overlap", all(abs(t.step_s - t.backward_s - t.comm_total_s) < 1e-12
                                            for t in single))


def overlap_gain_table(rep: Report, args: argparse.Namespace, results: dict, no_overlap: dict,
                       columns: list[tuple[str, str]], at25: int) -> None:
    """The model's gain from overlap at 25 MiB beside the paper's measured gains (the notes' rows)."""
    library = {"fast": "nccl", "slow": "gloo"}
    paper = {(model, link): f"L15-3.2-paper-gain-{model.split('-')[0].lower()}-{library[link]}"
             for model in ("ResNet-50", "BERT-large") for link in ("fast", "slow")}
    rep.table(["model", "link", "overlap gain at 25 MiB (model)", "notes: paper, 32 GPUs, measured"],
              [[n, f"{ln} ({'NCCL' if ln == 'fast' else 'gloo'})",
                f"{100 * (no_overlap[(n, ln)] / results[(n, ln)][at25].step_s - 1):.1f} %",
                rep.notes_text(paper[(n, ln)])] for n, ln in columns], name="overlap_gain")
    gain = {col: no_overlap[col] / results[col][at25].step_s for col in columns}
    same_trend = all(gain[(n, "slow")] < gain[(n, "fast")] for n in ("ResNet-50", "BERT-large"))
    rep.note(f"not a reproduction: no contention between the streams, no per-call overhead, K = "
             f"{args.world_size} and made-up links" + ("; as in the paper, the slow link gains less (its "
                                                       "communication dominates the step, so there is less "
                                                       "compute to hide it behind)" if same_trend else ""))


def record_best_caps(rep: Report, caps: list[float], results: dict, best_cap: dict[tuple[str, str], float],
                     columns: list[tuple[str, str]]) -> None:
    """The best cap of each model and link ('best' = the shortest modelled step on this grid, the
    first of equals), for the notes' and the handbook's statements about bucket sizes."""
    steps = [t.step_s for t in results[("ResNet-50", "fast")]]
    both_lose = all(results[col][0].step_s > min(t.step_s for t in results[col]) < results[col][-1].step_s
                    for col in columns)
    rep.value("best_cap_resnet_fast_mib", best_cap[("ResNet-50", "fast")])
    rep.value("best_cap_resnet_slow_mib", best_cap[("ResNet-50", "slow")])
    rep.value("best_cap_bert_fast_mib", best_cap[("BERT-large", "fast")])
    rep.value("best_cap_bert_slow_mib", best_cap[("BERT-large", "slow")])
    rep.value("best_cap_bert_fast_mb", best_cap[("BERT-large", "fast")] * MiB / MB)
    rep.value("best_cap_resnet_fast_mb", best_cap[("ResNet-50", "fast")] * MiB / MB)
    rep.value("resnet_fast_at_25_mib_ms", steps[caps.index(25)] * 1e3 if 25 in caps else float("nan"))
    rep.value("resnet_fast_best_ms", min(steps) * 1e3)
    rep.value("larger_prefers_bigger", best_cap[("BERT-large", "fast")] >= best_cap[("ResNet-50", "fast")]
                                      and best_cap[("BERT-large", "slow")] >= best_cap[("ResNet-50", "slow")]
                                      and all(best_cap[(n, "slow")] >= best_cap[(n, "fast")]
                                              for n in ("ResNet-50", "BERT-large")))
    rep.value("best_caps_text", ", ".join(f"{n} {ln} {best_cap[(n, ln)]:g}" for n, ln in columns))
    rep.value("both_lose", both_lose)
    rep.value("both_lose_text", "; ".join(f"{n} {ln} {fmt_ms(results[(n, ln)][0].step_s)} / "
                                        f"{fmt_ms(min(t.step_s for t in results[(n, ln)]))} / "
                                        f"{fmt_ms(results[(n, ln)][-1].step_s)} ms" for n, ln in columns))


def part3_first_bucket(rep: Report, args: argparse.Namespace, link: Link) -> list[tuple[str, Timeline]]:
    """ResNet-50 with the first bucket capped (PyTorch's default first_bucket_bytes = 1 MiB)."""
    model, k = resnet50(batch=32), args.world_size
    cap, first = args.bucket_cap_bytes, args.first_bucket_cap_bytes
    rep.note(f"later buckets capped at {cap_text(cap)} (as in Part 1); a bucket is sealed once it reaches "
             "its cap, so it can end up to one tensor above it")
    compute = notes_resnet_compute()
    plain = simulate_ddp(model, k, link, cap, compute=compute)
    small = simulate_ddp(model, k, link, cap, first_cap_bytes=first, compute=compute)
    raw = [simulate_ddp(model, k, link, cap, first_cap_bytes=f) for f in (None, first)]  # uncalibrated
    rows = [[label, len(t.buckets), f"{t.bucket_bytes[0] / MB:.3f}", fmt_ms(t.bucket_ready_s[0]),
             fmt_ms(t.first_comm_start_s), fmt_ms(t.exposed_comm_s), fmt_ms(t.step_s), fmt_ms(u.step_s)]
            for label, t, u in (("one cap for all", plain, raw[0]),
                                (f"first cap {cap_text(first)}", small, raw[1]))]
    rep.table(["buckets", "count", "bucket 0 (MB)", "bucket 0 ready (ms)", "first comm (ms)",
               "exposed comm (ms)", "step (ms)", "step, uncalibrated (ms)"], rows, name="first_bucket")
    first_names = [model.params[i].name for i in small.buckets[0]]
    more = ", …" if len(first_names) > 4 else ""
    rep.line(f"  bucket 0 with the first cap: {', '.join(first_names[:4])}{more} "
             f"({fmt_bytes(small.bucket_bytes[0], binary=True)})")
    for text in ascii_timeline(small):
        rep.line("    " + text)
    rep.value("first_comm_ms", plain.first_comm_start_s * 1e3)
    rep.value("first_comm_capped_ms", small.first_comm_start_s * 1e3)
    rep.value("step_one_cap_ms", plain.step_s * 1e3)
    rep.value("step_first_capped_ms", small.step_s * 1e3)
    rep.value("bucket0_last", model.params[plain.buckets[0][-1]].name)
    rep.value("bucket0_ready_pct", 100 * plain.bucket_ready_s[0] / compute.backward_s(model))
    rep.value("uncal_first_comm_ms", raw[0].first_comm_start_s * 1e3)
    rep.value("capped_bucket0_ready_ms", small.bucket_ready_s[0] * 1e3)
    rep.value("uncal_one_cap_ms", raw[0].step_s * 1e3)
    rep.value("uncal_first_capped_ms", raw[1].step_s * 1e3)
    return [("one cap for all", plain), ("small first cap", small)]


def part4_bucket_order(rep: Report, args: argparse.Namespace, link: Link) -> list[tuple[str, Timeline]]:
    """BERT-large registered in the right, a shuffled and the reversed order, with PyTorch 1.5's buckets
    (fixed at construction in reverse registration order, never rebuilt)."""
    bert, compute, flops_backward = bert_compute()
    k, cap = args.world_size, args.bucket_cap_bytes
    rep.note(f"compute: {bert.description}, every weight matrix 2 · tokens · size FLOPs plus attention "
             f"scores, backward = 2 × forward at {ComputeModel().flops_per_s / 1e12:g} TFLOP/s = "
             f"{fmt_ms(flops_backward)} ms. The notes do not state theirs: it is calibrated openly, × "
             f"{compute.calibration:.4f} (backward {fmt_ms(compute.backward_s(bert))} ms; perhaps the "
             "softmax, GELU, LayerNorm a matmul count omits), so that the reversed order gives their "
             f"{calibration_target_s(BERT_TARGET) * 1e3:g} ms at their setting (K 16, α 10 µs, β 10 GB/s, 25 "
             "MB). Last column: the step without that calibration. Buckets as PyTorch 1.5 made them: at "
             "construction, in reverse registration order, never rebuilt.")
    seeds = range(args.seed, args.seed + (2 if args.quick else SHUFFLE_SEEDS))
    orders = [("correct", "correct", 0)] + [(f"shuffled, seed {s}", "shuffled", s) for s in seeds]
    orders.append(("reversed", "reversed", 0))
    rows, kept = order_rows(bert, k, link, cap, compute, orders)
    rep.table(["registration order", "buckets", "bucket 0 ready (ms)", "first comm (ms)", "step (ms)",
               "step, bucket_cap_mb=25", "step, uncalibrated"], rows, name="order")
    for label in ("correct", "reversed"):
        rep.line(f"  {label}: step {fmt_ms(kept[label].step_s)} ms")
        for text in ascii_timeline(kept[label]):
            rep.line("    " + text)
    shuffled = [float(r[4]) for r in rows if r[0].startswith("shuffled")]
    rep.value("step_correct_ms", kept["correct"].step_s * 1e3)
    rep.value("step_shuffled_first_ms", shuffled[0])
    rep.value("step_reversed_ms", kept["reversed"].step_s * 1e3)
    rep.value("shuffles", len(shuffled))
    rep.value("shuffled_low_ms", min(shuffled))
    rep.value("shuffled_high_ms", max(shuffled))
    rep.value("uncal_correct_ms", float(rows[0][-1]))
    rep.value("uncal_reversed_ms", float(rows[-1][-1]))
    rebuilt = rebuilt_buckets_step(bert, k, link, cap, compute)
    rep.line(f"  today's DDP, buckets rebuilt in the gradients' ready order, any registration order: step "
             f"{fmt_ms(rebuilt.step_s)} ms, {len(rebuilt.buckets)} buckets")
    rep.note("when the rebuild happens (torch 2.13, checked in 02_buckets.py Part 1): with the default "
             "find_unused_parameters=False iteration 1 runs as one bucket and the buckets are rebuilt before "
             "iteration 2; with static_graph=True iterations 1 and 2 run as one bucket, rebuilt from "
             "iteration 3; with find_unused_parameters=True never: the constructor's buckets stay, and a "
             "wrong registration order costs what the table shows, as in PyTorch 1.5.")
    return [(label, kept[label]) for label in ("correct", f"shuffled, seed {args.seed}", "reversed")]


def order_rows(bert: ModelSpec, k: int, link: Link, cap: int, compute: ComputeModel,
               orders: list[tuple[str, str, int]]) -> tuple[list[list], dict[str, Timeline]]:
    """Part 4's rows, one per registration order (PyTorch 1.5's buckets), and each order's timeline."""
    rows, kept = [], {}
    for label, kind, seed in orders:
        registration = registration_order(len(bert.params), kind, seed)
        tl = simulate_ddp(bert, k, link, cap, registration=registration, compute=compute)
        raw = simulate_ddp(bert, k, link, cap, registration=registration)
        mib = simulate_ddp(bert, k, link, EXPLICIT_25_MIB, registration=registration, compute=compute)
        kept[label] = tl
        rows.append([label, len(tl.buckets), fmt_ms(tl.bucket_ready_s[0]), fmt_ms(tl.first_comm_start_s),
                     fmt_ms(tl.step_s), fmt_ms(mib.step_s), fmt_ms(raw.step_s)])
    return rows, kept


def rebuilt_buckets_step(bert: ModelSpec, k: int, link: Link, cap: int, compute: ComputeModel) -> Timeline:
    """Today's DDP (find_unused_parameters=False, the default): iteration 1 in one bucket, then buckets
    rebuilt in the order gradients became ready, whatever the registration order was."""
    ready = gradient_ready_times(bert, compute)
    ready_order = sorted(range(len(bert.params)), key=lambda i: (ready[i], -i))
    return simulate_ddp(bert, k, link, cap, compute=compute,
                        buckets=assign_buckets_in_order(bert.param_bytes(), ready_order, cap))


def save_gantt(rep: Report, args: argparse.Namespace, link: Link, timelines: list[tuple[str, Timeline]],
               name: str, what: str) -> None:
    if rep.figure_dir():
        first = f", first bucket {cap_text(args.first_bucket_cap_bytes)}" if name == "first_bucket" else ""
        title = (f"{what}: K = {args.world_size}, α = {link.alpha_s * 1e6:g} µs, "
                 f"β = {link.beta_Bps / 1e9:g} GB/s, cap {cap_text(args.bucket_cap_bytes)}{first}")
        rep.save_figure(gantt_figure(timelines, title), name)


if __name__ == "__main__":
    run_main(main)
