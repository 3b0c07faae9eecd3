"""Shared runtime of the course scripts: launcher, α-β cost model, command-line flags and output.

Only this package starts processes, picks rendezvous ports, sets timeouts and threads; scripts
import what they need from here and keep the mechanism they teach in their own file.

Every runnable file imports this package first, before torch: from then on a Ctrl-C (even one that
lands while torch is still importing, a second or two) ends with one word on stderr instead of a
traceback, and the exit status stays the usual one (killed by SIGINT: 130 in a shell).
`common.exits.run_main` takes over once main() runs.
"""

from __future__ import annotations

import sys


def _quiet_interrupt_hook(kind, value, tb, _previous=sys.excepthook):  # type: ignore[no-untyped-def]
    if issubclass(kind, KeyboardInterrupt):
        try:
            sys.stderr.write("interrupted\n")
        except Exception:  # noqa: BLE001 - stderr itself may be gone
            pass
        return  # Python then ends the process by SIGINT, so a shell sees 130
    _previous(kind, value, tb)


sys.excepthook = _quiet_interrupt_hook
