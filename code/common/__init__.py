"""Shared runtime of the course scripts: launcher, α-β cost model, command-line flags and output.

Only this package starts processes, picks rendezvous ports, sets timeouts and threads; scripts
import what they need from here and keep the mechanism they teach in their own file.

Every runnable file imports this package first, before torch: from then on a Ctrl-C, a SIGTERM or
a SIGHUP (even one that lands while torch is still importing, a second or two) ends with one word
on stderr instead of a traceback, and exit 130, 143 or 129 as run_main gives later (nothing to clean
up yet: no rank started, no file written).
`common.script_end.run_main` takes over once main() runs. What lands before the script's first line
is Python's own (and its site-packages' .pth files', which may print a "Fatal Python error").
"""

from __future__ import annotations

import os
import signal
import sys

WORDS = {int(signal.SIGINT): "interrupted", int(signal.SIGTERM): "terminated",
         **({int(signal.SIGHUP): "hung up"} if hasattr(signal, "SIGHUP") else {})}


class Terminated(BaseException):
    """SIGTERM or SIGHUP (`signum`), raised where the main thread is, so that `finally` blocks
    clean up as for Ctrl-C (common.script_end turns it into its word and status)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = int(signum)


def raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def _quiet_signal_hook(kind, value, tb, _previous=sys.excepthook):  # type: ignore[no-untyped-def]
    """An import stopped by a signal: its word and 128 + its number, as common.script_end.run_main (under
    torchrun only rank 0 says it, as later)."""
    signum = signal.SIGINT if issubclass(kind, KeyboardInterrupt) else getattr(value, "signum", None)
    if signum is None:
        _previous(kind, value, tb)
        return
    from common.launch import is_rank0
    try:
        if is_rank0():
            sys.stderr.write(f"{WORDS[int(signum)]}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr itself may be gone
        pass
    os._exit(128 + int(signum))


sys.excepthook = _quiet_signal_hook
for _sig in (signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])):
    if signal.getsignal(_sig) is signal.SIG_DFL:   # ignored (nohup) stays ignored
        signal.signal(_sig, raise_terminated)
