"""common/costmodel/link.py: a link refuses nonsense, and a measured line is fitted in relative error and read
as the ring's α and β."""

from __future__ import annotations

import math

import pytest

from common.costmodel.link import Link, fit_line_relative, ring_alpha_beta_from_line


@pytest.mark.parametrize("bad", [dict(alpha_s=-1, beta_Bps=1), dict(alpha_s=0, beta_Bps=0),
                                 dict(alpha_s=math.nan, beta_Bps=1)])
def test_link_rejects_nonsense(bad: dict) -> None:
    with pytest.raises(ValueError):
        Link(**bad)


def test_relative_fit_through_origin_and_bad_input() -> None:
    sizes = [1e3, 1e5, 1e7]
    a, b = fit_line_relative(sizes, [2e-9 * n for n in sizes], through_origin=True)
    assert a == 0 and b == pytest.approx(2e-9, rel=1e-12)
    a, b = fit_line_relative([1.0, 2.0], [1.0, 1.0])
    assert (a, b) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-12))
    for xs, ys in (([1.0], [1.0]), ([1.0, 1.0], [1.0, 2.0]), ([1.0, 2.0], [1.0, 0.0])):
        with pytest.raises(ValueError):
            fit_line_relative(xs, ys)
    with pytest.raises(ValueError):
        ring_alpha_beta_from_line(1, 1e-4, 1e-9)
