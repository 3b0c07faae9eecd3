"""A figure, made one way for every script and page: matplotlib on the Agg backend, so a figure is a
file (Report.save_figure writes it) and never a window that blocks. Imports nothing of ours: a pure
simulator may draw (lecture15/ddp_sim.gantt_figure) without loading the checker."""

from __future__ import annotations

from typing import Any


def new_figure(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """plt.subplots on the Agg backend: figures are files, never windows that block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
