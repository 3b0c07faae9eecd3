"""Problem 118: one training step of a 1F1B pipeline over send/recv, a stage per rank.

Judge it:  python practice/judge.py 118        (the statement: practice/118_pipeline_1f1b/README.md)
"""

from __future__ import annotations

import torch
import torch.distributed as dist  # noqa: F401  (dist.get_rank, dist.recv, dist.isend)


def train_step(stage: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor,
               micro_batches: int) -> torch.Tensor | None:
    """One step of this rank's stage under 1F1B; the last stage returns the batch's output (README)."""
    raise NotImplementedError("write train_step(stage, optimizer, batch, micro_batches) in 118's solution.py")
