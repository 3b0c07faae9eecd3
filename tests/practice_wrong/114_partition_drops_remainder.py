"""WRONG on purpose (problem 114): every rank takes int(size / W) samples, so the last size % W
samples are never trained on."""

from __future__ import annotations

import random

from lecture14.data_parallel import average_gradients, train_step  # noqa: F401  (right ones)


def partition_indices(size: int, world_size: int, rank: int, seed: int) -> list[int]:
    order = list(range(size))
    random.Random(seed).shuffle(order)
    share = int(size / world_size)                         # WRONG: drops size % world_size samples
    return order[rank * share:(rank + 1) * share]
