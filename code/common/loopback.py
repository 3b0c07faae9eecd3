"""The loopback interface: where everything a standalone run starts listens and talks."""

from __future__ import annotations

import os
import sys


def loopback_interface() -> str:
    """The loopback network interface's name ("lo" on Linux, "lo0" on macOS), for gloo."""
    try:
        for name in sorted(os.listdir("/sys/class/net")):
            with open(f"/sys/class/net/{name}/flags", encoding="ascii") as fh:
                if int(fh.read().strip(), 16) & 0x8:  # IFF_LOOPBACK
                    return name
    except (OSError, ValueError):
        pass
    return "lo0" if sys.platform == "darwin" else "lo"
