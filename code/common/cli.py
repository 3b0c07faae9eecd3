"""Command-line flags shared by every script, and the one way a script reports bad input.

Sizes take units: "64MB" (MB = 1e6 B), "256KiB" (KiB = 1024 B), "1e6" (bytes). Bad input ends
the script with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import Any, Callable

from common.costmodel import NOTES_LINK, Link

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


class UsageError(Exception):
    """Bad input from the user: reported as one line on stderr, exit status 2."""


def parse_size(text: str | float | int) -> int:
    """Bytes in a size such as "64MB", "256KiB", "1.5GB", "1e6" or 4096 (bytes). Must be > 0."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise UsageError(f"not a size: {text!r} (examples: 64MB, 256KiB, 1e6)")
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit not in _UNITS:
            raise UsageError(f"unknown unit {match.group(2)!r} in {text!r} (use B, KB, MB, GB, KiB, MiB, GiB)")
    nbytes = value * _UNITS[unit]
    if not math.isfinite(nbytes) or nbytes < 1:
        raise UsageError(f"size must be at least 1 byte, got {text!r}")
    return int(round(nbytes))


def _typed(convert: Callable[[str], object], what: str) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return convert(text)
        except UsageError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{what} expected, got {text!r}") from None
    parse.__name__ = what
    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise UsageError(f"must be an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"must be a number > 0, got {text!r}")
    return value


def _nonnegative_float(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise UsageError(f"must be a number >= 0, got {text!r}")
    return value


positive_int = _typed(_positive_int, "a positive integer")
positive_float = _typed(_positive_float, "a positive number")
nonnegative_float = _typed(_nonnegative_float, "a number >= 0")
size_bytes = _typed(parse_size, "a size")


def under_torchrun() -> bool:
    """True when torchrun (or another launcher) already made this process one rank of a group."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def quiet_unless_rank0() -> None:
    """Under torchrun rank 0 plays the parent and prints; the other ranks compute silently."""
    if under_torchrun() and os.environ.get("RANK") != "0" and sys.stdout is sys.__stdout__:
        sys.stdout = open(os.devnull, "w")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) rather than usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)

    def parse_args(self, *args: Any, **kwargs: Any) -> argparse.Namespace:  # type: ignore[override]
        """Under torchrun the world size is torchrun's: it replaces --world-size, so every part
        computes with the number of ranks that really run."""
        parsed = super().parse_args(*args, **kwargs)
        quiet_unless_rank0()  # from the first line a script prints (its title, before any launch)
        torchrun_world = os.environ["WORLD_SIZE"] if under_torchrun() else None
        if torchrun_world and hasattr(parsed, "world_size") and parsed.world_size != int(torchrun_world):
            if os.environ.get("RANK", "0") == "0":
                print(f"(under torchrun: --world-size is torchrun's {torchrun_world}, not {parsed.world_size})")
            parsed.world_size = int(torchrun_world)
        return parsed


def make_parser(
    doc: str | None,
    *,
    world_size: int | None = None,
    alpha_us: float | None = None,
    beta_gbs: float | None = None,
    size: str | None = None,
    real: bool = False,
    figs: bool = True,
) -> argparse.ArgumentParser:
    """A parser with the flags every script shares; pass a default to switch a flag on.

    --quick, --json are always there; --save-figs unless figs=False; --timeout-s when real=True.
    """
    first_line = (doc or "").strip().splitlines()[0] if doc else None
    parser = OneLineParser(description=first_line)
    if world_size is not None:
        parser.add_argument("--world-size", type=positive_int, default=world_size,
                            help=f"number of ranks / devices (default {world_size})")
    if alpha_us is not None:
        parser.add_argument("--alpha-us", type=nonnegative_float, default=alpha_us,
                            help=f"per-message latency α in µs (default {alpha_us:g})")
    if beta_gbs is not None:
        parser.add_argument("--beta-gbs", type=positive_float, default=beta_gbs,
                            help=f"link bandwidth β in GB/s, GB = 1e9 B (default {beta_gbs:g})")
    if size is not None:
        parser.add_argument("--size", type=size_bytes, default=parse_size(size),
                            help=f"message size with unit: 64MB, 256KiB, 1e6 bytes (default {size})")
    if real:
        parser.add_argument("--timeout-s", type=positive_float, default=None,
                            help="seconds a rank may wait in a collective before it fails")
    parser.add_argument("--quick", action="store_true",
                        help="the same code with shorter runs where there are any (smoke tests)")
    if figs:
        parser.add_argument("--save-figs", metavar="DIR", default=None,
                            help="write figures (PNG) into DIR")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="write the parts' results and the claims as JSON to PATH")
    return parser


def link_from_args(args: argparse.Namespace, name: str = "") -> Link:
    """The α-β link given by --alpha-us / --beta-gbs (the notes' link where a flag is absent)."""
    alpha = getattr(args, "alpha_us", None)
    beta = getattr(args, "beta_gbs", None)
    return Link(NOTES_LINK.alpha_s if alpha is None else alpha * 1e-6,
                NOTES_LINK.beta_Bps if beta is None else beta * 1e9, name)


def run_main(main: Callable[[], object]) -> None:
    """Run a script's main(): usage errors become one stderr line and exit 2; Ctrl-C exits 130."""
    try:
        main()
    except UsageError as err:
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
