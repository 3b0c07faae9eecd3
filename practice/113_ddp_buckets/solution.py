"""Problem 113: DDP's gradient buckets and the communication timeline. Write the three functions.

Judge it:  python practice/judge.py 113        (the statement: practice/113_ddp_buckets/README.md)
"""

from __future__ import annotations


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_cap_bytes: int | None = None) -> list[list[int]]:
    """The buckets DDP forms, as lists of parameter indices; bucket 0 holds the last-registered
    parameters. `param_bytes` is in registration order; caps are bytes."""
    raise NotImplementedError("write assign_buckets(param_bytes, cap_bytes, first_cap_bytes) in 113's "
                              "solution.py")


def allreduce_time(nbytes: int, world_size: int, alpha_s: float, beta_Bps: float) -> float:
    """Seconds one ring all-reduce of `nbytes` takes on `world_size` ranks over an α-β link."""
    raise NotImplementedError("write allreduce_time(nbytes, world_size, alpha_s, beta_Bps) in 113's "
                              "solution.py")


def timeline(param_bytes: list[int], buckets: list[list[int]], ready_s: list[float], world_size: int,
             alpha_s: float, beta_Bps: float) -> tuple[list[tuple[float, float]], float, float]:
    """([(start_s, end_s) of each bucket's all-reduce, in bucket order], step_end_s, exposed_s)."""
    raise NotImplementedError("write timeline(param_bytes, buckets, ready_s, world_size, alpha_s, beta_Bps) "
                              "in 113's solution.py")
