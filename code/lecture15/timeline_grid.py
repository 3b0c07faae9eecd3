"""Every timeline the handbook's interactive DDP page can show, precomputed with ddp_sim (Lecture 15 §3).

    from lecture15.timeline_grid import build_grid, point_index
    grid = build_grid()            # plain lists and numbers, ready for json.dumps; the page draws them

The handbook chapter asks the reader to turn the number of layers, the bucket size and the
bandwidth and watch the exposed communication. The page (code/report/timeline.py writes it) holds
no model: it looks up the point its sliders select in this grid and draws it. Every timeline here
comes from `ddp_sim.simulate_backward` with the buckets of `ddp_sim.assign_buckets` and the gradient
ready times of `ddp_sim.gradient_ready_times`, as `simulate_ddp` builds them for
lecture15/03_overlap.py; the compute models are 03_overlap's (ResNet-50 and BERT-large each scaled
openly to one notes' step, `notes_calibration.notes_resnet_compute()` and `notes_bert_compute()`; the
uniform stacks at the plain FLOP rate).

Why it is fast (≈ 7,000 settings, two timelines each): the buckets and their ready times depend only
on (model, cap), so they are computed once per pair; each (link, K) then runs `simulate_backward`
on the buckets alone (one entry per bucket: its bytes and the moment its last gradient is ready).
That gives the same communication events and step as the full per-parameter call, because a
bucket's start depends only on those two numbers (tests/report/test_timeline_page.py checks it against
`simulate_ddp`). Times are stored as integers of 0.1 µs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.units import MB, MiB
from lecture15.ddp_sim import (
    DEFAULT_FIRST_BUCKET_BYTES,
    NOTES_S3,
    ComputeModel,
    Timeline,
    assign_buckets,
    bucket_sizes,
    gradient_ready_times,
    simulate_backward,
)
from lecture15.models import ModelSpec, Param, bert_large, resnet50
from lecture15.notes_calibration import (
    BERT_TARGET,
    RESNET_TARGET,
    calibration_target_s,
    notes_bert_compute,
    notes_resnet_compute,
)

TIME_UNIT_S = 1e-7          # stored times are integers of 0.1 µs

# The slider grid. Defaults (marked) are 03_overlap.py Part 1's setting: ResNet-50 batch 32, K 16,
# α 10 µs, β 10 GB/s, the notes' 25 MB = 25 × 10^6 B cap, no separate first bucket.
UNIFORM_LAYERS = (4, 8, 16, 32, 64)
UNIFORM_WIDTH, UNIFORM_TOKENS = 1024, 4096   # one BERT-large-sized matmul per layer, 8 × 512 tokens
# (label, cap in bytes, first bucket's cap or None); cap None = the whole model in one bucket,
# 0 = a bucket per gradient (03's Part 2). The three 25s: the notes' decimal MB, PyTorch's
# bucket_cap_mb=25 as it runs by default (a 1 MiB first bucket), and 25 MiB with no first bucket.
CAPS: tuple[tuple[str, int | None, int | None], ...] = (
    ("0 (a bucket per tensor)", 0, None), ("0.25 MiB", MiB // 4, None), ("1 MiB", MiB, None),
    ("5 MiB", 5 * MiB, None), ("10 MiB", 10 * MiB, None), ("25 MB (notes)", 25 * MB, None),
    ("25 MiB + 1 MiB first (PyTorch's default)", 25 * MiB, DEFAULT_FIRST_BUCKET_BYTES),
    ("25 MiB, no first bucket", 25 * MiB, None), ("50 MiB", 50 * MiB, None), ("100 MiB", 100 * MiB, None),
    ("200 MiB", 200 * MiB, None), ("one bucket", None, None))
# 10 GbE, 25 GbE, lecture 15's, lecture 14's, NVLink-class, …
BETAS_GBS = (1.25, 3.125, 10.0, 25.0, 150.0, 400.0)
ALPHAS_US = (1.0, 10.0, 50.0)                         # 10 = lecture 15's; 50 = 03 Part 2's TCP link
WORLD_SIZES = (2, 8, 16, 64, 256)
# The page opens at lecture 15 §3's setting, 03_overlap.py Part 1's defaults.
DEFAULT = {"model": "ResNet-50", "layers": 16, "cap_bytes": NOTES_S3["cap_bytes"],
           "beta_gbs": NOTES_S3["beta_Bps"] / 1e9, "alpha_us": NOTES_S3["alpha_s"] * 1e6,
           "world_size": NOTES_S3["world_size"]}


@dataclass(frozen=True)
class GridModel:
    """One entry of the model slider: the spec, its compute model and where that comes from."""

    key: str
    spec: ModelSpec
    compute: ComputeModel
    compute_note: str


def uniform_stack(layers: int, width: int = UNIFORM_WIDTH, tokens: int = UNIFORM_TOKENS) -> ModelSpec:
    """`layers` equal linear layers (width × width weight and a bias), `tokens` rows through each."""
    if min(layers, width, tokens) < 1:
        raise ValueError("layers, width and tokens must be >= 1")
    params: list[Param] = []
    for layer in range(layers):
        params.append(Param(f"layer{layer}.weight", (width, width), 2.0 * tokens * width * width))
        params.append(Param(f"layer{layer}.bias", (width,)))
    return ModelSpec(f"uniform stack, {layers} layers", params,
                     f"{layers} × linear {width}×{width} + bias, {tokens} tokens")


def grid_models() -> list[GridModel]:
    """ResNet-50 and BERT-large as 03_overlap.py computes them, then the uniform stacks."""
    base = ComputeModel()
    resnet_compute, bert_compute = notes_resnet_compute(), notes_bert_compute()
    models = [GridModel("ResNet-50", resnet50(batch=32), resnet_compute,
                        f"compute scaled by {resnet_compute.calibration:.4f} to the notes' "
                        f"{calibration_target_s(RESNET_TARGET) * 1e3:g} ms step, as in 03_overlap.py"),
              GridModel("BERT-large", bert_large(), bert_compute,
                        f"compute scaled by {bert_compute.calibration:.4f} to the notes' "
                        f"{calibration_target_s(BERT_TARGET) * 1e3:g} ms reversed-order step, "
                        "as in 03_overlap.py")]
    models += [GridModel(f"uniform-{n}", uniform_stack(n), base, "FLOPs as they stand")
               for n in UNIFORM_LAYERS]
    return models


def to_units(seconds: float) -> int:
    return round(seconds / TIME_UNIT_S)


def point_index(i_beta: int, i_alpha: int, i_k: int) -> int:
    """Where the setting (β, α, K), as indices into the axes, sits in a cap's list of points."""
    return (i_beta * len(ALPHAS_US) + i_alpha) * len(WORLD_SIZES) + i_k


def _gaps(timeline: Timeline, durations: Sequence[int]) -> list[int]:
    """Each bucket's start as the wait after the previous bucket's (rounded) end, so that the page
    rebuilds start_i = end_(i−1) + gap_i, end_i = start_i + duration_i with integers only."""
    gaps, end = [], 0
    for event, duration in zip(timeline.comm_events(), durations):
        start = to_units(event.start_s)
        gaps.append(start - end)
        end = start + duration
    return gaps


def time_text(seconds: float) -> str:
    """A time as the page prints it, rounded once from the model's float: ms below a second (two
    decimals, three below 1 ms), s from one second up (two decimals)."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e3:.3f} ms"


def cap_buckets(model: GridModel, cap_bytes: int | None,
                first_cap_bytes: int | None = None) -> tuple[list[list[int]], list[float]]:
    """DDP's buckets (registration = model order) and when each is ready, as simulate_ddp has them."""
    param_bytes = model.spec.param_bytes()
    cap = model.spec.nbytes if cap_bytes is None else cap_bytes
    buckets = assign_buckets(param_bytes, cap, first_cap_bytes)
    ready = gradient_ready_times(model.spec, model.compute)
    return buckets, [max(ready[i] for i in bucket) for bucket in buckets]


def _point(on: Timeline, off: Timeline) -> dict[str, Any]:
    """One setting's two timelines as the page stores them: integers of 0.1 µs to draw with, and
    the texts it prints ("t": step with and without overlap, exposed, all-reduce in all, first
    all-reduce's start, overlap's gain in %), each rounded once from the model's own numbers."""
    durations = [to_units(s) for s in on.comm_s]
    texts = [time_text(t) for t in (on.step_s, off.step_s, on.exposed_comm_s, on.comm_total_s,
                                   on.first_comm_start_s)]
    return {"on": to_units(on.step_s), "off": to_units(off.step_s), "exposed": to_units(on.exposed_comm_s),
            "comm": to_units(on.comm_total_s), "d": durations, "g": _gaps(on, durations),
            "go": _gaps(off, durations), "t": texts + [f"{100 * (off.step_s / on.step_s - 1):.0f}"]}


def cap_timelines(model: GridModel, cap_bytes: int | None,
                  first_cap_bytes: int | None = None) -> dict[str, Any]:
    """Every (β, α, K) timeline of one model and cap, with and without overlap."""
    buckets, ready_b = cap_buckets(model, cap_bytes, first_cap_bytes)
    sizes = bucket_sizes(model.spec.param_bytes(), buckets)
    alone = [[b] for b in range(len(buckets))]     # one entry per bucket: see the module docstring
    points: list[dict[str, Any]] = []
    for beta in BETAS_GBS:
        for alpha in ALPHAS_US:
            link = Link(alpha * 1e-6, beta * 1e9)
            for k in WORLD_SIZES:
                cost = {n: algorithm("ring all-reduce").time(k, n, link) for n in set(sizes)}
                on, off = (simulate_backward(ready_b, sizes, alone, cost.__getitem__, overlap=overlap)
                           for overlap in (True, False))
                points.append(_point(on, off))
    # A bucket holds consecutive parameters (filled in reverse order): its lowest index and count.
    return {"buckets": len(buckets), "bytes": sizes, "ready": [to_units(t) for t in ready_b],
            "low": [min(b) for b in buckets], "tensors": [len(b) for b in buckets], "points": points}


def cap_flag(cap_bytes: int | None) -> str | None:
    """A cap as 03_overlap.py's --bucket-cap-mb takes it: "25MB" for the notes' decimal MB, a bare
    number of MiB otherwise; None for "one bucket" (no flag: any cap above the model's bytes)."""
    if cap_bytes is None:
        return None
    if cap_bytes and cap_bytes % MB == 0 and cap_bytes % MiB:
        return f"{cap_bytes // MB}MB"
    return f"{cap_bytes / MiB:g}"


def show_setting(model_key: str, cap_index: int, beta_gbs: float, alpha_us: float, world_size: int) -> None:
    """Print one of the page's settings from the full per-parameter simulate_ddp (the page's
    command line for it): the steps with and without overlap and the exposed communication."""
    from lecture15.ddp_sim import simulate_ddp

    model = next(m for m in grid_models() if m.key == model_key)
    label, cap, first = CAPS[cap_index]
    link = Link(alpha_us * 1e-6, beta_gbs * 1e9)
    runs = [simulate_ddp(model.spec, world_size, link, model.spec.nbytes if cap is None else cap, first,
                         overlap=overlap, compute=model.compute) for overlap in (True, False)]
    print(f"{model.spec.name}, cap {label}, K = {world_size}, α = {alpha_us:g} µs, β = {beta_gbs:g} GB/s: "
          f"{len(runs[0].buckets)} buckets; step {time_text(runs[0].step_s)} with overlap, "
          f"{time_text(runs[1].step_s)} without; exposed {time_text(runs[0].exposed_comm_s)}")


def latency_units() -> list[list[int]]:
    """The all-reduce's latency term 2(K−1)α (the cost with no bytes), by α then K: the page
    splits a bucket's all-reduce into it and the bandwidth term (the rest)."""
    return [[to_units(algorithm("ring all-reduce").time(k, 0, Link(alpha * 1e-6, 1e9))) for k in WORLD_SIZES]
            for alpha in ALPHAS_US]


def build_grid() -> dict[str, Any]:
    """The page's data: axes, the default position, and per model and cap every timeline."""
    models = grid_models()
    data_models = []
    for model in models:
        spec = model.spec
        data_models.append({
            "key": model.key, "name": spec.name, "description": spec.description,
            "tensors": len(spec.params), "bytes": spec.nbytes, "compute": model.compute_note,
            "params": [p.name for p in spec.params],
            "backward": to_units(model.compute.backward_s(spec)),
            "backward_text": time_text(model.compute.backward_s(spec)),
            "forward": to_units(model.compute.forward_s(spec)),
            "caps": [cap_timelines(model, cap, first) for _, cap, first in CAPS]})
    default = {"model": [m.key for m in models].index(DEFAULT["model"]),
               "layers": UNIFORM_LAYERS.index(DEFAULT["layers"]),
               "cap": [(cap, first) for _, cap, first in CAPS].index((DEFAULT["cap_bytes"], None)),
               "beta": BETAS_GBS.index(DEFAULT["beta_gbs"]),
               "alpha": ALPHAS_US.index(DEFAULT["alpha_us"]), "k": WORLD_SIZES.index(DEFAULT["world_size"])}
    return {"time_unit_s": TIME_UNIT_S,
            "axes": {"caps": [label for label, _, _ in CAPS], "cap_bytes": [cap for _, cap, _ in CAPS],
                     "first_cap_bytes": [first for _, _, first in CAPS],
                     "cap_flags": [cap_flag(cap) for _, cap, _ in CAPS],
                     "first_cap_flags": [cap_flag(first) for _, _, first in CAPS],
                     "beta_gbs": list(BETAS_GBS), "alpha_us": list(ALPHAS_US),
                     "world_size": list(WORLD_SIZES), "layers": list(UNIFORM_LAYERS)},
            "latency": latency_units(), "default": default, "models": data_models}
