"""WRONG on purpose (problem 114): average_gradients all-reduces p.grad / world, a temporary:
the result is thrown away."""

from __future__ import annotations

import random

import torch.distributed as dist


def partition_indices(size, world_size, rank, seed):
    order = list(range(size))
    random.Random(seed).shuffle(order)
    base, extra = divmod(size, world_size)
    start = rank * base + min(rank, extra)
    return order[start:start + base + (1 if rank < extra else 0)]


def average_gradients(model):
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:
            continue
        dist.all_reduce(p.grad / world, op=dist.ReduceOp.SUM)


def train_step(model, optimizer, loss_fn, inputs, targets):
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    average_gradients(model)
    optimizer.step()
    return loss.item()
