"""WRONG on purpose (problem 116): no_sync catches whatever is raised in its block ("so that syncing
is restored"): the flag does come back, but the caller never sees its exception."""

from __future__ import annotations

import contextlib
from typing import Iterator

from _myddp_116 import MyDDP as _Right


class MyDDP(_Right):
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        previous, self.sync_enabled = self.sync_enabled, False
        try:
            yield
        except Exception:                                  # WRONG: swallows the caller's exception
            pass
        finally:
            self.sync_enabled = previous
