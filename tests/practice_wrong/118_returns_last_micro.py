"""WRONG on purpose (problem 118): the last stage returns only the last micro-batch output, not all
concatenated."""

from __future__ import annotations

import torch
import torch.distributed as dist


def train_step(stage: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor,
               micro_batches: int) -> torch.Tensor | None:
    rank, world = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world - 1
    chunks = batch.tensor_split(micro_batches)     # every rank knows every micro-batch's shape
    optimizer.zero_grad()
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    results: list[torch.Tensor] = []
    sends = []            # isend: a blocking send would wait for a neighbour that is sending to us

    def receive(shape: torch.Size, src: int) -> torch.Tensor:
        t = torch.empty(shape, dtype=batch.dtype)
        dist.recv(t, src)
        return t

    def forward(m: int) -> None:
        h = chunks[m] if first else receive(chunks[m].shape, rank - 1).requires_grad_()
        y = stage(h)
        inputs[m], outputs[m] = h, y
        if last:
            results.append(y.detach())
        else:
            sends.append(dist.isend(y.detach(), rank + 1))

    def backward(m: int) -> None:
        h, y = inputs.pop(m), outputs.pop(m)           # popped: the activation is freed after this
        if last:   # micro-batch m's part of the batch's mean: the parts add up to loss = mean(y²)
            (y.square().sum() / batch.numel()).backward()
        else:
            y.backward(receive(y.shape, rank + 1))
        if not first:
            sends.append(dist.isend(h.grad, rank - 1))

    warmup = min(world - rank - 1, micro_batches)
    for m in range(warmup):                            # fill: the stages below need work first
        forward(m)
    for i in range(micro_batches - warmup):            # steady: one forward, one backward
        forward(warmup + i)
        backward(i)
    for m in range(micro_batches - warmup, micro_batches):   # drain
        backward(m)
    for work in sends:
        work.wait()
    optimizer.step()
    return results[-1] if last else None
