"""Lecture 15's figures, drawn only when a script is given --save-figs (matplotlib on Agg, imported
then): no lesson here, only axes and labels. 02_buckets.py Part 3, 03_overlap.py Part 2, 05_scaling.py
Part 3."""

from __future__ import annotations

import argparse

import numpy as np

from common.figures import new_figure
from common.units import fmt_bytes
from lecture15.ddp_sim import Timeline


def small_tensors_figure(counts: list[int], slowest: dict[int, float], ranks: list[dict[int, list[float]]],
                         elements: int) -> object:
    """02 Part 3: all-reduce time of the same floats against the number of tensors they are cut into."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = new_figure(figsize=(5, 3.5))
    ax.loglog(counts, [slowest[n] * 1e3 for n in counts], "o-", label="median (slower rank)")
    ax.fill_between(counts, [min(min(r[n]) for r in ranks) * 1e3 for n in counts],
                    [max(max(r[n]) for r in ranks) * 1e3 for n in counts], alpha=0.25, label="range")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("number of tensors (same total floats)")
    ax.set_ylabel("all-reduce time (ms)")
    ax.set_title(f"gloo on this CPU, 2 ranks, {elements:,} float32 ({fmt_bytes(4 * elements)}) in total",
                 fontsize=9)
    ax.legend(fontsize=8)
    return fig


def sweep_figure(args: argparse.Namespace, caps: list[float], results: dict[tuple[str, str], list[Timeline]],
                 no_overlap: dict[tuple[str, str], float], columns: list[tuple[str, str]]) -> object:
    """03 Part 2: step / step without overlap against the cap, one line per (model, link)."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = new_figure(figsize=(7, 4))
    x = [c if c > 0 else 0.03 for c in caps]
    for col in columns:
        ax.plot(x, [results[col][i].step_s / no_overlap[col] for i in range(len(caps))], marker="o",
                label=f"{col[0]}, {col[1]} link")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8, label="no overlap (25 MiB buckets)")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v < 0.05 else f"{v:g}"))
    ax.set_xlabel("bucket_cap_mb (MiB; cap 0 = a bucket per gradient, drawn at the left edge)")
    ax.set_ylabel("step / step without overlap (ratio)")
    ax.set_title(f"bucket cap sweep, calibrated compute: K = {args.world_size}; fast α = {args.alpha_us:g} "
                 f"µs, β = {args.beta_gbs:g} GB/s; slow α = {args.slow_alpha_us:g} µs, "
                 f"β = {args.slow_beta_gbs:g} GB/s",
                 fontsize=8)
    ax.legend(fontsize=8)
    return fig


def convergence_figure(curves: dict[str, dict[int, list[float]]], eval_every: int,
                       titles: dict[str, str]) -> object:
    """05 Part 3: the full-data loss against micro-batches seen, one panel per learning rate."""
    fig, axes = new_figure(1, len(curves), figsize=(4.2 * len(curves), 3.4), sharey=True)
    for ax, (name, by_n) in zip(axes, curves.items()):
        for n, curve in by_n.items():
            values = np.asarray(curve, dtype=float)
            bad = ~np.isfinite(values) | (values > 1e3)      # diverged: drawn up to where it leaves the axis
            stop = int(np.argmax(bad)) if bad.any() else len(values)
            steps = np.arange(len(values)) * eval_every
            line, = ax.plot(steps[:stop], values[:stop], label=f"n = {n}" + (" (diverged)" * bool(bad.any())))
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
    return fig
