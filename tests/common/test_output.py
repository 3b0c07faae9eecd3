"""Report.check_trained and mlp.Reference.refuse_still_weights (code/common/output.py, the rule in
code/common/trained_weights.py, code/cs336/mlp.py):
an "= one process" check of trained weights is judged against how far they moved in one process.

The mutation: the learning rate 1.001× in the ranks only (one process keeps it), so step 1's
output, loss and gradients stay equal and only the trained weights drift, by 1e-3 of their movement.
At the default depth and at the deepest the scripts accept (where the weights move some 3e-8, and
the drift is under the old absolute tolerance of 1e-9), the run must fail naming the trained
weights. One layer deeper, the setting is refused before any rank starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import assert_usage_error, run_patched

from common.trained_weights import MOVED_SHARE, movement_floor

# (script, the rank function launched, its optimizer's learning rate in mlp, what its line names)
SCRIPTS = {"cs336/05_parallel.py": ("strategies_worker", "LR_SGD", "DP"),
           "cs336/07_tensor_parallel.py": ("engines_worker", "LR_SGD", "TP by hand (05 Part 2)"),
           "cs336/08_pipeline_schedules.py": ("schedules_worker", "LR_SGD", "GPipe, M = 8"),
           "cs336/09_zero.py": ("zero_worker", "LR_ADAM", "ZeRO-1")}
# what the failing line says once step 1 is equal: only the trained weights differ
FAILED = re.compile(r"error: (.+) against one process: trained weights (\S+) = (\S+) × the \S+ they moved > ")
# The deepest --layers each accepts at its defaults (the next even depth is refused), and one deeper.
DEEPEST = {"cs336/05_parallel.py": (12, 14), "cs336/07_tensor_parallel.py": (12, 14),
           "cs336/08_pipeline_schedules.py": (12, 14)}

DRIFT = """
worker = module.{worker}
def drifting(*args, **kwargs):
    from cs336 import mlp
    mlp.{lr} *= 1.001      # in this rank only: the parent's one process keeps torch's step
    return worker(*args, **kwargs)
module.{worker} = drifting
"""


def _drifted(tmp_path: Path, script: str, args: list[str]) -> str:
    worker, lr, _ = SCRIPTS[script]
    return run_patched(tmp_path, script, DRIFT.format(worker=worker, lr=lr), args)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_drifting_update_fails_at_the_default(tmp_path: Path, script: str) -> None:
    found = FAILED.search(_drifted(tmp_path, script, []))
    assert found and found[1] == SCRIPTS[script][2], found
    assert float(found[3]) > 100 * MOVED_SHARE, found[0]     # about 1e-3: the drift, not round-off


@pytest.mark.parametrize("script", sorted(DEEPEST))
def test_a_drifting_update_fails_at_the_deepest_accepted_setting(tmp_path: Path, script: str) -> None:
    deepest, _ = DEEPEST[script]
    found = FAILED.search(_drifted(tmp_path, script, ["--layers", str(deepest)]))
    assert found and found[1] == SCRIPTS[script][2], found
    assert float(found[2]) < 1e-9, f"the old absolute tolerance would have failed it too: {found[0]}"


@pytest.mark.parametrize("script", sorted(DEEPEST))
def test_weights_that_barely_move_are_refused_before_work(script: str) -> None:
    _, deeper = DEEPEST[script]
    assert_usage_error(script, "--layers", str(deeper))


def test_the_floor_is_round_off_over_the_share() -> None:
    """MOVED_SHARE of the least movement judged is 64 units in the last place of the largest weight."""
    assert movement_floor(0.5, 2.0**-52) * MOVED_SHARE == pytest.approx(64 * 0.5 * 2.0**-52)
