"""The agreement rules of the notes' rows, as arithmetic on two values: ours rounded to the notes'
digits, within a factor of theirs, inside a bound they give. common/checker.py picks the rule a row
states (docs/rows.md) and decides the row with it."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from common.units import fmt_num


def rounded(value: float, places: int) -> Decimal:
    """`value` rounded half away from zero to `places` decimals (no binary-float surprises)."""
    return Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)


def compare(ours: Any, notes: Any, places: int | None, factor: float | None) -> tuple[bool, str, str]:
    """(agreed, rule, decision): ours rounded to `places` is the notes' figure; or within `factor`
    of it (only the notes' "about" values); or neither given: equal (to float arithmetic)."""
    if isinstance(ours, (bool, str)) or isinstance(notes, (bool, str)):
        agreed = ours == notes
        return agreed, "equal", f"{ours!r} {'is' if agreed else 'is not'} {notes!r}"
    ours, notes = float(ours), float(notes)
    if places is not None:
        agreed = rounded(ours, places) == rounded(notes, places)
        unit = f"{places} decimal place{'s' if places != 1 else ''}"
        return agreed, f"rounds to {unit}", (f"{fmt_num(ours, 10)} rounds to {rounded(ours, places)} at "
                                             f"{unit}; the notes print {fmt_num(notes, 10)}")
    if factor is not None:
        if not factor >= 1:
            raise ValueError(f"factor must be at least 1, got {factor}")
        low, high = sorted((notes / factor, notes * factor))
        agreed = low <= ours <= high
        return agreed, f"within a factor of {factor:g}", (
            f"{fmt_num(ours)} is {'inside' if agreed else 'outside'} {fmt_num(low)} … {fmt_num(high)}")
    agreed = math.isclose(ours, notes, rel_tol=1e-9, abs_tol=1e-12)
    return agreed, "exact", f"{fmt_num(ours, 10)} {'=' if agreed else '≠'} {fmt_num(notes, 10)}"


def next_round_figure(n: float) -> float:
    """The round figure after `n` that "N 多" stops below: 300 -> 400, 100 -> 200, 20 -> 30, 1.5 -> 2.5."""
    return n + 10.0 ** math.floor(math.log10(n))


def within_bound(ours: Any, name: str, limit: Any) -> tuple[bool, str, str]:
    """(agreed, rule, decision) for a bound the notes give ("under 3": below = 3; "300 多": n_odd)."""
    value = float(ours)
    if name == "n_odd":
        high = next_round_figure(limit)
        inside = limit <= value < high
        return inside, f"{limit:g}-odd: at least {limit:g}, below {high:g}", (
            f"{fmt_num(value, 6)} is {'inside' if inside else 'outside'} {limit:g} … {high:g}")
    if name == "below":
        return (
            value < limit,
            f"below {limit:g}",
            f"{fmt_num(value, 6)} {'<' if value < limit else '≥'} {limit:g}",
        )
    if name == "above":
        return (
            value > limit,
            f"above {limit:g}",
            f"{fmt_num(value, 6)} {'>' if value > limit else '≤'} {limit:g}",
        )
    low, high = limit
    inside = low <= value <= high
    return inside, f"between {low:g} and {high:g}", (
        f"{fmt_num(value, 6)} is {'inside' if inside else 'outside'} {low:g} … {high:g}")
