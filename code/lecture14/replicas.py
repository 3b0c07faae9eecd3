"""Exercise 12 of lecture 14 (exercises.py Part 12): K replicas of a small linear model trained
with SGD, their gradients averaged by the simulated ring all-reduce, and the ways they drift apart.
Numpy only (float32), no torch.
"""

from __future__ import annotations

import numpy as np

from lecture14.collectives import ring_allreduce

FEATURES = 16  # the linear model's weights: enough for reordered float32 sums to differ


def replica_drift(k: int, steps: int, init_seeds: list[int], skip_param: int | None = None,
                    noise_seeds: list[int] | None = None, rank_order_sum: bool = False) -> float:
    """Max parameter difference between K replicas of a linear model after `steps` of SGD.

    Gradients are averaged with the simulated ring all-reduce, except parameter `skip_param`, which
    each rank updates with its own gradient; `noise_seeds` adds per-rank noise; `rank_order_sum`
    lets each rank add the K gradients in its own order (float32) instead of using one result.
    """
    data = np.random.default_rng(42)
    xs = [data.normal(size=(16, FEATURES)).astype(np.float32) for _ in range(k)]
    ys = [x @ data.normal(size=FEATURES).astype(np.float32) for x in xs]
    ws = [np.random.default_rng(s).normal(size=FEATURES).astype(np.float32) for s in init_seeds]
    noise = [np.random.default_rng(s) for s in noise_seeds] if noise_seeds else None
    for _ in range(steps):
        grads = [2 * x.T @ (x @ w - y) / len(y) for x, y, w in zip(xs, ys, ws)]
        if rank_order_sum:
            avg = [sum(grads[(r + j) % k] for j in range(k)) / k for r in range(k)]
        else:
            avg = [g / k for g in ring_allreduce(grads).outputs]
        for r in range(k):
            step = avg[r].copy()
            if skip_param is not None:
                step[skip_param] = grads[r][skip_param]
            if noise:
                step += np.float32(1e-3) * noise[r].normal(size=FEATURES).astype(np.float32)
            ws[r] = ws[r] - np.float32(0.01) * step
    return float(max(np.abs(w - ws[0]).max() for w in ws))
