"""What one rank does through torch.distributed, counted below the names a program can import.

    with counting() as counts:
        ring_allreduce(tensor)
    counts.sent_bytes, counts.destinations, counts.collectives      # {"all_reduce": 2, ...}

However a call is spelled (`dist.send`, `from torch.distributed import isend`, `P2POp` +
`batch_isend_irecv`, an imported `all_reduce`, DDP's comm hooks), torch.distributed ends it in a
method of the process group object: `ProcessGroup.send`, `.recv`, `.allreduce`, `.allgather`, ….
`counting()` replaces those methods on the class for the block, so every message and collective is
seen once, under the name students know ("allreduce" is counted as "all_reduce"), while the Python
functions stay what they were (`batch_isend_irecv` checks `op.op is isend`, which a patched
`dist.isend` breaks). Object collectives show as the tensor collectives they are made of
(`all_gather_object`: two all_gathers). Collectives that torch's C++ code starts by itself (DDP's
reducer without a comm hook) never pass through Python and are not counted.

Two checks for code that would hide its traffic: `installed()` says whether the counting methods
are still in place, and `Counts.unseen` is how many operations reached a process group without
passing through them. Every group numbers its operations (its sequence number), so a method put
back by hand, or a functional collective (`torch.distributed._functional_collectives`,
`torch.ops.c10d_functional`), shows there even though no method saw it. The practice judge uses
all of it to see what a student's rank did; the handbook checks weigh what a comm hook all-reduces.
Everything is put back when the block ends.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import ProcessGroup

# ProcessGroup method -> (the torch.distributed name it serves, which argument holds its input
# tensors). Older and newer releases name some methods differently; those missing are skipped.
METHODS: dict[str, tuple[str, int | None]] = {
    "send": ("send", 0), "recv": ("recv", 0), "recv_anysource": ("recv", 0),
    "allreduce": ("all_reduce", 0), "allreduce_coalesced": ("all_reduce_coalesced", 0),
    "broadcast": ("broadcast", 0), "reduce": ("reduce", 0),
    "allgather": ("all_gather", 1), "allgather_coalesced": ("all_gather_coalesced", 1),
    "all_gather_single": ("all_gather_into_tensor", 1), "_allgather_base": ("all_gather_into_tensor", 1),
    "all_gather_single_coalesced": ("all_gather_into_tensor_coalesced", 1),
    "allgather_into_tensor_coalesced": ("all_gather_into_tensor_coalesced", 1),
    "reduce_scatter": ("reduce_scatter", 1), "reduce_scatter_single": ("reduce_scatter_tensor", 1),
    "_reduce_scatter_base": ("reduce_scatter_tensor", 1),
    "reduce_scatter_single_coalesced": ("reduce_scatter_tensor_coalesced", 1),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor_coalesced", 1),
    "alltoall": ("all_to_all", 1), "all_to_all_single": ("all_to_all_single", 1),
    "alltoall_base": ("all_to_all_single", 1), "gather": ("gather", 1), "scatter": ("scatter", 1),
    "barrier": ("barrier", None), "monitored_barrier": ("monitored_barrier", None),
}
POINT_TO_POINT = ("send", "recv", "recv_anysource")
WRAPPED = tuple(m for m in METHODS if m in ProcessGroup.__dict__)
# Taken now, before any program runs: the group's own operation counter, and the methods as torch made them.
_ORIGINALS = {m: ProcessGroup.__dict__[m] for m in WRAPPED}
_SEQUENCE = getattr(ProcessGroup, "_get_sequence_number_for_group", None)


@dataclass
class Counts:
    """What one rank did through torch.distributed while counting."""

    sent_bytes: int = 0
    sends: int = 0
    destinations: set[int] = field(default_factory=set)
    receives: int = 0
    received_bytes: int = 0
    collectives: dict[str, int] = field(default_factory=dict)
    # Each collective call: (name, dtype of its input, bytes of its input tensors).
    tensors: list[tuple[str, str, int]] = field(default_factory=list)
    operations: int = 0            # operations the counted calls ran on their groups
    unseen: int | None = None      # operations the groups ran that no counted method saw (None: unknown)

    def collective_calls(self, *names: str) -> int:
        return sum(self.collectives.get(n, 0) for n in (names or self.collectives))


_active: list[Counts] = []
_lock = threading.Lock()           # DDP's hooks may call in from autograd's threads
_wrappers: dict[str, Callable[..., Any]] = {}


def _tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a tensor, or a (nested) list of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _global_rank(group: ProcessGroup, group_rank: Any) -> int:
    try:
        return c10d.get_global_rank(group, int(group_rank))
    except (ValueError, RuntimeError, TypeError):   # a group torch does not know: its own numbering
        return int(group_rank)


def _record(method: str, group: ProcessGroup, args: tuple, kwargs: dict) -> None:
    name, which = METHODS[method]
    values = list(args) + list(kwargs.values())
    tensors = _tensors(values[which]) if which is not None and len(values) > which else []
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    with _lock:
        for counts in _active:
            if method == "send":
                counts.sends += 1
                counts.sent_bytes += nbytes
                counts.destinations.add(_global_rank(group, values[1]))
            elif method in POINT_TO_POINT:
                counts.receives += 1
                counts.received_bytes += nbytes
            else:
                counts.collectives[name] = counts.collectives.get(name, 0) + 1
                if tensors:
                    counts.tensors.append((name, str(tensors[0].dtype).removeprefix("torch."), nbytes))


def _wrap(method: str) -> Callable[..., Any]:
    original = getattr(ProcessGroup, method)       # the bound-less builtin: call it with the group

    def counted(self: ProcessGroup, *args: Any, **kwargs: Any) -> Any:
        _record(method, self, args, kwargs)
        before = _sequence(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            # what the call ran on the group (gloo's reduce_scatter runs two operations)
            ran = 1 if before is None else max(1, (_sequence(self) or 0) - before)
            with _lock:
                for counts in _active:
                    counts.operations += ran

    counted.__name__ = counted.__qualname__ = method
    counted.__doc__ = original.__doc__
    return counted


def installed() -> bool:
    """Whether every counting method is in place on ProcessGroup (False outside a block, or when
    the code inside put a method of its own, or torch's, back)."""
    return bool(_wrappers) and all(ProcessGroup.__dict__.get(m) is w for m, w in _wrappers.items())


def _sequence(group: ProcessGroup) -> int | None:
    """The number of operations `group` has run, or None where its backend does not keep one."""
    if _SEQUENCE is None:
        return None
    try:
        return int(_SEQUENCE(group))
    except (RuntimeError, TypeError):
        return None


def _sequence_total() -> dict[Any, int] | None:
    """Each live group's operation number, or None where a backend does not keep one."""
    try:
        numbers = {group: _sequence(group) for group in list(c10d._world.pg_map)}
    except AttributeError:
        return None
    return None if any(n is None for n in numbers.values()) else numbers  # type: ignore[return-value]


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count this rank's sends (bytes, destinations), receives and collective calls in the block."""
    counts = Counts()
    before = _sequence_total()
    with _lock:
        if not _active:
            for method in WRAPPED:
                _wrappers[method] = _wrap(method)
                setattr(ProcessGroup, method, _wrappers[method])
        _active.append(counts)
    try:
        yield counts
    finally:
        after = _sequence_total()
        if before is not None and after is not None:
            ran = sum(n - before.get(group, 0) for group, n in after.items())
            counts.unseen = max(0, ran - counts.operations)
        with _lock:
            _active.remove(counts)
            if not _active:
                for method, original in _ORIGINALS.items():
                    setattr(ProcessGroup, method, original)
                _wrappers.clear()
