"""A link of the α-β model: one message of n bytes costs α + n/β; the links the notes use.

    from common.link import Link, NOTES_LINK
    Link(5e-6, 25e9, "notes' link").message_time(1e6)

Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
LINK_PRESETS = {"nvlink": NVLINK, "infiniband": INFINIBAND, "ethernet": ETHERNET}

# The notes' links (CS336 lecture 8 worked examples): bandwidth one way, as the notes use it.
#   NVLink 4.0: 900 GB/s two-way = 450 one way, the notes' "effective" figure; α ≈ 1 µs (their
#   TP paragraph). InfiniBand NDR: 400 Gb/s = 50 GB/s, 40 GB/s effective (80 %); α ≈ 5 µs (the TP
#   paragraph; their table says 1–2 µs). 100G Ethernet: 12.5 GB/s, 10 GB/s at the same 80 % (what
#   their 3900 ms implies); α = 5 µs, the low end of their 5–20 µs.
CS336_NVLINK = Link(1e-6, 450e9, "NVLink 4.0 (450 GB/s one way)")
CS336_INFINIBAND = Link(5e-6, 40e9, "InfiniBand NDR (40 GB/s effective)")
CS336_ETHERNET = Link(5e-6, 10e9, "100G Ethernet (10 GB/s effective)")
