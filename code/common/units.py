"""Units and their formatting, defined once: sizes in bytes and times in seconds inside the code;
MB (10^6 B) and MiB (2^20 B), ms and µs only at the edges, where these functions print them."""

from __future__ import annotations

import math
from typing import Any

KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12        # the notes' MB/GB (and nccl-tests'): powers of 10
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40     # PyTorch's bucket_cap_mb, memory sizes: powers of 2


def fmt_num(value: Any, digits: int = 4) -> str:
    """Compact number: 4 significant digits, thousands separators for big integers."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int) and abs(value) >= 10**15:
        return f"{value:.{max(digits - 1, 1)}e}"  # never a 300-digit cell
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15
                                  and abs(value) >= 1000):
        return f"{int(value):,}"
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return f"{value:g}"
        if 1e-3 <= abs(value) < 1e6:
            return f"{value:.{digits}g}"
        return f"{value:.{max(digits - 1, 1)}e}"
    return str(value)


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded to 1e-9 ms: float noise off, for tables and claims."""
    return round(seconds * 1e3, 9)


def fmt_ms(seconds: float) -> str:
    """Seconds as milliseconds with two decimals, no unit ("7.50"): for columns headed "ms"."""
    return f"{seconds * 1e3:.2f}"


def fmt_time(seconds: float) -> str:
    """Seconds with a readable unit: 3.15 ms, 17.5 µs, 1.2 s."""
    s = abs(seconds)
    if s >= 1:
        return f"{seconds:.3g} s"
    if s >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if s >= 1e-6 or s == 0:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e9:.3g} ns"


def fmt_bytes(nbytes: float, binary: bool = False) -> str:
    """Bytes with a unit: powers of 1000 (KB, MB) or, with binary=True, of 1024 (KiB, MiB)."""
    base, units = ((1024, ["B", "KiB", "MiB", "GiB", "TiB"]) if binary
                   else (1000, ["B", "KB", "MB", "GB", "TB"]))
    value, unit = float(nbytes), units[0]
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            break
        value /= base
    return f"{value:.4g} {unit}"
