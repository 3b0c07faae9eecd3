"""Limits by cost (common/run_cost.py): every real script states what a run costs here, and a run
that would not finish in minutes, or would not fit in memory, is refused before any work with one
line that says the estimate, what it grows with and the largest setting that fits: checked through
the scripts' own COST and command lines (the module on a toy cost: tests/common/test_run_cost.py)."""

from __future__ import annotations

import argparse

import pytest
from conftest import ROOT, python
from test_runtime import _parser_of

from common import cli, flags, run_cost
from common.error_types import UsageError
from common.run_cost import Cost
from reproduction.suite import scripts

REAL = [s.name for s in scripts() if s.real]


def _refused(relpath: str, *args: str, env: dict[str, str] | None = None) -> str:
    proc = python(ROOT / "code" / relpath, *args, timeout=60, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", (proc.stdout[-500:], proc.stderr)
    return lines[0]


@pytest.mark.parametrize("name", REAL)
def test_every_real_script_states_its_cost(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cost = _parser_of(name, monkeypatch).cost
    assert isinstance(cost, Cost) and cost.terms, f"{name}: make_parser(..., cost=COST) missing"


def test_the_issues_run_is_refused_with_its_estimate_and_the_limit() -> None:
    """--world-size 64 --layers 64 --batch 64 was accepted and did not finish in 600 s."""
    line = _refused("cs336/05_parallel.py", "--world-size", "64", "--layers", "64", "--batch", "64")
    assert line.startswith("05_parallel.py: error: --world-size 64 with --layers 64 --batch 64: about ")
    # the one-line stderr contract: the cost's terms and the largest value allowed
    assert "W³·L·steps" in line and "the limit is 5 min: at most --world-size " in line
    assert "COURSE_MAX_MINUTES" in line


def test_an_allocation_sized_flag_is_refused_before_the_ranks_start() -> None:
    line = _refused("cs336/05_parallel.py", "--batch", "999999999")
    # the one-line stderr contract: the estimate and the largest value allowed
    assert "--batch 999,999,999: about" in line and "of memory" in line and "at most --batch" in line


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1e3"])
def test_garbage_in_the_minutes_is_a_usage_error(value: str) -> None:
    refused = _refused("cs336/05_parallel.py", env={"COURSE_MAX_MINUTES": value})
    assert f"COURSE_MAX_MINUTES='{value}'" in refused


def test_a_models_world_size_is_not_the_ranks_a_script_starts() -> None:
    """04_alpha_beta's --world-size is Part 1's and 3's K; Part 2 always starts 2 and 4 ranks: K = 256
    (the notes reach it) passes the machine's rank limit, K = 5,000 the models' bound does not."""
    proc = python(ROOT / "code/lecture14/04_alpha_beta.py", "--world-size", "256", "--mfu", "2", timeout=60)
    assert proc.returncode == 2 and "--mfu is a fraction of peak" in proc.stderr  # past the parser's checks
    assert "4,096" in _refused("lecture14/04_alpha_beta.py", "--world-size", "5000")


# Integer flags of real scripts that do not make a run longer or larger (each says why): every
# other one must raise the script's COST.
NOT_SIZES = {"seed": "picks data, not its amount", "tokens_per_gpu": "Part 3's model only",
             "ps_workers": "bounded by the script (400)", "bucket_cap_bytes": "how gradients are grouped",
             "min_bytes": "the sweep's start: fewer sizes, not more", "size": "bytes counted, not allocated",
             "tp": "a factor of --world-size (checked): it splits the ranks, adds none"}


def _defaults_of(parser) -> argparse.Namespace:
    namespace = argparse.Namespace(**{a.dest: cli._NOT_GIVEN for a in parser._quick_actions()})
    args = argparse.ArgumentParser.parse_args(parser, [], namespace)
    parser._fill_defaults(args)
    return args


@pytest.mark.parametrize("name", REAL)
def test_every_size_flag_is_in_the_cost_and_a_billion_is_refused(name: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--numbers, --batch and the like at 999999999 failed only after the ranks started."""
    parser = _parser_of(name, monkeypatch)
    base, cost = _defaults_of(parser), parser.cost
    size_types = (flags.positive_int, flags.nonnegative_int, flags.size_bytes, flags.bucket_cap)
    sized = [a for a in parser._actions
             if a.option_strings and a.type in size_types and a.dest not in ("world_size",)]
    defaults = parser._setting_defaults(also=frozenset({"timeout_s"}))
    for action in sized:
        big = argparse.Namespace(**{**vars(base), action.dest: 999_999_999})
        if action.dest in NOT_SIZES:
            continue
        moves = cost.cpu_s(big) > cost.cpu_s(base) or (cost.memory and cost.memory(big) > cost.memory(base))
        assert moves, f"{name} {action.option_strings[0]} changes no term of COST: how does it scale the run?"
        with pytest.raises(UsageError):
            run_cost.check_cost(cost, big, defaults)
