"""A tiny real-process program for the launcher tests: `python launch_probe.py MODE [W]`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code"))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import time

import torch
import torch.distributed as dist

from common.cli import run_main
from common.launcher import launch


def sum_ranks(rank: int, world_size: int) -> float:
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    return x.item()


def sleep_forever(rank: int, world_size: int) -> None:
    while True:  # Ctrl-C must still take every rank down
        time.sleep(0.1)


def main() -> None:
    mode = sys.argv[1]
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if mode == "sum":
        print("results", launch(sum_ranks, world))
    elif mode == "sleep":
        print("ready", flush=True)
        launch(sleep_forever, world)


if __name__ == "__main__":
    run_main(main)
