"""The launcher's contract: results in rank order, failures named and never a hang, no leftovers."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from common.launcher import RankError, launch

PROBE = Path(__file__).parent / "probes" / "launch_probe.py"


def rank_and_sum(rank: int, world_size: int, n: int) -> tuple[int, int, list[float], str]:
    x = torch.arange(n, dtype=torch.float64) + rank
    dist.all_reduce(x)
    return rank, dist.get_world_size(), x.tolist(), os.environ["MASTER_ADDR"]


def raise_on_rank_1(rank: int, world_size: int) -> int:
    if rank == 1:
        raise ValueError("deliberate failure")
    dist.barrier()
    return rank


def skip_collective(rank: int, world_size: int) -> int:
    if rank != world_size - 1:  # the last rank skips the all-reduce the others wait in
        dist.all_reduce(torch.ones(1))
    return rank


def return_tensor(rank: int, world_size: int) -> dict:
    return {"t": torch.full((3,), float(rank)), "rank": rank}


def threads(rank: int, world_size: int) -> int:
    return torch.get_num_threads()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_results_come_back_in_rank_order(world: int) -> None:
    results = launch(rank_and_sum, world, 5)
    expected = [sum(r + i for r in range(world)) for i in range(5)]
    assert [r[0] for r in results] == list(range(world))
    assert all(r[1] == world and r[2] == expected and r[3] == "127.0.0.1" for r in results)
    assert multiprocessing.active_children() == []


def test_one_thread_per_rank_by_default_and_configurable() -> None:
    torch.set_num_threads(2)
    a = torch.randn(512, 512)
    (a @ a).sum()  # the parent's OpenMP team now exists: forking a 2-thread rank would hang
    assert launch(threads, 2) == [1, 1]
    assert launch(threads, 2, threads=2) == [2, 2]


def test_a_raising_rank_is_named_quickly_and_leaves_no_child() -> None:
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(raise_on_rank_1, 3, timeout_s=60)
    assert info.value.rank == 1
    assert "ValueError: deliberate failure" in str(info.value)
    assert "deliberate failure" in info.value.details  # the rank's traceback comes back too
    # The others are stuck in a barrier with a 60 s timeout: the parent must not wait for it.
    assert time.monotonic() - start < 20
    assert multiprocessing.active_children() == []


def test_a_skipped_collective_ends_in_a_timeout_not_a_hang() -> None:
    with pytest.raises(RankError) as info:
        launch(skip_collective, 2, timeout_s=1.5)
    assert info.value.rank == 0
    assert "timed out" in info.value.message.lower()
    assert multiprocessing.active_children() == []


def test_ranks_may_return_tensors() -> None:
    results = launch(return_tensor, 2)
    assert [r["t"].tolist() for r in results] == [[0.0] * 3, [1.0] * 3]


def test_bad_world_size_is_rejected() -> None:
    with pytest.raises(ValueError):
        launch(threads, 0)


def test_two_runs_started_together_both_work() -> None:
    procs = [subprocess.Popen([sys.executable, str(PROBE), "sum", "3"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
        assert "results [3.0, 3.0, 3.0]" in out


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split()[2] != "Z":
                    alive.append(pid)
        except FileNotFoundError:
            pass
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_leaves_no_process_behind() -> None:
    proc = subprocess.Popen([sys.executable, str(PROBE), "sleep", "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    children: list[int] = []
    deadline = time.monotonic() + 30
    while len(children) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
        children = [int(p) for p in out.split()]
    assert len(children) >= 3
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C: the whole group
    proc.wait(timeout=20)
    assert proc.returncode != 0
    time.sleep(0.5)
    assert _alive(children) == []
