"""The launcher: the one place that starts ranks, picks their rendezvous, sets their timeouts and
threads, and brings their results and failures back to the parent. Scripts import from here only.

    from common.launch import launch, RankError
    results = launch(worker, 4, tensor_size)     # one return value per rank, in rank order

What it holds: `launcher.py` (`launch`: fork W ranks, or be one rank of torchrun's group),
`rank_side.py` what each rank does between the fork and its exit, `parent_side.py` what the parent
watches and whom it blames, `rank_failure.py` what a failed rank reports (`Failure`) and what
`launch` raises (`RankError`), `torchrun.py` whether torchrun started this process,
`torchrun_rank.py` and `torchrun_blame.py` a rank under torchrun and whom it blames,
`staged_failure.py` a failure a script stages on purpose and the check that it failed that way,
`capabilities.py` what this torch's gloo can do, `machine.py` this machine's limits (cores,
memory, ranks), `loopback.py` the loopback interface the ranks talk over.

A name is loaded with the module that holds it, when it is first asked for: `common.cli` asks
`under_torchrun` and `check_world_size` without importing torch, which a model-only script never
imports (`launch` and the rank side do).
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module of this package that holds it.
_FACE = {
    # starting ranks
    "launch": "launcher", "launch_expecting_failure": "launcher", "preload_for_ddp": "launcher",
    "choose_backend": "launcher", "rank_device": "launcher", "capture_stderr": "rank_side",
    # the failures it reports
    "RankError": "rank_failure", "Failure": "rank_failure",
    "skipped_collective": "staged_failure", "MAX_STAGED_RANKS": "staged_failure",
    # torchrun
    "under_torchrun": "torchrun", "is_rank0": "torchrun", "quiet_unless_rank0": "torchrun",
    "check_environment": "torchrun",
    # what this machine and this torch allow
    "cores": "machine", "total_memory": "machine", "max_local_ranks": "machine",
    "positive_env_int": "machine", "check_course_environment": "machine", "check_world_size": "machine",
    "check_backend": "machine", "gloo_lacks": "capabilities", "ask_gloo": "capabilities",
}

__all__ = sorted(_FACE)


def __getattr__(name: str) -> Any:
    """The public `name`, from its module (imported now if it was not yet)."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_FACE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
