"""Lecture 15 §5's convergence toy for 05_scaling.py Part 3: a noisy linear regression trained with
gradients synchronised every n micro-batches, against large-batch training, and its figure.

Pure numpy (no torch, no processes). Imported by 05_scaling.py and tests/test_lecture15_05_ex.py.
"""

from __future__ import annotations

import numpy as np

from common.output import Report, new_figure

CONV_DIM = 16             # features
CONV_NOISE = 0.5          # label noise: the best reachable loss is about noise² / 2
CONV_DATA_SEED = 0        # data and true weights
CONV_ORDER_SEED = 1       # the order in which samples are cut into micro-batches
# A step size far above 2/λ_max overflows float64 within a few updates: that run has diverged, its
# loss is inf from there on, and numpy is told not to warn about the overflow it was asked for.
_DIVERGING = np.errstate(over="ignore", invalid="ignore")


def make_regression(n_samples: int, dim: int = CONV_DIM, seed: int = CONV_DATA_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Features with scales 0.5 … 2 (an ill-conditioned but easy problem) and noisy linear labels."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(0.5, 2.0, dim)
    x = rng.standard_normal((n_samples, dim)) * scales
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
    """L(w) = ½·mean((x·w − y)²) over the whole data set, kept as H, b, c so one loss costs 16² flops."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        n = len(y)
        self.h, self.b, self.c = x.T @ x / n, x.T @ y / n, float(y @ y) / (2 * n)
        self.w_opt = np.linalg.solve(self.h, self.b)

    @_DIVERGING
    def __call__(self, w: np.ndarray) -> float:
        value = float(0.5 * w @ self.h @ w - self.b @ w + self.c)
        return value if np.isfinite(value) else float("inf")  # overflowed (inf − inf is nan): diverged

    def stability_lr(self) -> float:
        """Gradient descent on this quadratic diverges once the step size exceeds 2/λ_max."""
        return 2.0 / float(np.linalg.eigvalsh(self.h)[-1])


def mean_gradient(w: np.ndarray, xb: np.ndarray, yb: np.ndarray) -> np.ndarray:
    """∇ of ½·mean((x·w − y)²) over one micro-batch."""
    return xb.T @ (xb @ w - yb) / len(yb)


@_DIVERGING
def train_accumulating(batches: list[tuple[np.ndarray, np.ndarray]], lr: float, sync_every: int,
                       loss: QuadraticLoss, eval_every: int = 1) -> tuple[np.ndarray, list[float]]:
    """SGD that adds up `sync_every` micro-batch gradients before each update, as no_sync does.

    The sum is not divided by n (DDP's no_sync accumulates into .grad): the update is lr·Σg, so the
    step is n times a single micro-batch's. A trailing group shorter than n is applied as it is.
    Returns the final weights and the full-data loss after every `eval_every` micro-batches.
    """
    w = np.zeros(loss.h.shape[0])
    accumulated = np.zeros_like(w)
    curve = [loss(w)]
    for i, (xb, yb) in enumerate(batches, start=1):
        accumulated += mean_gradient(w, xb, yb)
        if i % sync_every == 0 or i == len(batches):
            w = w - lr * accumulated
            accumulated[:] = 0.0
        if i % eval_every == 0:
            curve.append(loss(w))
    return w, curve


@_DIVERGING
def train_large_batch(batches: list[tuple[np.ndarray, np.ndarray]], lr: float, group: int,
                      loss: QuadraticLoss) -> np.ndarray:
    """Plain large-batch SGD: the mean gradient over `group` micro-batches joined into one batch."""
    w = np.zeros(loss.h.shape[0])
    for start in range(0, len(batches), group):
        chunk = batches[start:start + group]
        xb = np.concatenate([b[0] for b in chunk])
        yb = np.concatenate([b[1] for b in chunk])
        w = w - lr * mean_gradient(w, xb, yb)
    return w


def plot_curves(rep: Report, curves: dict[str, dict[int, list[float]]], eval_every: int,
                 titles: dict[str, str]) -> None:
    if rep.figure_dir() is None:
        return
    fig, axes = new_figure(1, len(curves), figsize=(4.2 * len(curves), 3.4), sharey=True)
    for ax, (name, by_n) in zip(axes, curves.items()):
        for n, curve in by_n.items():
            values = np.asarray(curve, dtype=float)
            bad = ~np.isfinite(values) | (values > 1e3)      # diverged: drawn up to where it leaves the axis
            stop = int(np.argmax(bad)) if bad.any() else len(values)
            steps = np.arange(len(values)) * eval_every
            line, = ax.plot(steps[:stop], values[:stop], label=f"n = {n}" + (" (diverged)" if bad.any() else ""))
            if bad.any() and stop > 0:
                ax.plot(steps[stop - 1], values[stop - 1], "x", color=line.get_color(), markersize=9)
        ax.set_yscale("log")
        ax.set_ylim(top=1e3)
        ax.set_title(titles.get(name, name), fontsize=9)
        ax.set_xlabel("micro-batches seen")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("full-data loss (½ mean squared error)")
    fig.suptitle("synchronise every n micro-batches: least squares, 16 features; × = diverged (loss > 1e3)",
                 fontsize=9)
    rep.save_figure(fig, "convergence")
