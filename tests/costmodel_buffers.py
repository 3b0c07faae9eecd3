"""Buffers the tests of the cost model hand to lecture14.collectives' simulator."""

from __future__ import annotations

import numpy as np


def buffers(k: int, n: int) -> list[np.ndarray]:
    """K buffers of n one-byte elements: the simulator then counts bytes as elements."""
    return [np.zeros(n, dtype=np.uint8) for _ in range(k)]


def pieces(k: int, n: int) -> list[np.ndarray]:
    """n bytes cut into K pieces at array_split boundaries (all-gather inputs)."""
    return [np.zeros(len(c), dtype=np.uint8) for c in np.array_split(np.arange(n), k)]
