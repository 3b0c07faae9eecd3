"""A pure model of DDP's gradient buckets and of one backward pass overlapped with their all-reduce.

Lecture 15 §2.2, §3 and §5. No torch, no processes: scripts 02, 03 and 05 take their buckets,
timelines and scaling numbers from here, and the real DDP runs are checked against it.

    buckets = assign_buckets(model.param_bytes(), cap_bytes=25 * MiB)
    tl = simulate_ddp(resnet50(), 16, Link(10e-6, 10e9), cap_bytes=25 * MB)
    print(tl.step_s, tl.first_comm_start_s, *ascii_timeline(tl), sep="\\n")

The model, in plain words:
  - bucketing is PyTorch's rule (`torch.distributed._compute_bucket_assignment_by_size`): walk the
    parameters in some order, add each to the open bucket, seal the bucket *after* adding once its
    bytes reach (>=) the limit; the first bucket may have a smaller limit. One dtype (fp32) only.
  - compute: one stream produces the gradients in reverse model order; a parameter's gradient is
    ready when the backward of its op is done. Backward of an op = `backward_over_forward` × its
    forward FLOPs at `flops_per_s` (see models.py for the FLOPs); forward = forward FLOPs at the same rate.
  - communication: one stream all-reduces the buckets in bucket-index order (DDP's Reducer launches
    bucket i+1 only after bucket i), each with the ring α-β cost 2(K−1)(α + n/(Kβ)); a bucket starts
    when it is ready and the one before it has finished. Without overlap every bucket waits for the
    end of backward. The two streams never slow each other down (no contention, no kernel overhead).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.timeline import Span, ascii_rows, gantt_row, painted
from common.units import MiB  # the notes' "25 MB" is 10^6-byte MB; PyTorch's bucket_cap_mb is MiB
from lecture15.models import ModelSpec, Param

RING_ALLREDUCE = algorithm("ring all-reduce")
DEFAULT_FIRST_BUCKET_BYTES = 1 * MiB   # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
NOTES_FLOPS_PER_S = 16e12          # the compute rate that reproduces the notes' ResNet-50 backward


# ---- buckets ----------------------------------------------------------------------------------
def assign_buckets_in_order(param_bytes: Sequence[int], order: Sequence[int], cap_bytes: int,
                            first_cap_bytes: int | None = None) -> list[list[int]]:
    """Buckets (lists of parameter indices) filled by visiting the parameters in `order`.

    A bucket is sealed after adding a parameter once its bytes are >= the current limit; the
    first bucket's limit is `first_cap_bytes` (when given), every later one's `cap_bytes`. Buckets
    come in the order they were filled — what DDP's rebuild after iteration 1 does with the order
    the gradients actually became ready (torch's function with `tensor_indices=order`).
    """
    if cap_bytes < 0 or (first_cap_bytes is not None and first_cap_bytes < 0):
        raise ValueError("bucket caps must be >= 0 bytes")
    if sorted(order) != list(range(len(param_bytes))):
        raise ValueError("order must be a permutation of the parameter indices")
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for index in order:
        current.append(index)
        filled += param_bytes[index]
        limit = first_cap_bytes if (first_cap_bytes is not None and not buckets) else cap_bytes
        if filled >= limit:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def assign_buckets(param_bytes: Sequence[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    """DDP's buckets for parameters given in registration order: filled in REVERSE registration order.

    Bucket 0 holds the last-registered parameters (their gradients come first in backward). Equal
    to torch.distributed._compute_bucket_assignment_by_size on the reversed list, indices mapped
    back. (PyTorch's constructor itself walks the forward order and reverses the bucket list; it
    only keeps those buckets with find_unused_parameters=True, and they can differ at the edges.)
    """
    return assign_buckets_in_order(param_bytes, range(len(param_bytes) - 1, -1, -1), cap_bytes,
                                   first_cap_bytes)


def bucket_sizes(param_bytes: Sequence[int], buckets: Sequence[Sequence[int]]) -> list[int]:
    """Bytes in each bucket."""
    return [sum(param_bytes[i] for i in bucket) for bucket in buckets]


# ---- compute ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ComputeModel:
    """Compute time from FLOPs: backward = `backward_over_forward` × forward, at `flops_per_s`.

    `calibration` multiplies every compute time (1 = the FLOP count as it stands); a script that
    calibrates must print the factor and where it comes from.
    """

    flops_per_s: float = NOTES_FLOPS_PER_S
    backward_over_forward: float = 2.0
    calibration: float = 1.0

    def forward_s(self, model: ModelSpec) -> float:
        return self.calibration * model.forward_flops / self.flops_per_s

    def backward_s(self, model: ModelSpec) -> float:
        return self.backward_over_forward * self.forward_s(model)

    def param_backward_s(self, param: Param) -> float:
        return self.calibration * self.backward_over_forward * param.forward_flops / self.flops_per_s


# The notes never state their compute model. Scripts that compare with their timeline figures
# calibrate openly: the backward is scaled (one factor) until the model reproduces ONE figure the
# notes print (the target, agreeing by construction), and every other figure is then a check.
# The targets are the notes' rows, which this pure model never reads: lecture15/notes_calibration.py
# reads them from the notes' table and hands them to calibrated_to_step. Both at the notes' §3
# setting (below), whatever flags say.
NOTES_S3 = {"world_size": 16, "alpha_s": 10e-6, "beta_Bps": 10e9, "cap_bytes": 25 * 10**6}


def calibrated_to(model: ModelSpec, backward_s: float, base: ComputeModel = ComputeModel()) -> ComputeModel:
    """`base` scaled so that `model`'s backward takes `backward_s`; the factor is its .calibration."""
    plain = ComputeModel(base.flops_per_s, base.backward_over_forward)
    return ComputeModel(base.flops_per_s, base.backward_over_forward, backward_s / plain.backward_s(model))


def calibrated_to_step(model: ModelSpec, target_step_s: float, registration: str = "correct",
                       base: ComputeModel = ComputeModel()) -> ComputeModel:
    """`base` scaled so that the overlapped step at the notes' §3 setting (NOTES_S3) is `target_step_s`
    (bisection on the factor, to float precision; the step grows monotonically with compute)."""
    link = Link(NOTES_S3["alpha_s"], NOTES_S3["beta_Bps"], "the notes' §3 link")
    order = registration_order(len(model.params), registration)

    def step(factor: float) -> float:
        compute = ComputeModel(base.flops_per_s, base.backward_over_forward, factor)
        return simulate_ddp(model, NOTES_S3["world_size"], link, NOTES_S3["cap_bytes"], registration=order,
                            compute=compute).step_s

    low, high = 0.0, 1.0
    while step(high) < target_step_s:
        high *= 2
    for _ in range(48):   # 2^-48 of the factor: far below any digit the notes print
        middle = (low + high) / 2
        low, high = (middle, high) if step(middle) < target_step_s else (low, middle)
    # `high`: the smallest factor found whose step reaches the target (never a hair below it)
    return ComputeModel(base.flops_per_s, base.backward_over_forward, high)


def gradient_ready_times(model: ModelSpec, compute: ComputeModel) -> list[float]:
    """When each parameter's gradient is ready (model order), backward running in reverse model order."""
    ready = [0.0] * len(model.params)
    clock = 0.0
    for index in range(len(model.params) - 1, -1, -1):
        clock += compute.param_backward_s(model.params[index])
        ready[index] = clock
    return ready


def registration_order(n: int, kind: str = "correct", seed: int = 0) -> list[int]:
    """Which model parameter is registered i-th: 'correct' (model order), 'reversed', 'shuffled' (seeded)."""
    order = list(range(n))
    if kind == "reversed":
        order.reverse()
    elif kind == "shuffled":
        random.Random(seed).shuffle(order)
    elif kind != "correct":
        raise ValueError(f"unknown registration order {kind!r} (correct, shuffled, reversed)")
    return order


def buckets_for_registration(model: ModelSpec, registration: Sequence[int], cap_bytes: int,
                             first_cap_bytes: int | None = None) -> list[list[int]]:
    """PyTorch 1.5's buckets (reverse registration order, no rebuild) as model parameter indices."""
    registered_bytes = [model.params[i].nbytes for i in registration]
    buckets = assign_buckets(registered_bytes, cap_bytes, first_cap_bytes)
    return [[registration[i] for i in bucket] for bucket in buckets]


# ---- timeline ---------------------------------------------------------------------------------
# The timeline's spans are common.timeline.Span: row 0 of kind 'compute' (a gradient being produced,
# labelled with its parameter), row 1 of kind 'comm' (bucket `index`'s all-reduce).
COMPUTE, COMM = "compute", "comm"


@dataclass
class Timeline:
    """The events of one backward pass and the numbers the notes quote about it."""

    events: list[Span]
    buckets: list[list[int]]
    bucket_bytes: list[int]
    bucket_ready_s: list[float]
    backward_s: float
    overlap: bool
    forward_s: float = 0.0
    comm_s: list[float] = field(default_factory=list)

    def comm_events(self) -> list[Span]:
        return [e for e in self.events if e.kind == COMM]

    @property
    def step_s(self) -> float:
        """Backward plus the communication still running after it (§3's "step"; no forward)."""
        return max([self.backward_s] + [e.end_s for e in self.comm_events()])

    @property
    def step_with_forward_s(self) -> float:
        """Forward + backward overlapped with communication (§5's step)."""
        return self.forward_s + self.step_s

    @property
    def exposed_comm_s(self) -> float:
        return self.step_s - self.backward_s

    @property
    def first_comm_start_s(self) -> float:
        starts = [e.start_s for e in self.comm_events()]
        return min(starts) if starts else self.backward_s

    @property
    def comm_total_s(self) -> float:
        return sum(self.comm_s)


def simulate_backward(ready_s: Sequence[float], param_bytes: Sequence[int], buckets: Sequence[Sequence[int]],
                      comm_time: Callable[[int], float], overlap: bool = True,
                      names: Sequence[str] | None = None, forward_s: float = 0.0) -> Timeline:
    """The two-stream timeline for given gradient-ready times and buckets (bucket-index order).

    `comm_time(nbytes)` is one bucket's all-reduce time. With overlap a bucket starts at
    max(its last gradient ready, previous bucket finished); without, no bucket starts before the
    last gradient is ready.
    """
    n = len(ready_s)
    if len(param_bytes) != n or sorted(i for b in buckets for i in b) != list(range(n)):
        raise ValueError("buckets must hold every parameter exactly once")
    names = list(names) if names is not None else [f"p{i}" for i in range(n)]
    backward = max(ready_s, default=0.0)
    events: list[Span] = []
    clock = 0.0
    for index in sorted(range(n), key=lambda i: (ready_s[i], -i)):   # compute spans; ties: backward order
        if ready_s[index] > clock:
            events.append(Span(0, COMPUTE, clock, ready_s[index], label=names[index]))
            clock = ready_s[index]
    sizes = bucket_sizes(param_bytes, buckets)
    ready_b = [max(ready_s[i] for i in bucket) for bucket in buckets]
    durations = [comm_time(size) for size in sizes]
    free_at = 0.0
    for b, (ready, duration) in enumerate(zip(ready_b, durations)):
        start = max(ready if overlap else backward, free_at)
        free_at = start + duration
        events.append(Span(1, COMM, start, free_at, index=b, label=f"bucket {b}"))
    return Timeline(events, [list(b) for b in buckets], sizes, ready_b, backward, overlap, forward_s,
                    durations)


def simulate_ddp(model: ModelSpec, world_size: int, link: Link, cap_bytes: int,
                 first_cap_bytes: int | None = None, overlap: bool = True,
                 registration: Sequence[int] | None = None, compute: ComputeModel | None = None,
                 buckets: Sequence[Sequence[int]] | None = None) -> Timeline:
    """One DDP backward of `model` on `world_size` ranks with ring all-reduce over `link`.

    Buckets follow `registration` (default: model order) as PyTorch 1.5 did, unless given.
    """
    compute = compute or ComputeModel()
    if buckets is None:
        order = registration if registration is not None else range(len(model.params))
        buckets = buckets_for_registration(model, list(order), cap_bytes, first_cap_bytes)
    return simulate_backward(gradient_ready_times(model, compute), model.param_bytes(), buckets,
                             lambda nbytes: RING_ALLREDUCE.time(world_size, nbytes, link), overlap,
                             [p.name for p in model.params], compute.forward_s(model))


# ---- drawing ----------------------------------------------------------------------------------
def ascii_timeline(timeline: Timeline, width: int = 64, full_scale_s: float | None = None,
                   labels: tuple[str, str] = ("backward", "comm")) -> list[str]:
    """Two rows as the notes draw them: compute as █, each bucket's all-reduce as its index's last digit."""
    scale = full_scale_s or timeline.step_s
    if scale <= 0:
        return [f"{labels[0]} ||", f"{labels[1]} ||"]
    rows = [(label, [e for e in timeline.events if e.row == row]) for row, label in enumerate(labels)]
    def char(e: Span) -> str:
        return "█" if e.kind == COMPUTE else str((e.index or 0) % 10)
    return ascii_rows(rows, painted(width, scale, char))


BUCKET_COLOURS = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]


def gantt_figure(timelines: Sequence[tuple[str, Timeline]], title: str = "") -> Any:
    """A matplotlib Gantt chart: per timeline a compute row and a comm row (buckets coloured by
    index, with a legend), each step's end marked with its time. `title` should name the setting."""
    from matplotlib.patches import Patch

    from common.figures import new_figure

    fig, ax = new_figure(figsize=(10, 1.4 + 0.9 * len(timelines)))
    ticks, names = [], []
    colours = BUCKET_COLOURS
    most = max(len(t.buckets) for _, t in timelines)
    for t, (name, timeline) in enumerate(timelines):
        base = 2 * (len(timelines) - 1 - t)
        gantt_row(ax, base + 1.45, [e for e in timeline.events if e.kind == COMPUTE], lambda e: "tab:blue",
                  edge=None)
        # one collection, its bars in order (later over earlier outlines): a call each took 2 s at cap 0
        comm = timeline.comm_events()
        ax.broken_barh([(e.start_s * 1e3, (e.end_s - e.start_s) * 1e3) for e in comm], (base + 0.1, 0.8),
                       facecolors=[colours[(e.index or 0) % len(colours)] for e in comm], edgecolors="white",
                       linewidth=0.3)
        end = timeline.step_s * 1e3
        ax.plot([end, end], [base, base + 1.95], color="black", linewidth=1.2)
        ax.text(end, base + 1.0, f" step {end:.2f} ms", va="center", fontsize=8)
        ticks += [base + 1.45, base + 0.5]
        names += [f"{name}: backward", f"{name}: all-reduce"]
    ax.set_yticks(ticks)
    ax.set_yticklabels(names)
    ax.set_xlabel("time since the backward began (ms)")
    right = max(t.step_s for _, t in timelines) * 1e3
    ax.set_xlim(0, right * 1.16)   # room for the step labels; nothing is cut off
    handles = [Patch(color="tab:blue", label="backward (gradients)")]
    handles += [Patch(color=colours[b], label=f"bucket {b}") for b in range(min(most, len(colours)))]
    repeat = f" (colours repeat every {len(colours)} of {most} buckets)" if most > len(colours) else ""
    ax.legend(handles=handles, fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.18 - 0.02 * len(timelines)), ncol=min(len(handles), 8),
              title=f"all-reduce colour = bucket index{repeat}", title_fontsize=7)
    ax.set_title(title, fontsize=9)
    return fig


# ---- scaling (§5) -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ScalingPoint:
    """Weak scaling at K ranks: the step, its slowdown against one rank, throughput and efficiency."""

    world_size: int
    step_s: float
    slowdown: float
    throughput_speedup: float
    efficiency: float


def throughput_speedup(world_size: int, single_step_s: float, step_s: float) -> float:
    """Weak scaling: K ranks each finish one per-rank batch per `step_s`, one rank one per `single_step_s`."""
    return world_size * single_step_s / step_s


def weak_scaling(model: ModelSpec, world_sizes: Sequence[int], link: Link, cap_bytes: int,
                 first_cap_bytes: int | None = None,
                 compute: ComputeModel | None = None) -> list[ScalingPoint]:
    """Per-rank batch fixed: step(K) = forward + backward overlapped with the ring all-reduce of the
    buckets."""
    compute = compute or ComputeModel()
    single = compute.forward_s(model) + compute.backward_s(model)    # one rank: nothing to reduce
    points = []
    for k in world_sizes:
        step = simulate_ddp(model, k, link, cap_bytes, first_cap_bytes, compute=compute).step_with_forward_s
        speedup = throughput_speedup(k, single, step)
        points.append(ScalingPoint(k, step, step / single, speedup, speedup / k))
    return points


def skip_sync_step_s(sync_step_s: float, local_step_s: float, every: int) -> float:
    """Average step when only one iteration in `every` synchronises (the others skip the all-reduce)."""
    if every < 1:
        raise ValueError("synchronise every n >= 1 iterations")
    return ((every - 1) * local_step_s + sync_step_s) / every


def skip_sync_speedup(sync_step_s: float, local_step_s: float, every: int) -> float:
    """How much faster than synchronising every iteration: sync step / averaged step (1.17 = +17 %)."""
    return sync_step_s / skip_sync_step_s(sync_step_s, local_step_s, every)
