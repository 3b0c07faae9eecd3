"""WRONG on purpose (problem 116): no_sync sets the flag back to True when its block ends, not to the
value it had: a block nested in another turns syncing on while the outer one still runs."""

from __future__ import annotations

import contextlib
from typing import Iterator

from _myddp_116 import MyDDP as _Right


class MyDDP(_Right):
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        self.sync_enabled = False
        try:
            yield
        finally:
            self.sync_enabled = True                       # WRONG: the previous value, not True
