"""The problem 05_scaling.py Part 3 trains on: a noisy least-squares regression, its micro-batches,
its exact full-data loss and mean gradient. No lesson here (the training loops that accumulate n
micro-batch gradients, as no_sync does, are in 05_scaling.py); pure numpy, no torch, no processes.
"""

from __future__ import annotations

import numpy as np

CONV_DIM = 16             # features
CONV_NOISE = 0.5          # label noise: the best reachable loss is about noise² / 2
CONV_DATA_SEED = 0        # data and true weights
CONV_ORDER_SEED = 1       # the order in which samples are cut into micro-batches
# A step size far above 2/λ_max overflows float64 within a few updates: that run has diverged, its
# loss is inf from there on, and numpy is told not to warn about the overflow it was asked for.
DIVERGING = np.errstate(over="ignore", invalid="ignore")


def make_regression(n_samples: int, dim: int = CONV_DIM,
                    seed: int = CONV_DATA_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Features with scales 0.5 … 2 (an ill-conditioned but easy problem) and noisy linear labels."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(0.5, 2.0, dim)
    x = rng.standard_normal((n_samples, dim))
    x *= scales               # in place: at 2^21 samples each copy of x is 0.27 GB
    w_true = rng.standard_normal(dim)
    y = x @ w_true + CONV_NOISE * rng.standard_normal(n_samples)
    return x, y


def micro_batches(x: np.ndarray, y: np.ndarray, count: int, size: int,
                  seed: int = CONV_ORDER_SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same `count` micro-batches, in the same order, for every n: only the update points differ."""
    order = np.random.default_rng(seed).permutation(len(y))[: count * size]
    xs, ys = x[order], y[order]
    return [(xs[i * size:(i + 1) * size], ys[i * size:(i + 1) * size]) for i in range(count)]


class QuadraticLoss:
    """L(w) = ½·mean((x·w − y)²) over the whole data set, kept as H, b, c: one loss costs 16² flops."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        n = len(y)
        self.h, self.b, self.c = x.T @ x / n, x.T @ y / n, float(y @ y) / (2 * n)
        self.w_opt = np.linalg.solve(self.h, self.b)

    @DIVERGING
    def __call__(self, w: np.ndarray) -> float:
        value = float(0.5 * w @ self.h @ w - self.b @ w + self.c)
        return value if np.isfinite(value) else float("inf")  # overflowed (inf − inf is nan): diverged

    def stability_lr(self) -> float:
        """Gradient descent on this quadratic diverges once the step size exceeds 2/λ_max."""
        return 2.0 / float(np.linalg.eigvalsh(self.h)[-1])


def mean_gradient(w: np.ndarray, xb: np.ndarray, yb: np.ndarray) -> np.ndarray:
    """∇ of ½·mean((x·w − y)²) over one micro-batch: what one backward of the mean loss puts into
    .grad (exercises.py's exercise 7 adds four of them up, as no_sync does)."""
    return xb.T @ (xb @ w - yb) / len(yb)
