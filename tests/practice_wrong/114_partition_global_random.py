"""WRONG on purpose (problem 114): the shuffle uses the global generator (random.seed, then
random.shuffle): the same permutation, but the caller's random state is changed."""

from __future__ import annotations

import random

from common.costmodel.collectives import split_sizes
from lecture14.data_parallel import average_gradients, train_step  # noqa: F401  (right ones)


def partition_indices(size: int, world_size: int, rank: int, seed: int) -> list[int]:
    order = list(range(size))
    random.seed(seed)                                      # WRONG: reseeds everyone's generator
    random.shuffle(order)
    sizes = split_sizes(size, world_size)
    start = sum(sizes[:rank])
    return order[start:start + sizes[rank]]
