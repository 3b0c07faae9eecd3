"""What this torch build's gloo can do, asked once, never by catching a failed collective.

    ask_gloo()                                   # in the parent, before launch(...)
    if gloo_lacks("reduce_scatter") is None:     # in a rank. None: gloo has it; else why not
        dist.reduce_scatter(out, chunks)

Older gloo builds have no ReduceOp.AVG and no reduce_scatter (both arrived in 2025). Scripts that
teach with them fall back to what they mean (SUM then ÷ W; an all-reduce and one's own slice). The
question is put to a private one-rank gloo group in this process, where no peer can fail, so an
error there can only mean "not supported"; the answer is kept (functools.cache), so ranks forked
after the parent asked inherit it. Catching errors around a real collective instead would also
catch a peer that died or a bug in the rank, and turn it into a fallback that then hangs.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from common.launch.loopback import loopback_interface

OPS = ("avg", "reduce_scatter")


def gloo_lacks(op: str) -> str | None:
    """None if this torch's gloo runs `op` ("avg": all_reduce with ReduceOp.AVG; "reduce_scatter"),
    else the error it gives, in one line. NCCL has both: ask only for a gloo group."""
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}: one of {', '.join(OPS)}")
    return _probe()[op]


def ask_gloo() -> None:
    """Ask now, in the parent, before any rank starts: ranks forked later inherit the answers
    (a rank started otherwise asks once for itself, at its first question)."""
    _probe()


@functools.cache
def _probe() -> dict[str, str | None]:
    """Ask a one-rank gloo group (in-process store) for each operation, once. Its device is made on
    the loopback interface: gloo's default device listens on whatever the host name resolves to."""
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timedelta(seconds=10)
    options._devices = [dist.ProcessGroupGloo.create_device(interface=loopback_interface())]
    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, options)
    answers = {"avg": _try(_avg, group), "reduce_scatter": _try(_reduce_scatter, group)}
    del group  # joins gloo's threads now: a later fork must not copy them half-alive
    return answers


def _avg(group: dist.ProcessGroup) -> None:
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    group.allreduce([torch.ones(2)], opts).wait()


def _reduce_scatter(group: dist.ProcessGroup) -> None:
    group.reduce_scatter([torch.empty(2)], [[torch.ones(2)]], dist.ReduceScatterOptions()).wait()


def _try(call: Callable[[dist.ProcessGroup], None], group: dist.ProcessGroup) -> str | None:
    try:
        call(group)
    except (RuntimeError, ValueError, NotImplementedError) as err:  # one rank, no peer: only "unsupported"
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return None
