"""What one rank does through torch.distributed, counted: `with counting() as counts:` wraps the
point-to-point calls and the collectives inside the block (bytes each send carries and to whom,
receives, collective calls with their tensors' dtype and size), then calls the real function.
Both `dist.<name>` and `distributed_c10d.<name>` are wrapped, so code that calls either (and
`P2POp(dist.isend, ...)` / `batch_isend_irecv`, DDP's comm hooks) is seen. The practice judge
uses it to see what a student's rank did; the handbook checks use it to weigh what a comm hook
all-reduces. Everything is put back when the block ends.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

POINT_TO_POINT = ("send", "isend", "recv", "irecv")
COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter",
               "all_gather_object", "broadcast_object_list")


@dataclass
class Counts:
    """What one rank did through torch.distributed while counting."""

    sent_bytes: int = 0
    sends: int = 0
    destinations: set[int] = field(default_factory=set)
    received_bytes: int = 0
    collectives: dict[str, int] = field(default_factory=dict)
    # Each collective call whose first argument is a tensor: (name, dtype, bytes of that tensor).
    tensors: list[tuple[str, str, int]] = field(default_factory=list)

    def collective_calls(self, *names: str) -> int:
        return sum(self.collectives.get(n, 0) for n in (names or self.collectives))


def _tensor_and_peer(args: tuple, kwargs: dict, peer_keys: tuple[str, ...]) -> tuple[torch.Tensor, int | None]:
    tensor = args[0] if args else kwargs.get("tensor")
    peer = args[1] if len(args) > 1 else next((kwargs[k] for k in peer_keys if kwargs.get(k) is not None), None)
    return tensor, peer


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count this rank's sends (bytes, destinations), receives and collective calls in the block."""
    counts = Counts()
    originals: dict[str, Any] = {}
    depth = [0]  # torch's own calls inside a counted one (send -> isend, *_object -> all_gather) don't count

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return original(*args, **kwargs)
            if name in ("send", "isend"):
                tensor, peer = _tensor_and_peer(args, kwargs, ("dst", "group_dst"))
                counts.sends += 1
                counts.sent_bytes += tensor.numel() * tensor.element_size()
                counts.destinations.add(peer)
            elif name in ("recv", "irecv"):
                tensor, _ = _tensor_and_peer(args, kwargs, ("src", "group_src"))
                counts.received_bytes += tensor.numel() * tensor.element_size()
            else:
                counts.collectives[name] = counts.collectives.get(name, 0) + 1
                first = args[0] if args else kwargs.get("tensor")
                if isinstance(first, torch.Tensor):
                    counts.tensors.append((name, str(first.dtype).removeprefix("torch."),
                                           first.numel() * first.element_size()))
            depth[0] += 1
            try:
                return original(*args, **kwargs)
            finally:
                depth[0] -= 1
        return counted

    for name in POINT_TO_POINT + COLLECTIVES:
        originals[name] = getattr(c10d, name)
        patched = wrap(name, originals[name])
        # Both names: students call dist.isend, and P2POp / batch_isend_irecv compare with c10d's.
        setattr(c10d, name, patched)
        setattr(dist, name, patched)
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(c10d, name, original)
            setattr(dist, name, original)
