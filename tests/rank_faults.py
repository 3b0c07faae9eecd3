"""A fault staged in one rank, for the tests that check a rank's error is never swallowed: the nth
call of torch.distributed.<call> in rank `fault_rank` raises `error` instead of running.

    launch(worker_with_fault, k, fault_rank, "reduce_scatter", 1, RuntimeError, worker, *worker_args)
    # -> RankError naming fault_rank and "RuntimeError: injected into reduce_scatter call 1"
"""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
import torch.distributed

from common.launcher import RankError, launch


def worker_with_fault(rank: int, world_size: int, fault_rank: int, call: str, nth: int, error: type[Exception],
                      worker: Callable[..., Any], *args: Any) -> Any:
    """`worker(rank, world_size, *args)`, with the nth torch.distributed.<call> of one rank failing."""
    if rank == fault_rank:
        real, count = getattr(torch.distributed, call), [0]

        def failing(*a: Any, **k: Any) -> Any:
            count[0] += 1
            if count[0] == nth:
                raise error(f"injected into {call} call {nth}")
            return real(*a, **k)
        setattr(torch.distributed, call, failing)  # this rank's own module: the fork copied it
    return worker(rank, world_size, *args)


def assert_named_at_once(k: int, fault_rank: int, call: str, nth: int, error: type[Exception],
                         worker: Callable[..., Any], *args: Any, timeout_s: float = 60) -> None:
    """The launch fails within half the timeout, naming the rank and the staged error: not a
    timeout of the others (a fallback that swallowed the error leaves them waiting for it)."""
    start = time.monotonic()
    with pytest.raises(RankError) as caught:
        launch(worker_with_fault, k, fault_rank, call, nth, error, worker, *args, timeout_s=timeout_s)
    assert caught.value.rank == fault_rank, str(caught.value)
    assert f"{error.__name__}: injected into {call} call {nth}" in str(caught.value), str(caught.value)
    assert time.monotonic() - start < timeout_s / 2, f"the others waited for the timeout: {caught.value}"
