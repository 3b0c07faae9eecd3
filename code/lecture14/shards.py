"""Exercises 9 and 10 of lecture 14 (exercises.py Parts 9–10): what averaging per-rank mean
gradients does to samples of unequal shards, and how many samples stand behind one update.
Numpy only, no torch; the gradients in `correlated_errors` are averaged by the simulated ring.
"""

from __future__ import annotations

import numpy as np

from lecture14.collectives import ring_allreduce


def sample_weights(counts: list[int]) -> list[float]:
    """Weight of one sample of each rank when the ranks' mean gradients are averaged: 1/(K·n_r)."""
    return [1.0 / (len(counts) * c) for c in counts]


def weight_vector_error(counts: list[int]) -> float:
    """Relative error of the naive per-sample weights against the fair 1/N: the gradient's relative
    error when the per-sample gradients are orthogonal and of equal length (data-free)."""
    naive = np.repeat(sample_weights(counts), counts)
    fair = np.full(sum(counts), 1 / sum(counts))
    return float(np.linalg.norm(naive - fair) / np.linalg.norm(fair))


def correlated_errors(counts: list[int], seed: int = 0) -> tuple[float, float]:
    """Random per-sample gradients sharing a common direction (N(1, 1), 5 numbers each), split
    into shards of `counts`: relative error against the full-batch mean of (mean of the ranks'
    means, sum all-reduced then ÷ N)."""
    grads = np.random.default_rng(seed).normal(size=(sum(counts), 5)) + 1.0
    shards = np.split(grads, np.cumsum(counts)[:-1])
    mean_of_means = ring_allreduce([s.mean(axis=0) for s in shards]).outputs[0] / len(shards)
    fixed = ring_allreduce([s.sum(axis=0) for s in shards]).outputs[0] / len(grads)
    full = grads.mean(axis=0)
    return (float(np.linalg.norm(mean_of_means - full) / np.linalg.norm(full)),
            float(np.linalg.norm(fixed - full) / np.linalg.norm(full)))


def effective_batch(ranks: int, per_rank: int, accumulation_steps: int = 1) -> int:
    """Samples behind one optimizer step: data parallelism in space × accumulation in time."""
    return ranks * per_rank * accumulation_steps
