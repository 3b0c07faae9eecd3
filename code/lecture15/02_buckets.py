"""Lecture 15 §2 (梯度分桶): DDP's gradient buckets, recorded from real DDP and predicted by ddp_sim.

    python code/lecture15/02_buckets.py                       # start here for lecture 15
    python code/lecture15/02_buckets.py --bucket-cap-mb 1     # one Linear layer per bucket

Part 1 runs real DDP (gloo, CPU) on 6 x Linear(512, 512) with a comm hook that records every
bucket DDP all-reduces, and compares them with ddp_sim's rule. Part 2 counts the buckets of
ResNet-50 and BERT-large (shapes only, nothing downloaded) with ddp_sim and with PyTorch's own
function. Part 3 times a real all-reduce of the same floats as one tensor or as many small ones.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import statistics

import torch
import torch.distributed as dist

from common.budget import Cost, Term
from common.cli import UsageError, make_parser, positive_int, run_main
from common.launcher import launch, preload_for_ddp
from common.output import ASSUMPTION, EXACT, MEASURED, Report, bar, fmt_bytes, fmt_time, new_figure
from lecture15.bucket_ranks import (  # noqa: F401  (tests use linear_stack and bucket_worker from here)
    LAYERS,
    PIECE_ELEMENTS,
    REBUILD_FLAGS,
    WIDTH,
    allreduce_worker,
    bucket_worker,
    linear_stack,
)
from lecture15.ddp_sim import (
    DEFAULT_FIRST_BUCKET_BYTES,
    MB,
    MiB,
    assign_buckets,
    assign_buckets_in_order,
    bert_large,
    bucket_sizes,
    resnet50,
)

ITERATIONS = 3                # iteration 1 uses one bucket; DDP rebuilds before iteration 2
TINY_BYTES = 16 * 1024        # Part 2: a "tiny" tensor has under 16 KiB (fewer than 4096 fp32 values)


# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up and Part 1's DDP on W ranks; Part 3
# all-reduces --elements floats on 2 ranks, cut into ever more pieces (each piece costs a message).
# Memory: Part 3's floats (4 B) a few times over on each of its 2 ranks and in the parent.
COST = Cost([Term("1", 8.1, lambda a: 1), Term("W²", 0.024, lambda a: a.world_size**2),
             Term("elements/10⁶", 2.1, lambda a: a.elements / 1e6)],
            memory=lambda a: 4 * a.elements * 12)


def describe(names: list[str], total: int) -> str:
    """Tensor names in bucket order, layers grouped ("5.bias 5.weight" -> "5.{bias,weight}") so a
    bucket of many layers still fits a line."""
    if len(names) == total:
        return f"all {total} tensors"
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        layer, _, leaf = name.rpartition(".")
        if groups and groups[-1][0] == layer:
            groups[-1][1].append(leaf)
        else:
            groups.append((layer, [leaf]))
    runs: list[tuple[str, str, list[str]]] = []  # consecutive layers with the same leaves: 4…0
    for layer, leaves in groups:
        last = runs[-1] if runs else None
        if (last and last[2] == leaves and layer.isdigit() and last[1].isdigit()
                and abs(int(layer) - int(last[1])) == 1):
            runs[-1] = (last[0], layer, leaves)
        else:
            runs.append((layer, layer, leaves))
    return " ".join((first if first == last else f"{first}…{last}")
                    + (f".{leaves[0]}" if len(leaves) == 1 else f".{{{','.join(leaves)}}}")
                    for first, last, leaves in runs)


def part1_real_buckets(rep: Report, args) -> None:
    caps = [args.bucket_cap_bytes / MiB, None]  # as DDP takes it: bucket_cap_mb in MiB
    runs = launch(bucket_worker, args.world_size, caps, ITERATIONS, timeout_s=args.timeout_s)
    model = linear_stack()
    names = [n for n, _ in model.named_parameters()]
    param_bytes = [p.numel() * p.element_size() for p in model.parameters()]
    all_match = True
    for run in runs[0][:len(caps)]:
        cap = run["cap"]
        cap_bytes = round((25 if cap is None else cap) * MiB)
        first_cap = DEFAULT_FIRST_BUCKET_BYTES if cap is None else cap_bytes  # explicit cap: first = cap
        by_rule = assign_buckets(param_bytes, cap_bytes, first_cap)
        by_ready = assign_buckets_in_order(param_bytes, [names.index(n) for n in run["ready"]], cap_bytes, first_cap)
        label = "bucket_cap_mb=None (PyTorch's default)" if cap is None else f"bucket_cap_mb={cap:g}"
        rep.line(f"\n{label}: cap {cap_bytes:,} B, first bucket {first_cap:,} B")
        rows = []
        for it, index, nbytes, bucket_names in run["log"]:
            if it > 2:
                continue  # iteration 3 repeats iteration 2 (checked below)
            got = [names.index(n) for n in bucket_names]
            if it == 1:  # one bucket holding everything, compared as a set
                match, match_ready = index == 0 and sorted(got) == list(range(len(names))), "-"
            else:        # the rebuilt buckets, compared in order, parameter by parameter
                match = index < len(by_rule) and got == by_rule[index]
                match_ready = index < len(by_ready) and got == by_ready[index]
            all_match &= match and match_ready is not False
            rows.append([it, index, nbytes, describe(bucket_names, len(names)), match, match_ready])
        rep.table(["iter", "bucket", "bytes", "parameters (in bucket order)", "= ddp_sim rule", "= ready order"],
                  rows, name=f"buckets_cap_{cap}")
        later = [(i, b, n) for it, i, b, n in run["log"] if it == 3]
        second = [(i, b, n) for it, i, b, n in run["log"] if it == 2]
        every_rank = all(r[caps.index(cap)]["log"] == run["log"] for r in runs)  # cap: unique per plain run
        # The claim below covers all of it: one bucket in iteration 1, as many as predicted in 2, and
        # iteration 3 and every other rank the same as iteration 2 here.
        all_match &= (sum(1 for r in run["log"] if r[0] == 1) == 1 and len(second) == len(by_rule)
                      and later == second and every_rank)
        rep.record(f"cap_{cap}", {"by_rule_bytes": bucket_sizes(param_bytes, by_rule),
                                  "recorded": run["log"], "iteration3_same": later == second})
        rep.line(f"  predicted bytes (ddp_sim): {bucket_sizes(param_bytes, by_rule)}; "
                 f"iteration 3 same as 2: {later == second}; same on every rank: {every_rank}")
    first_iteration = {sum(1 for r in run["log"] if r[0] == 1) for run in runs[0][:len(caps)]}
    rep.claim("buckets in iteration 1 (find_unused_parameters=False)", max(first_iteration), 1, kind=MEASURED,
              setting=(), ref="L15-2.2-first-iteration-one-bucket",
              why="DDP disables bucketing until it has seen the gradients' real order (find_unused=False)")
    rep.claim("recorded buckets (iteration >= 2) equal ddp_sim's prediction", all_match, True, kind=EXACT,
              setting=(), ref="L15-2.2-rule", why="reverse registration order, sealed once >= the cap, for "
              "each cap above, on every rank, iteration 3 as iteration 2")
    first = next(r for r in runs[0][0]["log"] if r[0] == 2)
    rep.claim("bucket 0 starts with the last layer's bias and weight", " ".join(first[3][:2]),
              f"{LAYERS - 1}.bias {LAYERS - 1}.weight", kind=MEASURED, setting=(), ref="L15-2.2-bucket0-last-layer",
              why="the last layer's gradients are ready first in the backward")
    # When the rebuild happens depends on the constructor's flags (torch 2.13's distributed.py and reducer).
    counts = {}
    for run in runs[0][len(caps):]:
        key = ", ".join(f"{k}=True" for k in run["flags"])
        counts[key] = [[[names.index(n) for n in bucket] for _, _, _, bucket in sorted(r for r in run["log"]
                                                                                   if r[0] == it)]
                       for it in range(1, 5)]
    rows = [[key, " ".join(str(len(b)) for b in per_it)] for key, per_it in counts.items()]
    rep.table(["bucket_cap_mb=None and", "buckets in iterations 1 2 3 4"], rows, name="rebuild")
    unused, static = counts["find_unused_parameters=True"], counts["static_graph=True"]
    # with find_unused the constructor fills buckets in registration order, then reverses the list
    constructor = assign_buckets_in_order(param_bytes, list(range(len(names))), 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES)
    never = all(per_it == constructor[::-1] for per_it in unused)
    rep.claim("find_unused_parameters=True: the constructor's buckets, never rebuilt", never, True, kind=MEASURED,
              setting=(), ref="L15-2.2-rebuild-conditions",
              why=f"iterations 1–4: {rows[0][1]} buckets, each the constructor's (registration order, limits "
                  "[1 MiB, 25 MiB], list reversed)")
    rebuilt_later = len(static[0]) == len(static[1]) == 1 and static[2] == static[3] and len(static[2]) > 1
    rep.claim("static_graph=True: one bucket in iterations 1 and 2, rebuilt from iteration 3", rebuilt_later, True,
              kind=MEASURED, setting=(), ref="L15-2.2-rebuild-conditions",
              why=f"buckets per iteration: {rows[1][1]}")
    rep.note(f"Model: {LAYERS} x Linear({WIDTH}, {WIDTH}), one layer = {param_bytes[0] + param_bytes[1]:,} B; "
             f"{args.world_size} ranks, {ITERATIONS} iterations.\n"
             "bucket_cap_mb is in MiB (x 1,048,576). Left at None, the cap is 25 MiB and the first bucket\n"
             "1 MiB; any explicit value (even 25) also sets the first bucket's cap to the same value.\n"
             "Iteration 1 is one bucket (find_unused_parameters=False, the default); before iteration 2 DDP\n"
             "rebuilds the buckets in the order the gradients became ready ('= ready order'), which here is the reverse\n"
             "registration order ddp_sim assumes ('= ddp_sim rule'). Iteration 1's bucket is compared as a set,\n"
             "the rebuilt ones parameter by parameter in order.")


def torch_buckets(param_bytes: list[int], cap_bytes: int, first_cap: int) -> list[list[int]]:
    """PyTorch's own bucketing on meta tensors, visiting the parameters in reverse (as the rebuild
    does when gradients arrive in reverse order): an independent check of ddp_sim."""
    order = list(range(len(param_bytes) - 1, -1, -1))
    # Tensors go in visiting order; tensor_indices only labels them with their registration index.
    tensors = [torch.empty(param_bytes[i] // 4, device="meta") for i in order]
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, [first_cap, cap_bytes], [False] * len(order), order)
    return [list(b) for b in indices]


def part2_model_buckets(rep: Report, args) -> None:
    readings = [("25 MB", "25 MB = 25e6 B, first bucket the same (notes' reading)", 25 * MB, 25 * MB),
                ("default", "bucket_cap_mb=None: 25 MiB, first bucket 1 MiB (PyTorch default)", 25 * MiB,
                 DEFAULT_FIRST_BUCKET_BYTES),
                ("25 MiB", "bucket_cap_mb=25: 25 MiB, first bucket 25 MiB", 25 * MiB, 25 * MiB)]
    rows, torch_agrees = [], True
    for spec in (resnet50(), bert_large()):
        pb = spec.param_bytes()
        tiny = [b for b in pb if b < TINY_BYTES]
        row = [spec.name, len(pb), spec.numel, len(tiny), f"{100 * sum(tiny) / sum(pb):.2f}%"]
        for _, _, cap, first in readings:
            ours = assign_buckets(pb, cap, first)
            torch_agrees &= ours == torch_buckets(pb, cap, first)
            row.append(len(ours))
        rows.append(row)
    rep.table(["model", "tensors", "parameters", "tiny (< 16 KiB)", "share of bytes in tiny"] + [r[0] for r in readings],
              rows, name="models")
    for label, text, _, _ in readings:
        rep.line(f"  {label:>7}: {text}")
    for name, i, notes in (("ResNet-50", 0, 161), ("BERT-large", 1, 391)):
        rep.claim(f"{name} parameter tensors", rows[i][1], notes, kind=EXACT, setting=(),
                  ref=f"L15-2.2-{name.lower()}-tensors", why="counted from the shape list (torchvision / "
                  "Hugging Face layout)")
    rep.claim("a model has hundreds of parameter tensors (handbook)", all(r[1] >= 100 for r in rows), True,
              kind=EXACT, setting=(), ref="HB-hundreds-of-tensors",
              why="'hundreds' read as >= 100: " + ", ".join(f"{r[0]} {r[1]}" for r in rows))
    for name, i, notes in (("ResNet-50", 0, 4), ("BERT-large", 1, 48)):
        ref = f"L15-2.2-{name.lower()}-buckets"
        rep.claim(f"{name} buckets at 25 MB = 25e6 B", rows[i][5], notes, kind=ASSUMPTION, setting=(), ref=ref,
                  why="the notes' '25 MB' read as 25e6 B for every bucket, the first too")
        rep.claim(f"{name} buckets, bucket_cap_mb=None (25 MiB, first 1 MiB)", rows[i][6], notes,
                  kind=ASSUMPTION, setting=(), ref=ref,
                  why=f"PyTorch's real default: 25 MiB (26,214,400 B) with a 1 MiB first bucket gives {rows[i][6]}; "
                      f"an explicit bucket_cap_mb=25 gives {rows[i][7]}; the notes' count is the 25e6 B reading")
    rep.claim("ddp_sim's buckets equal torch's _compute_bucket_assignment_by_size (all readings)",
              torch_agrees, True, kind=EXACT, setting=(), ref="L15-2.2-rule",
              why="the rule against torch's own function, parameter by parameter, for every reading")
    rep.note("Tiny = under 16 KiB: biases, BatchNorm and LayerNorm vectors. Most tensors are tiny but hold a\n"
             "sliver of the bytes: one all-reduce each would pay the per-message cost hundreds of times.\n"
             "Buckets are filled in reverse registration order; torch's function is called on meta tensors.")


def sweep_counts(max_pieces: int) -> list[int]:
    """1, 8, 64, … up to max_pieces: factors of 8 keep the trend and the run short (the many-tensor
    rows cost seconds each, which is the point)."""
    counts, n = [], 1
    while n < max_pieces:
        counts.append(n)
        n *= 8
    return counts + [max_pieces]


def part3_small_tensors(rep: Report, args) -> None:
    elements = args.elements
    counts = sweep_counts(elements // PIECE_ELEMENTS)
    results = launch(allreduce_worker, 2, elements, counts, timeout_s=args.timeout_s)
    times = [{n: statistics.median(r[n]) for n in counts} for r in results]
    t = {n: max(r[n] for r in times) for n in counts}  # the slower rank finishes the collective
    rows = [[n, fmt_bytes(4 * elements / n), fmt_time(t[n]), t[n] / t[1], bar(t[n], max(t.values()), 30)]
            for n in counts]
    rep.table(["tensors", "each", "total time", "x one tensor", ""], rows, name="sweep")
    many = counts[-1]
    per_message = (t[many] - t[1]) / (many - 1)  # what each extra tensor adds, whatever its size
    at = ("elements", "quick")   # the notes' 4,194,304 floats; --quick all-reduces fewer
    spread = {n: f"{min(min(r[n]) for r in results) * 1e3:.1f}–{max(max(r[n]) for r in results) * 1e3:.1f} ms "
                 f"({len(results[0][n])} repeats × 2 ranks)" for n in counts}
    rep.line(f"  range: one tensor {spread[1]}; {many} tensors {spread[many]}")
    rep.claim(f"all-reduce of {many} tensors of {elements // many:,} float32 takes more than 300 ms",
              t[many] > 0.3, True, kind=MEASURED, setting=at, ref="L15-2.1-many-small-slow",
              why=f"{t[many] * 1e3:.0f} ms here (the notes: 'over 300 ms' on their machine)")
    rep.claim(f"all-reduce of {elements:,} float32 as one tensor takes under 3 ms", t[1] < 3e-3, True,
              kind=MEASURED, setting=at, ref="L15-2.1-one-tensor-fast",
              why=f"{t[1] * 1e3:.1f} ms here: gloo over TCP loopback on shared cores (the notes: under 3 ms)")
    rep.claim(f"{many} small tensors more than 100x slower than one", t[many] / t[1] > 100, True,
              kind=MEASURED, setting=at, ref="L15-2.1-ratio-100",
              why=f"{t[many] / t[1]:.0f}x here; the ratio grows with the number of tensors")
    rep.note(f"2 gloo ranks (always, like the paper's figure), {elements:,} float32 ({fmt_bytes(4 * elements)}), cut into n equal tensors (smallest "
             f"{elements // many:,} elements), one blocking all-reduce each; the slower rank's time, median of up\n"
             f"to 5 repeats for small n. Each extra tensor adds about {fmt_time(per_message)} here whatever its size:\n"
             "a fixed cost per message, the shape of the paper's figure 2. Buckets pay it once per bucket.")
    if rep.figure_dir() is None:
        return  # matplotlib only when a figure was asked for
    from matplotlib.ticker import FuncFormatter

    fig, ax = new_figure(figsize=(5, 3.5))
    ax.loglog(counts, [t[n] * 1e3 for n in counts], "o-", label="median (slower rank)")
    ax.fill_between(counts, [min(min(r[n]) for r in results) * 1e3 for n in counts],
                    [max(max(r[n]) for r in results) * 1e3 for n in counts], alpha=0.25, label="range")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("number of tensors (same total floats)")
    ax.set_ylabel("all-reduce time (ms)")
    ax.set_title(f"gloo on this CPU, 2 ranks, {elements:,} float32 ({fmt_bytes(4 * elements)}) in total", fontsize=9)
    ax.legend(fontsize=8)
    rep.save_figure(fig, "small_tensors")


def main() -> None:
    parser = make_parser(__doc__, world_size=2, bucket_cap_mb=2.0, real=True, figs=True, cost=COST,
                         quick={"elements": 256 * 1024},  # --quick all-reduces fewer floats in Part 3
                         context={"bucket_cap_mb": "Part 1; the default gives 3 buckets"})
    parser.add_argument("--elements", type=positive_int, default=4 * 1024 * 1024,
                        help="Part 3's float32 count (default: 4,194,304 = 4096 x 1024)")
    args = parser.parse_args()
    if args.elements < PIECE_ELEMENTS:
        raise UsageError(f"--elements {args.elements} must be at least {PIECE_ELEMENTS} (one piece)")
    preload_for_ddp(args.world_size)  # DDP() imports torch._dynamo: see there
    rep = Report(__file__, "DDP's gradient buckets", args)
    rep.part(1, "buckets recorded from real DDP")  # a comm hook logs every bucket; ddp_sim predicts them
    part1_real_buckets(rep, args)
    rep.part(2, "ResNet-50 and BERT-large")  # tensor counts, tiny tensors, buckets at 25 MB vs MiB
    part2_model_buckets(rep, args)
    rep.part(3, "why buckets: small all-reduces are slow")  # the same floats as 1 or thousands of tensors
    part3_small_tensors(rep, args)
    rep.finish()


if __name__ == "__main__":
    run_main(main)
