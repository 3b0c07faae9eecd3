"""Problem 113 that prints too much (from the review: the judge read all of it into memory, 842 MB
for 300 MB printed, and an endless print loop ran to the case's time limit):
  exercise 3 (cap 12 MB)   prints in an endless loop                       -> FAIL at 16 MiB, not timed out
  all-reduce time, K = 16  writes 300 MiB, ignoring the errors, answers right -> FAIL: printed too much
Every other bucket case answers right and passes: what one case printed is not the next one's."""

import os

from lecture15.ddp_sim import assign_buckets as _model_buckets


def assign_buckets(sizes, cap, first=None):
    while cap == 12 * 10**6:
        print("debug", sizes, cap)
    return _model_buckets(sizes, cap, first)


def allreduce_time(nbytes, world_size, alpha_s, beta_Bps):
    if world_size == 16:
        for _ in range(300):
            try:
                os.write(1, b"y" * (1 << 20) + b"\n")
            except OSError:
                pass
    if world_size == 1:
        return 0.0
    return 2 * (world_size - 1) * (alpha_s + nbytes / (world_size * beta_Bps))


def timeline(*args):
    return None
