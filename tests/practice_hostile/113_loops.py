"""Problem 113 that never returns: assign_buckets forks a child that sleeps, writes the file named by
$JUDGE_TEST_STARTED (so a test knows it is running) and spins. The test then kills the judge
(SIGTERM, or SIGKILL) and looks for anything left."""

from __future__ import annotations

import os
import time


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
    with open(os.environ["JUDGE_TEST_STARTED"], "w") as f:
        f.write(str(os.getpid()))
    while True:
        pass
