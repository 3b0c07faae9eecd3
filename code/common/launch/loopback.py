"""The loopback interface: where everything a standalone run starts listens and talks."""

from __future__ import annotations

import ipaddress
import os
import socket
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


def is_loopback_host(host: str) -> bool:
    """Whether every address `host` names is a loopback one ("localhost", 127.0.0.1, ::1): then
    every rank that rendezvouses there runs on this machine. A name that does not resolve is not."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)
