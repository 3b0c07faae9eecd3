"""Problem 119: ZeRO-1 by hand: Adam whose state each rank keeps for its shard of the parameters only.

Judge it:  python practice/judge.py 119        (the statement: practice/119_zero_by_hand/README.md)
"""

from __future__ import annotations

import torch
import torch.distributed as dist  # noqa: F401  (dist.reduce_scatter_single, dist.all_gather_single)

from cs336.mlp import flatten_padded, unflatten  # noqa: F401  (the flat vector, padded; and back)


class ZeroAdam:
    """Adam over a data-parallel group; exp_avg and exp_avg_sq hold this rank's shard of m and v."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        raise NotImplementedError("write ZeroAdam (its __init__ and step) in 119's solution.py")

    def step(self) -> None:
        """Reduce-scatter the gradients, update my shard with Adam, all-gather the parameters."""
        raise NotImplementedError("write ZeroAdam.step() in 119's solution.py")
