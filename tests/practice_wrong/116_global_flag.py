"""WRONG on purpose (problem 116): the flag is a module-level global, so one model's no_sync stops
every model's synchronisation."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from _myddp_116 import MyDDP as _Right

_SYNC = True                                               # WRONG: one flag for every MyDDP


class MyDDP(_Right):
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        global _SYNC
        previous, _SYNC = _SYNC, False
        try:
            yield
        finally:
            _SYNC = previous

    def _on_grad_ready(self, p: torch.nn.Parameter) -> None:
        if _SYNC:
            self._count(p)
