"""A timeline defined once: the span type, the ASCII chart and the Gantt chart that every simulator draws.

    from common.timeline import Span, ascii_rows, painted, gantt_row
    spans = [Span(0, "compute", 0.0, 1e-3, label="p0"), Span(1, "comm", 1e-3, 2e-3, index=0)]
    print(*ascii_rows([("backward", spans[:1]), ("comm", spans[1:])], painted(64, 2e-3, lambda s: "█")),
          sep="\\n")

Lecture 15's DDP model (lecture15/ddp_sim.py: a compute and a comm stream) and CS336's pipeline
schedules (cs336/pipeline.py: a row per device) both hand their spans to these. Pure: no torch;
matplotlib only inside the Gantt helpers, on an axis the caller made (common.figures.new_figure).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence


class Span(NamedTuple):
    """One thing running on one row of a timeline, from start_s to end_s (seconds).

    `row`: the stream or device it ran on; `kind`: what ran ('compute'/'comm' in DDP's model, 'F'/'B'
    in a pipeline); `index`: which one (a bucket, a micro-batch); `chunk`: the pipeline's virtual
    stage (0 elsewhere); `label`: a name to print. A named tuple, not a dataclass: a pipeline's
    chart makes one per pass (10^5), and a tuple is several times cheaper to make.
    """

    row: int
    kind: str
    start_s: float
    end_s: float
    index: int | None = None
    label: str = ""
    chunk: int = 0


# A row's cells from its spans: one character per column.
Cells = Callable[[Sequence[Span]], list[str]]


def ascii_rows(rows: Sequence[tuple[str, Sequence[Span]]], cells: Cells) -> list[str]:
    """One framed line per row, `label |cells|`, labels padded to the longest."""
    pad = max(len(label) for label, _ in rows)
    return [f"{label.ljust(pad)} |{''.join(cells(spans))}|" for label, spans in rows]


def painted(columns: int, full_s: float, char: Callable[[Span], str]) -> Cells:
    """Each span paints the columns it covers (rounded; a short span still gets one), later spans over
    earlier ones: a chart where every span, however short, is seen (DDP's buckets)."""
    def cells(spans: Sequence[Span]) -> list[str]:
        out = [" "] * columns
        for span in spans:
            first = min(round(columns * span.start_s / full_s), columns - 1)
            last = max(round(columns * span.end_s / full_s), first + 1)
            out[first:min(last, columns)] = [char(span)] * (min(last, columns) - first)
        return out
    return cells


def sampled(columns: int, step_s: float, char: Callable[[Span], str], idle: str = ".") -> Cells:
    """A column shows the span running at its middle (spans in time order, none overlapping): exact
    when every span is at least a column wide (a pipeline at full detail)."""
    def cells(spans: Sequence[Span]) -> list[str]:
        out, i = [], 0
        for c in range(columns):
            t = (c + 0.5) * step_s
            while i < len(spans) and spans[i].end_s <= t:
                i += 1
            out.append(char(spans[i]) if i < len(spans) and spans[i].start_s <= t else idle)
        return out
    return cells


def shaded(columns: int, step_s: float) -> Cells:
    """A column shows how busy its row was in it: '#' ≥ 90 %, '+' ≥ 50 %, '-' some, '.' idle (a chart
    scaled down below one column per span)."""
    def cells(spans: Sequence[Span]) -> list[str]:
        busy = [0.0] * columns
        for span in spans:
            start, end = span.start_s, span.end_s
            c = min(int(start / step_s), columns - 1)
            while start < end and c < columns:
                edge = (c + 1) * step_s if c < columns - 1 else end
                busy[c] += min(end, edge) - start
                start, c = edge, c + 1
        return ["#" if b >= 0.9 * step_s else "+" if b >= 0.5 * step_s else "-" if b > 0 else "."
                for b in busy]
    return cells


def gantt_row(ax: Any, y: float, spans: Sequence[Span], colour: Callable[[Span], str], height: float = 0.8,
              linewidth: float = 0.0, merge: bool = False, legend: dict[str, str] | None = None,
              edge: str | None = "white", in_order: bool = False) -> None:
    """One row of a Gantt chart on a matplotlib axis, centred on `y`, ms on the x axis: a bar per span
    coloured by `colour(span)`, outlined in `edge` (None: in its own colour, matplotlib's width, so
    back-to-back bars read as one). `merge` joins back-to-back spans of one colour (thousands of
    passes would otherwise be thousands of patches); `legend` names colours for the axis' legend.
    Bars of one colour are drawn together (one collection per colour) unless `in_order`."""
    if in_order:   # each span its own bar, later ones over earlier ones' outlines
        for span in spans:
            gantt_row(ax, y, [span], colour, height, linewidth, False, legend, edge)
        return
    bars: dict[str, list[tuple[float, float]]] = {}
    for span in spans:
        same = bars.setdefault(colour(span), [])
        if merge and same and abs(sum(same[-1]) - span.start_s * 1e3) < 1e-9:
            same[-1] = (same[-1][0], span.end_s * 1e3 - same[-1][0])
        else:
            same.append((span.start_s * 1e3, (span.end_s - span.start_s) * 1e3))
    for name, xs in bars.items():
        label = (legend or {}).get(name)
        if edge is None:
            ax.broken_barh(xs, (y - height / 2, height), color=name, label=label)
        else:
            ax.broken_barh(xs, (y - height / 2, height), facecolors=name, edgecolors=edge,
                           linewidth=linewidth, label=label)


def gantt_text(ax: Any, y: float, spans: Sequence[Span], text: Callable[[Span], str]) -> None:
    """Each span's text written in the middle of its bar (white, small: for charts of few spans)."""
    for span in spans:
        ax.text((span.start_s + span.end_s) / 2 * 1e3, y, text(span), ha="center", va="center",
                fontsize=7, color="white")
