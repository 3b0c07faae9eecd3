"""A link of the α-β model: one message of n bytes costs α + n/β; the links the notes use; the
link a measured line of times means.

    from common.costmodel.link import Link, NOTES_LINK
    Link(5e-6, 25e9, "notes' link").message_time(1e6)

Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from common.costmodel.collectives import algorithm, check_size


@dataclass(frozen=True)
class Link:
    """A link with per-message latency `alpha_s` (seconds) and bandwidth `beta_Bps` (bytes/s)."""

    alpha_s: float
    beta_Bps: float
    name: str = ""

    def __post_init__(self) -> None:
        if not (self.alpha_s >= 0 and math.isfinite(self.alpha_s)):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha_s}")
        if not (self.beta_Bps > 0 and math.isfinite(self.beta_Bps)):
            raise ValueError(f"beta must be a finite number > 0, got {self.beta_Bps}")

    def message_time(self, nbytes: float) -> float:
        """Time of one point-to-point message of `nbytes`."""
        return self.alpha_s + nbytes / self.beta_Bps

    def describe(self) -> str:
        label = f"{self.name}: " if self.name else ""
        return f"{label}α = {self.alpha_s * 1e6:.4g} µs, β = {self.beta_Bps / 1e9:.4g} GB/s"


# The notes' defaults (lecture 14 §3): α = 5 µs, β = 25 GB/s, GB = 1e9 bytes.
NOTES_LINK = Link(5e-6, 25e9, "notes' link")
# Link classes for "how big a share of a step is communication" (lecture 14 §3.4 Part 3). The
# bandwidths are per-GPU figures of each class; α matters little there (large messages).
NVLINK = Link(5e-6, 150e9, "NVLink-class")
INFINIBAND = Link(5e-6, 25e9, "InfiniBand-class")
ETHERNET = Link(5e-6, 3.125e9, "Ethernet-class (25 Gb/s)")

# The notes' links (CS336 lecture 8 worked examples): bandwidth one way, as the notes use it.
#   NVLink 4.0: 900 GB/s two-way = 450 one way, the notes' "effective" figure; α ≈ 1 µs (their
#   TP paragraph). InfiniBand NDR: 400 Gb/s = 50 GB/s, 40 GB/s effective (80 %); α ≈ 5 µs (the TP
#   paragraph; their table says 1–2 µs). 100G Ethernet: 12.5 GB/s, 10 GB/s at the same 80 % (what
#   their 3900 ms implies); α = 5 µs, the low end of their 5–20 µs.
CS336_NVLINK = Link(1e-6, 450e9, "NVLink 4.0 (450 GB/s one way)")
CS336_INFINIBAND = Link(5e-6, 40e9, "InfiniBand NDR (40 GB/s effective)")
CS336_ETHERNET = Link(5e-6, 10e9, "100G Ethernet (10 GB/s effective)")


def fit_line_relative(xs: Sequence[float], ys: Sequence[float],
                      through_origin: bool = False) -> tuple[float, float]:
    """Least squares of y ≈ a + b·x in relative error: minimises Σ ((a + b·x − y) / y)².

    Measured times span decades (1 KiB to 16 MiB); unweighted, the largest sizes alone would set
    the line and the intercept (what α comes from) would be noise. With `through_origin`, a = 0.
    """
    if len(xs) != len(ys) or len(xs) < (1 if through_origin else 2) or any(y <= 0 for y in ys):
        raise ValueError("need matching sizes and times > 0: two points at least (one through the origin)")
    scale = max(abs(x) for x in xs) or 1.0  # keeps the normal equations well conditioned
    w = [1.0 / (y * y) for y in ys]
    u = [x / scale for x in xs]
    s0, s1, s2 = sum(w), sum(wi * ui for wi, ui in zip(w, u)), sum(wi * ui * ui for wi, ui in zip(w, u))
    t0, t1 = sum(wi * y for wi, y in zip(w, ys)), sum(wi * ui * y for wi, ui, y in zip(w, u, ys))
    if through_origin:
        return 0.0, t1 / s2 / scale
    det = s0 * s2 - s1 * s1
    if det <= 0:
        raise ValueError("the sizes must not all be equal")
    return (t0 * s2 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det / scale


def ring_alpha_beta_from_line(k: int, intercept_s: float, slope_s_per_byte: float) -> tuple[float, float]:
    """Read a measured line t = a + b·N as the ring's 2(K−1)(α + N/(Kβ)): α = a / 2(K−1) per
    round, β = 2(K−1) / (K·b). Signs are kept: a noisy fit can give a < 0, and the caller says so."""
    check_size(k, 0)
    if k < 2:
        raise ValueError("a ring of one device sends nothing: fit with K >= 2")
    rounds = algorithm("ring all-reduce").rounds(k)
    return intercept_s / rounds, rounds / (k * slope_s_per_byte)
