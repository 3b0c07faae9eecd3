"""03_overlap.py Part 2's figure: the modelled step against the bucket cap (matplotlib on Agg)."""

from __future__ import annotations

import argparse

from common.output import new_figure
from lecture15.ddp_sim import Timeline


def sweep_figure(args: argparse.Namespace, caps: list[float], results: dict[tuple[str, str], list[Timeline]],
                 no_overlap: dict[tuple[str, str], float], columns: list[tuple[str, str]]) -> object:
    """Step / step without overlap against the cap, one line per (model, link)."""
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
    ax.set_title(f"bucket cap sweep, calibrated compute: K = {args.world_size}; fast α = {args.alpha_us:g} µs, "
                 f"β = {args.beta_gbs:g} GB/s; slow α = {args.slow_alpha_us:g} µs, β = {args.slow_beta_gbs:g} GB/s",
                 fontsize=8)
    ax.legend(fontsize=8)
    return fig
