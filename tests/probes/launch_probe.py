"""A tiny real-process program for the launcher tests: `python launch_probe.py MODE [W] [TIMEOUT_S]`.

Modes: sum (every rank all-reduces its rank), sleep (print "ready", then every rank sleeps), and
the failures the launcher must name: raise, kill (SIGKILL), oom (an allocation that fails),
stall and busy (rank 1 stops responding, asleep or spinning, while the others wait in an
all-reduce), and rank 1 stopped by SIGSTOP: stop-start (before it joins the group), stop (in its
work, while the others wait in an all-reduce), stop-end (after it left the group, once the others
have delivered their results). Extra words on the command line are ignored. The same modes run
under torchrun.
"""

import sys
from pathlib import Path

# This checkout's code/, ahead of anything installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code"))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import os
import signal
import time

import torch
import torch.distributed as dist

from common.launch import launch
from common.script_end import run_main


def sum_ranks(rank: int, world_size: int) -> float:
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    return x.item()


def sleep_forever(rank: int, world_size: int) -> None:
    while True:  # Ctrl-C must still take every rank down
        time.sleep(0.1)


def fail(rank: int, world_size: int, how: str) -> float:
    if rank == 1:
        if how == "raise":
            raise ValueError("deliberate failure")
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "oom":
            torch.empty(2**62, dtype=torch.uint8)  # 4 EiB: the allocator refuses
        if how == "stall":
            time.sleep(3600)
        if how == "busy":
            while True:
                pass
        if how == "stop":
            stop_self()
    return sum_ranks(rank, world_size)


def stop_self() -> None:
    """SIGSTOP this rank, having written when to $PROBE_STOPPED_AT (time.monotonic(): one clock for
    every process on the machine). A test reads the time there: the stopped state itself lasts only
    until rank 0 has named the rank and ended it, which a test polling /proc on loaded cores missed."""
    path = os.environ.get("PROBE_STOPPED_AT")
    if path:
        with open(path, "w") as fh:
            fh.write(repr(time.monotonic()))
    os.kill(os.getpid(), signal.SIGSTOP)


def stop_rank_1_at(name: str, before: bool) -> None:
    """Rank 1 stops itself (SIGSTOP) just before, or just after, the launcher calls dist.<name>:
    the launcher's own calls, which no worker can reach."""
    real = getattr(dist, name)

    def stop_then_call(*args: object, **kwargs: object) -> object:
        if before and os.environ.get("RANK") == "1":
            stop_self()
        result = real(*args, **kwargs)
        if not before and os.environ.get("RANK") == "1":
            stop_self()
        return result

    setattr(dist, name, stop_then_call)


def main() -> None:
    mode = sys.argv[1]
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else None
    if mode == "sum":
        print("results", launch(sum_ranks, world))
    elif mode == "sleep":
        print("ready", flush=True)
        launch(sleep_forever, world)
    else:
        if mode == "stop-start":
            stop_rank_1_at("init_process_group", before=True)
        if mode == "stop-end":
            stop_rank_1_at("destroy_process_group", before=False)
        print("started", flush=True)
        print("results", launch(fail, world, mode, timeout_s=timeout))


if __name__ == "__main__":
    run_main(main)
