"""WRONG on purpose (problem 114): one shuffle, then every W-th index (order[rank::W]) where the
statement cuts contiguous slices: the sizes are right, the split is not."""

from __future__ import annotations

import random

from lecture14.data_parallel import average_gradients, train_step  # noqa: F401  (right ones)


def partition_indices(size: int, world_size: int, rank: int, seed: int) -> list[int]:
    order = list(range(size))
    random.Random(seed).shuffle(order)
    return order[rank::world_size]                         # WRONG: strided, not contiguous
