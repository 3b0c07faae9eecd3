"""common/run_cost.py on a toy cost: the largest setting a refusal offers fits and one more does not,
and memory past the machine's share is refused. Each real script's own COST, and refusals through a
script's command line: tests/suite/test_script_costs.py."""

from __future__ import annotations

import argparse
import re

import pytest

from common import run_cost
from common.error_types import UsageError
from common.run_cost import Cost, Term


def _toy() -> Cost:
    return Cost([Term("1", 2.0, lambda a: 1), Term("W²·L", 0.01, lambda a: a.world_size**2 * a.layers)],
                memory=lambda a: 1e6 * a.layers)


def _defaults() -> dict[str, tuple[str, object]]:
    return {"world_size": ("--world-size", 4), "layers": ("--layers", 8)}


def test_the_largest_setting_offered_fits_and_one_more_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_cost, "cores", lambda: 2)
    monkeypatch.delenv("COURSE_MAX_MINUTES", raising=False)
    args = argparse.Namespace(world_size=40, layers=50)
    with pytest.raises(UsageError) as err:
        run_cost.check_cost(_toy(), args, _defaults())
    text = str(err.value)
    limits = re.search(r"at most --world-size (\d+) at these sizes, or --layers (\d+)", text)
    w, layers = (int(v) for v in limits.groups())
    fits = lambda **k: run_cost.wall_s(_toy(), argparse.Namespace(**{**vars(args), **k})) <= 300  # noqa: E731
    assert fits(world_size=w) and not fits(world_size=w + 1)
    assert fits(layers=layers) and not fits(layers=layers + 1)
    assert "0.01 s × W²·L" in text and text.startswith("--world-size 40 with --layers 50: about ")
    monkeypatch.setenv("COURSE_MAX_MINUTES", "1000")        # a longer budget admits it
    run_cost.check_cost(_toy(), args, _defaults())


def test_memory_beyond_the_machines_share_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_cost, "total_memory", lambda: 16 * 2**30)
    with pytest.raises(UsageError, match=r"--layers 20,000: about 18.6 GiB of memory, more than 50% of this "
                                         r"machine's 16.0 GiB, estimated; at most --layers 8,589"):
        run_cost.check_cost(_toy(), argparse.Namespace(world_size=4, layers=20_000), _defaults())
