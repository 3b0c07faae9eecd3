"""WRONG on purpose (problem 116): finish_gradient_sync also divides by the number of micro-batches
accumulated (the loss scaling of README hint 3, done a second time: the judge's losses are already
each micro-batch's share)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from _myddp_116 import MyDDP as _Right


class MyDDP(_Right):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.micro_batches = 1

    def forward(self, *args: Any) -> Any:
        if not self.sync_enabled:
            self.micro_batches += 1                        # counts the micro-batches inside no_sync
        return super().forward(*args)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        with super().no_sync():
            yield

    def finish_gradient_sync(self) -> None:
        for _, flat, _ in self.handles:
            flat /= self.micro_batches                     # WRONG: the loss was already scaled
        super().finish_gradient_sync()
        self.micro_batches = 1
