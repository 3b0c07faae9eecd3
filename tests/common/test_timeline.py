"""common/timeline.py: the text charts (painted, sampled, shaded columns in framed rows) against
charts worked by hand, and the Gantt helpers against what they hand a matplotlib axis (a recording
stand-in: the bars' positions in ms, their colours, merging, order). The simulators' own charts are
tested with their modules (tests/lecture15/test_ddp_sim.py, tests/cs336/test_pipeline.py)."""

from __future__ import annotations

from typing import Any

import pytest

from common.timeline import Span, ascii_rows, gantt_row, gantt_text, painted, sampled, shaded


def chart(cells: Any, *rows: tuple[str, list[Span]]) -> list[str]:
    return ascii_rows(list(rows), cells)


def test_rows_are_framed_and_labels_padded_to_the_longest() -> None:
    lines = chart(lambda spans: ["x"] * len(spans), ("comm", [Span(0, "c", 0, 1)] * 2), ("backward", []))
    assert lines == ["comm     |xx|", "backward ||"]


def test_painted_shows_every_span_however_short_and_later_spans_on_top() -> None:
    cells = painted(10, 10.0, lambda s: s.label)
    spans = [Span(0, "c", 0.0, 6.0, label="a"), Span(0, "c", 2.0, 3.0, label="b"),
             Span(0, "c", 8.0, 8.01, label="t"),     # 1 ms of a 10 s chart: still one column
             Span(0, "c", 9.7, 12.0, label="z")]     # past the end: clipped, and its start in the last column
    assert cells(spans) == list("aabaaa  tz")


def test_sampled_shows_what_runs_at_each_columns_middle() -> None:
    cells = sampled(6, 1.0, lambda s: s.kind, idle=".")
    # columns' middles at 0.5, 1.5, ... 5.5 s
    spans = [Span(0, "F", 0.0, 1.0), Span(0, "B", 1.0, 1.4), Span(0, "B", 2.2, 4.5)]
    assert cells(spans) == list("F.BB..")     # 1.0-1.4 misses 1.5; a span ends before its end_s (4.5)


def test_shaded_says_how_busy_each_column_was() -> None:
    cells = shaded(5, 1.0)
    # busy 1.0, 0.6, 0.2, 0, then 0.95 s in the last column (which also takes what lies past the end)
    spans = [Span(0, "c", 0.0, 1.6), Span(0, "c", 2.8, 3.0), Span(0, "c", 4.05, 4.5), Span(0, "c", 4.5, 5.0)]
    assert cells(spans) == list("#+-.#")
    # the last column takes what lies past the chart's end (2.5 s here)
    assert shaded(2, 1.0)([Span(0, "c", 1.0, 1.5), Span(0, "c", 1.5, 3.5)]) == list(".#")


class Axis:
    """Records what a matplotlib axis is handed."""

    def __init__(self) -> None:
        self.bars: list[tuple[list[tuple[float, float]], tuple[float, float], dict]] = []
        self.texts: list[tuple[float, float, str]] = []

    def broken_barh(self, xs: list[tuple[float, float]], band: tuple[float, float], **style: Any) -> None:
        self.bars.append((list(xs), band, style))

    def text(self, x: float, y: float, s: str, **style: Any) -> None:
        self.texts.append((x, y, s))


SPANS = [Span(0, "F", 0.000, 0.002), Span(0, "F", 0.002, 0.003), Span(0, "B", 0.003, 0.005),
         Span(0, "F", 0.006, 0.007)]
COLOUR = {"F": "blue", "B": "orange"}.__getitem__


def by_colour(axis: Axis) -> dict[str, list[tuple[float, float]]]:
    return {style.get("facecolors", style.get("color")): xs for xs, _, style in axis.bars}


def test_gantt_bars_are_in_ms_one_collection_per_colour() -> None:
    axis = Axis()
    gantt_row(axis, 2.0, SPANS, lambda s: COLOUR(s.kind), height=0.5, legend={"blue": "forward"})
    assert by_colour(axis) == {"blue": [(0.0, 2.0), (2.0, 1.0), (6.0, 1.0)], "orange": [(3.0, 2.0)]}
    assert {band for _, band, _ in axis.bars} == {(1.75, 0.5)}          # centred on y
    assert [style["label"] for _, _, style in axis.bars] == ["forward", None]
    assert all(style["edgecolors"] == "white" for _, _, style in axis.bars)


def test_gantt_merge_joins_back_to_back_spans_of_one_colour_only() -> None:
    axis = Axis()
    gantt_row(axis, 0.0, SPANS, lambda s: COLOUR(s.kind), merge=True)
    assert by_colour(axis) == {"blue": [(0.0, 3.0), (6.0, 1.0)], "orange": [(3.0, 2.0)]}


def test_gantt_in_order_draws_each_span_itself_and_edge_none_uses_the_colour() -> None:
    axis = Axis()
    gantt_row(axis, 0.0, SPANS, lambda s: COLOUR(s.kind), in_order=True, edge=None)
    assert [(xs, style["color"]) for xs, _, style in axis.bars] == [
        ([(0.0, 2.0)], "blue"), ([(2.0, 1.0)], "blue"), ([(3.0, 2.0)], "orange"), ([(6.0, 1.0)], "blue")]


def test_gantt_text_is_written_at_each_bars_middle() -> None:
    axis = Axis()
    gantt_text(axis, 1.0, SPANS[2:], lambda s: s.kind)
    assert axis.texts == [(4.0, 1.0, "B"), (pytest.approx(6.5), 1.0, "F")]
