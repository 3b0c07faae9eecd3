"""WRONG on purpose (problem 115): right answer, but by calling dist.all_reduce."""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_allreduce(tensor: torch.Tensor) -> None:
    dist.all_reduce(tensor)
