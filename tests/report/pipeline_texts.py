"""The texts report/pipeline.html shows a number as, written here with Python's own formatting
(common/units.py, f-strings) as 06_pipeline.py prints the same quantity: the tests of the page
(test_pipeline_model.py, test_pipeline_reference.py, test_pipeline_page.py) compare the page's text
with these, so a digit the page rounds otherwise (JavaScript rounds a tie up, Python to even) fails.
"""

from __future__ import annotations

from typing import Any

from common.units import fmt_num, fmt_time, ms


def printed_in(setting: dict[str, Any]) -> int:
    """The part of 06 that prints this setting's step and bubble: 1 (GPipe and 1F1B, equal stages),
    4 (its interleaved table), 5 (a slow stage); a setting 06 cannot print takes its nearest part's."""
    return 5 if setting["slow"] is not None else 4 if setting["schedule"] == "interleaved" else 1


def ms_text(seconds: float) -> str:
    """Part 1's stage table, Part 3's simulated bubble, Part 4's bubble ms: fmt_num of ms()."""
    return fmt_num(ms(seconds))


def step_text(setting: dict[str, Any], seconds: float) -> str:
    """Part 1's 'makespan 330 ms' (fmt_time), Part 5's 'makespan ms' column."""
    return ms_text(seconds) + " ms" if printed_in(setting) == 5 else fmt_time(seconds)


def pct_text(share: float, setting: dict[str, Any] | None = None) -> str:
    """Part 1's 'bubble 27.27 %' (.2f); a table's cell otherwise (Parts 2-5: fmt_num)."""
    if setting is not None and printed_in(setting) == 1:
        return f"{100 * share:.2f} %"
    return fmt_num(100 * share) + " %"


def held_text(held: float) -> str:
    """Activations in micro-batches: Part 1's and Part 4's cells (fmt_num)."""
    return fmt_num(held)
