"""The figures of lecture 14's scripts: each function takes what its script computed and returns a
matplotlib figure (Agg backend, never a window); the script saves it with `rep.save_figure`.

Every figure is titled with its setting (K, α, β, sizes), its axes carry units, and log axes get
readable ticks (1 KB, 1 MB; 1 µs, 1 ms) rather than bare powers of ten. A curve that diverged is
drawn up to where it blew up and marked so, never clipped silently.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.figures import new_figure
from common.units import fmt_bytes, fmt_time
from lecture14.costmodel import COMPARED_ALLREDUCES

BROADCAST = algorithm("pipelined ring broadcast")


def _ticks(ax: Any, axis: str, fmt: Any) -> None:
    """Log-axis tick labels through `fmt` (a value -> text function); call after plotting. Minor
    ticks are labelled too when the axis spans less than 20× (else they would crowd)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    target.set_major_locator(LogLocator(base=10))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: fmt(v)))
    narrow = low > 0 and high / low < 20
    target.set_minor_formatter(FuncFormatter(lambda v, _pos: fmt(v)) if narrow else NullFormatter())


def _link_text(link: Link) -> str:
    return f"α = {link.alpha_s * 1e6:g} µs, β = {link.beta_Bps / 1e9:g} GB/s"


def broadcast_segments(k: int, n: float, link: Link, sim_times: dict[int, float], best: int) -> Any:
    """03 Part 3: pipelined ring broadcast time against the number of segments S."""
    fig, ax = new_figure(figsize=(6.4, 4.2))
    s_max = max(sim_times) if sim_times else best * 4
    grid = np.unique(np.geomspace(1, s_max, 300).astype(int))
    ax.plot(grid, [BROADCAST.time(k, n, link, int(s)) for s in grid], label="(K−2+S)(α + N/(Sβ))")
    ax.plot(list(sim_times), list(sim_times.values()), "o", label="tick-by-tick simulation")
    ax.axvline(best, color="grey", linestyle=":", label=f"best power of two: S = {best}")
    ax.axhline(n / link.beta_Bps, color="grey", linestyle="--", linewidth=0.8, label="N/β (the S ≫ K limit, "
                                                                                     "α = 0)")
    ax.set(xscale="log", yscale="log", xlabel="segments S", ylabel="broadcast time")
    _ticks(ax, "x", lambda v: f"{v:g}")
    _ticks(ax, "y", fmt_time)
    ax.set_title(f"pipelined ring broadcast: K = {k}, N = {fmt_bytes(n)}, {_link_text(link)}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def alpha_beta_sizes(k: int, link: Link, sizes: Sequence[float],
                     crossovers: dict[str, float | None]) -> Any:
    """04 Part 1: ring, tree and naive all-reduce time against message size, crossovers marked."""
    fig, ax = new_figure(figsize=(6.8, 4.4))
    grid = np.geomspace(min(sizes), max(sizes), 400)
    for name in COMPARED_ALLREDUCES:
        ax.plot(grid, [algorithm(name).time(k, float(x), link) for x in grid],
                label=name.removesuffix(" all-reduce"))
    offsets = [(8, -26), (-78, 10)]  # side by side they would overlap: right-below, left-above
    for (name, at), offset in zip(crossovers.items(), offsets * len(crossovers)):
        if at is None or not min(sizes) <= at <= max(sizes):
            continue
        t = algorithm("ring all-reduce").time(k, at, link)
        ax.plot([at], [t], "kx")
        ax.axvline(at, color="grey", linestyle=":", linewidth=0.8)
        ax.annotate(f"ring = {name}\n{fmt_bytes(at)}", (at, t), textcoords="offset points", xytext=offset,
                    fontsize=8)
    ax.set(xscale="log", yscale="log", xlabel="message size N per device (bytes)", ylabel="all-reduce time")
    _ticks(ax, "x", fmt_bytes)
    _ticks(ax, "y", fmt_time)
    ax.set_title(f"α-β model of all-reduce: K = {k}, {_link_text(link)}", fontsize=10)
    ax.legend(title="algorithm", fontsize=8)
    return fig


def gloo_fit(sizes: Sequence[int], runs: dict[int, dict[str, Any]], sweeps: int) -> Any:
    """04 Part 2: measured all-reduce times (median and range over sweeps) with the median fitted line."""
    fig, ax = new_figure(figsize=(6.4, 4.2))
    grid = np.geomspace(sizes[0], sizes[-1], 100)
    for k, run in runs.items():
        med, low, high = (np.asarray(run[key]) for key in ("median", "low", "high"))
        bars = ax.errorbar(sizes, med, yerr=[med - low, high - med], fmt="o", capsize=3,
                           label=f"{k} processes: median, bar = range")
        if run.get("fit") is not None:
            a, b = run["fit"]
            ax.plot(grid, a + b * grid, "-", color=bars.lines[0].get_color(), label=f"{k} processes: a + "
                                                                                    "b·N, median of the fits")
    ax.set(xscale="log", yscale="log", xlabel="bytes per process", ylabel="all-reduce time")
    from matplotlib.ticker import NullLocator

    ax.set_xticks(list(sizes), [fmt_bytes(n, binary=True) for n in sizes], fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())
    _ticks(ax, "y", fmt_time)
    ax.set_title(f"gloo all-reduce on this machine: median and range of {sweeps} sweeps per size",
                 fontsize=10)
    ax.legend(fontsize=8)
    return fig


def speedup(ks: Sequence[int], by_size: dict[str, Sequence[float]], t1_s: float, link: Link) -> Any:
    """05 Part 6: data-parallel speedup without overlap against the number of GPUs."""
    fig, ax = new_figure(figsize=(6, 4))
    for label, values in by_size.items():
        ax.plot(ks, values, marker="o", label=f"gradients {label}")
    ax.plot(ks, ks, "k:", label="ideal (K×)")
    ax.axhline(1, color="grey", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlabel="GPUs K", ylabel="speedup over one GPU (×)")
    from matplotlib.ticker import NullLocator

    ax.set_xticks(list(ks), [str(k) for k in ks])
    ax.xaxis.set_minor_locator(NullLocator())
    _ticks(ax, "y", lambda v: f"{v:g}×")
    ax.set_title(f"speedup T1 / (T1/K + T_comm): T1 = {t1_s * 1e3:g} ms, ring, {_link_text(link)}",
                 fontsize=9)
    ax.legend(fontsize=8)
    return fig


def async_curves(panels: Sequence[dict[str, Any]], workers: int, optimum: float, start: float,
                 setting: str) -> Any:
    """05 Part 5: loss against gradient computations, sync and async by staleness, one panel per lr.

    Each panel: {"lr": lr, "curves": {label: (computations, losses)}}; a curve whose last value is
    infinite diverged: it is drawn up to its last finite point, ended with an ✕ and labelled so."""
    fig, axes = new_figure(1, len(panels), figsize=(5.2 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for label, (xs, ys) in panel["curves"].items():
            xs, ys = np.asarray(xs, float), np.asarray(ys, float)
            ok = np.isfinite(ys) & (ys <= 1e3 * start)
            diverged = not ok.all() or ys[-1] > start
            (line,) = ax.plot(xs[ok], ys[ok], label=label + (" — diverged" if diverged else ""))
            if diverged and ok.any():
                last = np.flatnonzero(ok)[-1]
                ax.plot(xs[last], ys[last], "x", color=line.get_color(), markersize=9)
        ax.axhline(optimum, color="grey", linestyle="--", linewidth=0.8, label="optimum")
        ax.set(yscale="log", xlabel="gradient computations", title=f"lr = {panel['lr']:g}")
        _ticks(ax, "y", lambda v: f"{v:g}")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("training loss (least squares)")
    fig.suptitle(f"parameter server, {workers} workers, {setting}: sync (averages {workers}) vs async with "
                 "τ-old gradients;\n✕ = diverged (drawn until the loss passes 1000× the start)", fontsize=9,
                 y=1.04)
    return fig
