"""Every timeline the handbook's interactive DDP page can show, precomputed with ddp_sim (Lecture 15 §3).

    from lecture15.timeline_grid import build_grid, point_index
    grid = build_grid()            # plain lists and numbers, ready for json.dumps; the page draws them

The handbook chapter asks the reader to turn the number of layers, the bucket size and the
bandwidth and watch the exposed communication. The page (code/report/timeline.py writes it) holds
no model: it looks up the point its sliders select in this grid and draws it. Every timeline here
comes from `ddp_sim.simulate_backward` with the buckets of `ddp_sim.assign_buckets` and the gradient
ready times of `ddp_sim.gradient_ready_times`, as `simulate_ddp` builds them for
lecture15/03_overlap.py; the compute models are 03_overlap's (ResNet-50 and BERT-large each scaled
openly to one notes' step, `ddp_sim.notes_resnet_compute()` and `notes_bert_compute()`; the
uniform stacks at the plain FLOP rate).

Why it is fast (≈ 7,000 settings, two timelines each): the buckets and their ready times depend only
on (model, cap), so they are computed once per pair; each (link, K) then runs `simulate_backward`
on the buckets alone (one entry per bucket: its bytes and the moment its last gradient is ready).
That gives the same communication events and step as the full per-parameter call, because a
bucket's start depends only on those two numbers (tests/test_timeline_page.py checks it against
`simulate_ddp`). Times are stored as integers of 0.1 µs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from common.costmodel import Link, ring_allreduce_time
from lecture15.ddp_sim import (
    BERT_TARGET,
    MB,
    NOTES_S3,
    RESNET_TARGET,
    ComputeModel,
    MiB,
    ModelSpec,
    Param,
    Timeline,
    assign_buckets,
    bert_large,
    bucket_sizes,
    calibration_target_s,
    gradient_ready_times,
    notes_bert_compute,
    notes_resnet_compute,
    resnet50,
    simulate_backward,
)

TIME_UNIT_S = 1e-7          # stored times are integers of 0.1 µs

# The slider grid. Defaults (marked) are 03_overlap.py Part 1's setting: ResNet-50 batch 32, K 16,
# α 10 µs, β 10 GB/s, the notes' 25 MB = 25 × 10^6 B cap, no separate first bucket.
UNIFORM_LAYERS = (4, 8, 16, 32, 64)
UNIFORM_WIDTH, UNIFORM_TOKENS = 1024, 4096   # one BERT-large-sized matmul per layer, 8 × 512 tokens
# (label, cap in bytes); None = the whole model in one bucket. 0 = a bucket per gradient (03's Part 2).
CAPS: tuple[tuple[str, int | None], ...] = (
    ("0 (a bucket per tensor)", 0), ("0.25 MiB", MiB // 4), ("1 MiB", MiB), ("5 MiB", 5 * MiB),
    ("10 MiB", 10 * MiB), ("25 MB (notes)", 25 * MB), ("25 MiB (PyTorch)", 25 * MiB),
    ("50 MiB", 50 * MiB), ("100 MiB", 100 * MiB), ("200 MiB", 200 * MiB), ("one bucket", None))
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


def cap_buckets(model: GridModel, cap_bytes: int | None) -> tuple[list[list[int]], list[float]]:
    """DDP's buckets (registration = model order) and when each is ready, as simulate_ddp has them."""
    param_bytes = model.spec.param_bytes()
    buckets = assign_buckets(param_bytes, model.spec.nbytes if cap_bytes is None else cap_bytes)
    ready = gradient_ready_times(model.spec, model.compute)
    return buckets, [max(ready[i] for i in bucket) for bucket in buckets]


def cap_timelines(model: GridModel, cap_bytes: int | None) -> dict[str, Any]:
    """Every (β, α, K) timeline of one model and cap, with and without overlap."""
    buckets, ready_b = cap_buckets(model, cap_bytes)
    sizes = bucket_sizes(model.spec.param_bytes(), buckets)
    alone = [[b] for b in range(len(buckets))]     # one entry per bucket: see the module docstring
    points: list[dict[str, Any]] = []
    for beta in BETAS_GBS:
        for alpha in ALPHAS_US:
            link = Link(alpha * 1e-6, beta * 1e9)
            for k in WORLD_SIZES:
                cost = {n: ring_allreduce_time(k, n, link) for n in set(sizes)}
                on = simulate_backward(ready_b, sizes, alone, cost.__getitem__, overlap=True)
                off = simulate_backward(ready_b, sizes, alone, cost.__getitem__, overlap=False)
                durations = [to_units(s) for s in on.comm_s]
                points.append({"on": to_units(on.step_s), "off": to_units(off.step_s),
                               "exposed": to_units(on.exposed_comm_s), "comm": to_units(on.comm_total_s),
                               "d": durations,
                               "g": _gaps(on, durations), "go": _gaps(off, durations)})
    return {"buckets": len(buckets), "bytes": sizes, "ready": [to_units(t) for t in ready_b],
            "points": points}


def build_grid() -> dict[str, Any]:
    """The page's data: axes, the default position, and per model and cap every timeline."""
    models = grid_models()
    data_models = []
    for model in models:
        spec = model.spec
        data_models.append({
            "key": model.key, "name": spec.name, "description": spec.description,
            "tensors": len(spec.params), "bytes": spec.nbytes, "compute": model.compute_note,
            "backward": to_units(model.compute.backward_s(spec)),
            "forward": to_units(model.compute.forward_s(spec)),
            "caps": [cap_timelines(model, cap) for _, cap in CAPS]})
    cap_values = [cap for _, cap in CAPS]
    default = {"model": [m.key for m in models].index(DEFAULT["model"]),
               "layers": UNIFORM_LAYERS.index(DEFAULT["layers"]),
               "cap": cap_values.index(DEFAULT["cap_bytes"]), "beta": BETAS_GBS.index(DEFAULT["beta_gbs"]),
               "alpha": ALPHAS_US.index(DEFAULT["alpha_us"]), "k": WORLD_SIZES.index(DEFAULT["world_size"])}
    return {"time_unit_s": TIME_UNIT_S,
            "axes": {"caps": [label for label, _ in CAPS], "cap_bytes": cap_values,
                     "beta_gbs": list(BETAS_GBS), "alpha_us": list(ALPHAS_US),
                     "world_size": list(WORLD_SIZES), "layers": list(UNIFORM_LAYERS)},
            "default": default, "models": data_models}
