"""A fault staged in one rank, for the tests that check a rank's error is never swallowed: the nth
call of torch.distributed.<call> in rank `fault_rank` raises `error` instead of running.

    launch(worker_with_fault, k, fault_rank, "reduce_scatter", 1, RuntimeError, worker, *worker_args)
    # -> RankError naming fault_rank and "RuntimeError: injected into reduce_scatter call 1"
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any, Callable

import pytest
import torch.distributed
from conftest import ROOT, popen

from common.launch import RankError, launch


def worker_with_fault(rank: int, world_size: int, fault_rank: int, call: str, nth: int,
                      error: type[Exception], worker: Callable[..., Any], *args: Any) -> Any:
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


def signal_a_rank_during(relpath: str, part: int, rank: int, sig: int, *args: str, world_size: int = 4,
                         after_s: float = 0.0) -> subprocess.CompletedProcess:
    """Run code/<relpath> with `args`; once it prints Part `part`'s header, wait for that part's
    ranks (the only children then: earlier launches are joined), then `after_s` more, and send
    `sig` to `rank`. The ranks are found in /proc (Linux), in the order they were forked: rank
    order. (A rank stopped before its group has formed holds the others in start-up, whose
    timeout is minutes: give a stop time for the group to form.)"""
    proc = popen(ROOT / "code" / relpath, *args)   # forked after torch's import (conftest), unbuffered
    seen = ""
    try:
        while f"== Part {part}:" not in seen:
            line = proc.stdout.readline()
            assert line, f"the script ended before Part {part}: {seen[-500:]}"
            seen += line
        deadline = time.monotonic() + 30
        while len(_children(proc.pid)) < world_size:
            assert time.monotonic() < deadline, f"Part {part}'s ranks never started"
            time.sleep(0.01)
        time.sleep(after_s)
        os.kill(sorted(_children(proc.pid))[rank], sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, seen + out, err)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []
