"""Lecture 15 §2 (梯度分桶): DDP's gradient buckets, recorded from real DDP and predicted by ddp_sim.

    python code/lecture15/02_buckets.py                       # start here for lecture 15
    python code/lecture15/02_buckets.py --bucket-cap-mb 1     # one Linear layer per bucket

Part 1 runs real DDP (gloo, CPU) on 6 x Linear(512, 512) with a comm hook that records every
bucket DDP all-reduces, and compares them with ddp_sim's rule. Part 2 counts the buckets of
ResNet-50 and BERT-large (shapes only, nothing downloaded) with ddp_sim and with PyTorch's own
function. Part 3 times a real all-reduce of the same floats as one tensor or as many small ones.
"""

# No `from __future__ import annotations`: DDP checks that recording_hook's annotation is dist.GradBucket.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common.cli import make_parser
from common.error_types import UsageError
from common.flags import positive_int
from common.launch import capture_stderr, launch, preload_for_ddp
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.text import bar
from common.units import MB, MiB, fmt_bytes, fmt_time
from lecture15.ddp_sim import DEFAULT_FIRST_BUCKET_BYTES, assign_buckets, assign_buckets_in_order
from lecture15.figures import small_tensors_figure
from lecture15.models import bert_large, resnet50

LAYERS, WIDTH = 6, 512        # Part 1's model: one Linear(512, 512) is 1,050,624 bytes of fp32 gradient
ITERATIONS = 3                # iteration 1 uses one bucket; DDP rebuilds before iteration 2
REBUILD_FLAGS = ({"find_unused_parameters": True}, {"static_graph": True})  # when is the rebuild?
TINY_BYTES = 16 * 1024        # Part 2: a "tiny" tensor has under 16 KiB (fewer than 4096 fp32 values)
PIECE_ELEMENTS = 1024         # Part 3: the smallest pieces the floats are cut into (notes: 1K elements)


# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up and Part 1's DDP on W ranks; Part 3
# all-reduces --elements floats on 2 ranks, cut into ever more pieces (each piece costs a message).
# Memory: Part 3's floats (4 B) a few times over on each of its 2 ranks and in the parent.
COST = Cost([Term("1", 8.1, lambda a: 1), Term("W²", 0.024, lambda a: a.world_size**2),
             Term("elements/10⁶", 2.1, lambda a: a.elements / 1e6)],
            memory=lambda a: 4 * a.elements * 12)


def main() -> None:
    parser = make_parser(__doc__, world_size=2, bucket_cap_mb=2.0, real=True, figs=True, cost=COST,
                         quick={"elements": 256 * 1024},  # --quick all-reduces fewer floats in Part 3
                         context={"bucket_cap_mb": "Part 1; the default gives 3 buckets"})
    parser.add_argument("--elements", type=positive_int, default=4 * 1024 * 1024,
                        help="Part 3's float32 count (default: 4,194,304 = 4096 x 1024)")
    args = parser.parse_args()
    if args.elements < 2 * PIECE_ELEMENTS:  # one tensor and at least two pieces: a cost per extra tensor
        raise UsageError(f"--elements {args.elements} must be at least {2 * PIECE_ELEMENTS} (two pieces)")
    preload_for_ddp(args.world_size)  # DDP() imports torch._dynamo: see there
    rep = Report(__file__, "DDP's gradient buckets", args)
    buckets, timings = launch_parts_1_and_3(args)
    rep.part(1, "buckets recorded from real DDP")  # a comm hook logs every bucket; ddp_sim predicts them
    part1_real_buckets(rep, args, buckets)
    rep.part(2, "ResNet-50 and BERT-large")  # tensor counts, tiny tensors, buckets at 25 MB vs MiB
    part2_model_buckets(rep, args)
    rep.part(3, "why buckets: small all-reduces are slow")  # the same floats as 1 or thousands of tensors
    part3_small_tensors(rep, args, timings)
    rep.finish()


# ---- Part 1: what real DDP puts in its buckets ---------------------------------------------------
def linear_stack() -> nn.Module:
    """Six Linear(512, 512) in a row: names 0.weight, 0.bias, ..., 5.bias, as in the notes."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def recording_hook(state: dict[str, Any], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Record the bucket, then do what DDP would: all-reduce and average. The parameter must be
    called `bucket`, and with a hook DDP leaves the division by the world size to us."""
    names = [state["names"][p.data_ptr()] for p in bucket.parameters()]
    buf = bucket.buffer()
    state["log"].append((state["iteration"], bucket.index(), buf.numel() * buf.element_size(), names))
    buf.div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])


def bucket_worker(rank: int, world_size: int, caps_mib: list[float | None], iterations: int) -> list[dict]:
    """For each bucket_cap_mb, train `iterations` steps and return the buckets DDP formed; then,
    at the default cap, the same for each of REBUILD_FLAGS over 4 iterations."""
    out = []
    runs = [(cap, {}, iterations) for cap in caps_mib] + [(None, flags, 4) for flags in REBUILD_FLAGS]
    for cap, flags, iterations in runs:
        model = linear_stack()
        names = {p.data_ptr(): n for n, p in model.named_parameters()}
        ready: list[str] = []  # the order gradients land in iteration 1: what the rebuild uses
        handles = [p.register_post_accumulate_grad_hook(lambda p, n=n, ready=ready: ready.append(n))
                   for n, p in model.named_parameters()]
        ddp = DDP(model, bucket_cap_mb=cap, **flags)
        state: dict[str, Any] = {"names": names, "log": [], "iteration": 0}
        ddp.register_comm_hook(state, recording_hook)
        x = torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(rank))
        with capture_stderr():   # find_unused_parameters=True warns that nothing was unused: expected here
            for it in range(1, iterations + 1):
                state["iteration"] = it
                ddp(x).pow(2).mean().backward()
                if it == 1:
                    for h in handles:
                        h.remove()
        out.append({"cap": cap, "flags": flags, "log": state["log"], "ready": ready})
        del ddp, model
    return out


def describe(names: list[str], total: int) -> str:
    """Names in bucket order, grouped ("5.bias 5.weight" -> "5.{bias,weight}", layers 4…0) to fit a line."""
    if len(names) == total:
        return f"all {total} tensors"
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        layer, _, leaf = name.rpartition(".")
        if groups and groups[-1][0] == layer:
            groups[-1][1].append(leaf)
        else:
            groups.append((layer, [leaf]))
    runs: list[tuple[str, str, list[str]]] = []  # consecutive layers with the same leaves
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


def show_cap_run(rep: Report, run: dict, every_rank: list[dict], names: list[str], sizes: list[int]) -> bool:
    """One cap's recorded buckets beside ddp_sim's rule and the observed ready order; whether they
    all match (iteration 1 one bucket, 2 the rule, 3 as 2, every rank the same)."""
    cap = run["cap"]
    cap_bytes = round((25 if cap is None else cap) * MiB)
    first_cap = DEFAULT_FIRST_BUCKET_BYTES if cap is None else cap_bytes  # explicit cap: first = cap
    by_rule = assign_buckets(sizes, cap_bytes, first_cap)
    by_ready = assign_buckets_in_order(sizes, [names.index(n) for n in run["ready"]], cap_bytes, first_cap)
    label = "bucket_cap_mb=None (PyTorch's default)" if cap is None else f"bucket_cap_mb={cap:g}"
    rep.line(f"\n{label}: cap {cap_bytes:,} B, first bucket {first_cap:,} B")
    rows, match = [], True
    for it, index, nbytes, bucket_names in (entry for entry in run["log"] if entry[0] <= 2):
        got = [names.index(n) for n in bucket_names]
        if it == 1:  # one bucket holding everything, compared as a set
            rule, ready = index == 0 and sorted(got) == list(range(len(names))), "-"
        else:        # the rebuilt buckets, compared in order, parameter by parameter
            rule = index < len(by_rule) and got == by_rule[index]
            ready = index < len(by_ready) and got == by_ready[index]
        match &= rule and ready is not False
        said = ("the simulator's rule" if rule else "NOT the simulator's rule") + (
            " (one bucket)" if it == 1 else ", the ready order" if ready else ", NOT the ready order")
        rows.append([it, index, nbytes, describe(bucket_names, len(names)), said])
    rep.table(["iteration", "bucket", "bytes", "tensors in order", "recorded = predicted by"],
              rows, name=f"buckets_cap_{cap}")
    second = [entry[1:] for entry in run["log"] if entry[0] == 2]
    third_as_second = [entry[1:] for entry in run["log"] if entry[0] == 3] == second
    same_everywhere = all(other["log"] == run["log"] for other in every_rank)
    rep.line(f"  iteration 3 as iteration 2: {third_as_second}; the same on every rank: {same_everywhere}")
    rep.value(f"cap_{cap}", {"recorded": run["log"], "iteration3_same": third_as_second}, compared=False)
    return (match and sum(1 for entry in run["log"] if entry[0] == 1) == 1 and len(second) == len(by_rule)
            and third_as_second and same_everywhere)


def show_rebuild(rep: Report, flagged: list[dict], names: list[str], sizes: list[int]) -> None:
    """When the rebuild happens depends on the constructor's flags (torch 2.13's distributed.py)."""
    buckets = {}  # flags -> per iteration, its buckets as lists of parameter indices
    for run in flagged:
        log = sorted(run["log"])
        buckets[", ".join(f"{k}=True" for k in run["flags"])] = [
            [[names.index(n) for n in entry[3]] for entry in log if entry[0] == it] for it in (1, 2, 3, 4)]
    counts = {key: " ".join(str(len(b)) for b in its) for key, its in buckets.items()}
    rep.line()
    rep.table(["bucket_cap_mb=None and", "buckets in iterations 1 2 3 4"], list(counts.items()))
    unused, static = buckets["find_unused_parameters=True"], buckets["static_graph=True"]
    # with find_unused the constructor fills buckets in registration order, then reverses the list
    order = list(range(len(sizes)))
    constructor = assign_buckets_in_order(sizes, order, 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES)[::-1]
    rebuilt_at_3 = len(static[0]) == len(static[1]) == 1 < len(static[2]) and static[2] == static[3]
    rep.value("never_rebuilt", all(its == constructor for its in unused))
    rep.value("static_graph_from_3", rebuilt_at_3)
    rep.value("never_rebuilt_counts", counts["find_unused_parameters=True"])
    rep.value("static_graph_counts", counts["static_graph=True"])


def part1_real_buckets(rep: Report, args, runs: list[list[dict]]) -> None:
    """Part 1 from the ranks' records (bucket_worker's, every rank's)."""
    names = [n for n, _ in linear_stack().named_parameters()]
    sizes = [p.numel() * p.element_size() for p in linear_stack().parameters()]
    matches = [show_cap_run(rep, run, [r[i] for r in runs], names, sizes)
               for i, run in enumerate(runs[0][:2])]
    show_rebuild(rep, runs[0][2:], names, sizes)
    rep.note(f"{LAYERS} x Linear({WIDTH}, {WIDTH}), one layer = {sizes[0] + sizes[1]:,} B; {args.world_size} "
             "ranks. bucket_cap_mb counts MiB; any explicit value (even 25) caps the first bucket too. "
             "Before iteration 2 DDP rebuilds the buckets in the order the gradients became ready, here "
             "the reverse registration order the simulator's rule assumes.")
    first = next(entry for entry in runs[0][0]["log"] if entry[0] == 2)
    rep.value("layer_mb", (sizes[0] + sizes[1]) / MB)
    rep.value("layer_bytes", sizes[0] + sizes[1])
    rep.value("first_iteration_buckets", max(sum(1 for e in run["log"] if e[0] == 1) for run in runs[0][:2]))
    rep.value("recorded_equal_rule", all(matches))
    rep.value("bucket0_first", " ".join(first[3][:2]))


# ---- Part 2: the notes' two models, bucketed three ways ------------------------------------------
def torch_buckets(param_bytes: list[int], cap_bytes: int, first_cap: int) -> list[list[int]]:
    """PyTorch's own bucketing on meta tensors, visiting the parameters in reverse (as the rebuild
    does when gradients arrive in reverse order): an independent check of ddp_sim."""
    order = list(range(len(param_bytes) - 1, -1, -1))
    # Tensors go in visiting order; tensor_indices only labels them with their registration index.
    tensors = [torch.empty(param_bytes[i] // 4, device="meta") for i in order]
    limits, sparse = [first_cap, cap_bytes], [False] * len(order)
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, limits, sparse, order)
    return [list(b) for b in indices]


def part2_model_buckets(rep: Report, args) -> None:
    readings = [("25 MB", "25 MB = 25e6 B, first bucket the same (the notes' reading)", 25 * MB, 25 * MB),
                ("default", "bucket_cap_mb=None: 25 MiB, first bucket 1 MiB (PyTorch's default)", 25 * MiB,
                 DEFAULT_FIRST_BUCKET_BYTES),
                ("25 MiB", "bucket_cap_mb=25: 25 MiB, first bucket 25 MiB", 25 * MiB, 25 * MiB)]
    rows, counts, torch_agrees = [], {}, True
    for key, spec in (("resnet", resnet50()), ("bert", bert_large())):
        sizes = spec.param_bytes()
        tiny = [b for b in sizes if b < TINY_BYTES]
        buckets = []
        for _, _, cap, first in readings:
            ours = assign_buckets(sizes, cap, first)
            torch_agrees &= ours == torch_buckets(sizes, cap, first)
            buckets.append(len(ours))
        counts[key] = (len(sizes), len(tiny), buckets)
        rows.append([spec.name, len(sizes), spec.numel, f"{len(tiny)} ({100 * len(tiny) / len(sizes):.1f} %)",
                     f"{100 * sum(tiny) / sum(sizes):.2f}%", *buckets])
        # the notes' figures for this model, in the columns they are about (the handbook's range too)
        ref = {"resnet": "resnet-50", "bert": "bert-large"}[key]
        tensors = rep.notes_text(f"L15-2.2-{ref}-tensors")
        if key == "bert":
            tensors += f"; {rep.notes_text('HB-hundreds-of-tensors')}"
        rows.append(["  the notes", tensors, "", rep.notes_text(f"L15-2.2-{ref}-tiny"), "", "",
                     rep.notes_text(f"L15-2.2-{ref}-buckets-pytorch-default"), ""])
    rep.table(["model", "tensors", "parameters", "under 16 KiB", "share of bytes"] + [r[0] for r in readings],
              rows, name="models")
    for label, text, _, _ in readings:
        rep.line(f"  {label:>7}: {text}")
    rep.value("resnet_tensors", counts["resnet"][0])
    rep.value("bert_tensors", counts["bert"][0])
    rep.value("torch_function_agrees", torch_agrees)
    rep.value("hundreds_of_tensors", min(counts["resnet"][0], counts["bert"][0]) >= 100)
    (resnet, resnet_tiny, resnet_buckets), (bert, bert_tiny, bert_buckets) = counts["resnet"], counts["bert"]
    rep.value("resnet_buckets_25mb", resnet_buckets[0])
    rep.value("resnet_buckets_default", resnet_buckets[1])
    rep.value("resnet_buckets_25mib", resnet_buckets[2])
    rep.value("resnet_tiny", resnet_tiny)
    rep.value("resnet_tiny_pct", 100 * resnet_tiny / resnet)
    rep.value("bert_buckets_25mb", bert_buckets[0])
    rep.value("bert_buckets_default", bert_buckets[1])
    rep.value("bert_buckets_25mib", bert_buckets[2])
    rep.value("bert_tiny", bert_tiny)
    rep.value("bert_tiny_pct", 100 * bert_tiny / bert)
    # the notes' 25 MB as 25e6 B, with PyTorch's default 1 MiB first bucket (for the erratum's argument)
    for name, spec in (("resnet", resnet50()), ("bert", bert_large())):
        rep.value(f"{name}_buckets_25mb_first_1mib", len(assign_buckets(spec.param_bytes(), 25 * MB,
                                                                         DEFAULT_FIRST_BUCKET_BYTES)))
    rep.compare_with_notes(in_table=True)
    rep.note("Under 16 KiB = biases, BatchNorm and LayerNorm vectors: most tensors, a sliver of the bytes. "
             "One all-reduce each would pay the per-message cost hundreds of times. The simulator's buckets "
             "are those of torch's own function (on meta tensors) at every reading: "
             f"{'yes' if torch_agrees else 'NO'}.")


# ---- Part 3: the same floats as one tensor or thousands ------------------------------------------
def allreduce_worker(rank: int, world_size: int, elements: int, counts: list[int]) -> dict[int, list[float]]:
    """Seconds (every repeat) to all-reduce the same `elements` float32 cut into n tensors."""
    flat = torch.ones(elements)
    dist.all_reduce(flat[:PIECE_ELEMENTS])  # warm up the connection
    times: dict[int, list[float]] = {}
    for n in counts:
        pieces = flat.tensor_split(n)
        samples = []
        for _ in range(max(1, min(5, 256 // n))):  # repeat the cheap cases, take the median
            dist.barrier()
            start = time.perf_counter()
            for piece in pieces:  # one blocking all-reduce per tensor: the naive per-gradient scheme
                dist.all_reduce(piece)
            samples.append(time.perf_counter() - start)
        times[n] = samples
    return times


def sweep_counts(max_pieces: int) -> list[int]:
    """1, 64, 4096, … up to max_pieces: three rows at the notes' setting (one tensor, a few dozen,
    the notes' 4096) show the trend; each row between would cost a pass of its own, and the run's
    time is the many-tensor rows' (which is the point)."""
    counts, n = [], 1
    while n < max_pieces:
        counts.append(n)
        n *= 64
    return counts + [max_pieces]


def part3_small_tensors(rep: Report, args, results: list[dict[int, list[float]]]) -> None:
    """Part 3 from the ranks' timings (allreduce_worker's, on 2 ranks)."""
    elements = args.elements
    counts = sweep_counts(elements // PIECE_ELEMENTS)
    times = [{n: statistics.median(r[n]) for n in counts} for r in results]
    t = {n: max(r[n] for r in times) for n in counts}  # the slower rank finishes the collective
    low, high = ({n: pick(pick(r[n]) for r in results) * 1e3 for n in counts} for pick in (min, max))
    rows = [[n, fmt_bytes(4 * elements / n), fmt_time(t[n]), f"{low[n]:.1f}–{high[n]:.1f} ms", t[n] / t[1],
             bar(t[n], max(t.values()), 24)] for n in counts]
    # the notes' figures under the rows they are compared with: one tensor, and the most tensors
    rows.insert(1, ["  the notes", "", rep.notes_text("L15-2.1-one-tensor-fast"), "", "", ""])
    rows.append(["  the notes", "", rep.notes_text("L15-2.1-many-small-slow"), "",
                 rep.notes_text("L15-2.1-ratio-100"), ""])
    rep.table(["tensors", "each", "total time", "range", "× one tensor's time", "total time as a bar"], rows,
              name="sweep")
    many = counts[-1]
    per_message = (t[many] - t[1]) / (many - 1)  # what each extra tensor adds, whatever its size
    rep.note(f"2 gloo ranks (always, like the paper's figure), {elements:,} float32 "
             f"({fmt_bytes(4 * elements)}) cut into n equal tensors, one blocking all-reduce each; the "
             "slower rank's median of up to 5 repeats. Each extra tensor adds about "
             f"{fmt_time(per_message)} whatever its size: a fixed cost per message, the shape of the "
             "paper's figure 2. A bucket pays it once.")
    rep.value("many_small_ms", t[many] * 1e3, timed=True)
    rep.value("one_tensor_ms", t[1] * 1e3, timed=True)
    rep.value("small_over_one", t[many] / t[1], timed=True)
    rep.compare_with_notes(in_table=True)
    if rep.figure_dir() is not None:  # matplotlib only when a figure was asked for
        rep.save_figure(small_tensors_figure(counts, t, results, elements), "small_tensors")


def parts_1_and_3_worker(rank: int, world_size: int, caps_mib: list[float | None], elements: int) -> tuple:
    """Part 1's DDP runs, then Part 3's timings, on the same ranks (at the default 2 ranks)."""
    return (bucket_worker(rank, world_size, caps_mib, ITERATIONS),
            allreduce_worker(rank, world_size, elements, sweep_counts(elements // PIECE_ELEMENTS)))


def launch_parts_1_and_3(args) -> tuple[list[list[dict]], list[dict[int, list[float]]]]:
    """The ranks' results for Part 1 (on --world-size ranks) and Part 3 (always 2): one group when
    those are the same ranks, which saves starting a second one."""
    caps = [args.bucket_cap_bytes / MiB, None]  # as DDP takes it: bucket_cap_mb in MiB
    counts = sweep_counts(args.elements // PIECE_ELEMENTS)
    if args.world_size == 2:
        both = launch(parts_1_and_3_worker, 2, caps, args.elements, timeout_s=args.timeout_s)
        return [b for b, _ in both], [t for _, t in both]
    return (launch(bucket_worker, args.world_size, caps, ITERATIONS, timeout_s=args.timeout_s),
            launch(allreduce_worker, 2, args.elements, counts, timeout_s=args.timeout_s))


if __name__ == "__main__":
    run_main(main)
