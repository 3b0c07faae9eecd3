"""The flags shared by every script: one vocabulary, and the values each may take.

A flag that more than one script offers is defined once, in FLAGS below, with one name, one unit
and one validity rule; a script picks the flags it needs and gives their defaults
(`common.cli.make_parser`). Sizes take units: "64MB" (MB = 1e6 B), "256KiB" (KiB = 1024 B), "1e6"
(bytes); a value out of range is a usage error naming the flag.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from common.error_types import UsageError

DEFAULT_TIMEOUT_S = 30.0  # a lecture script's collectives take milliseconds; 30 s means "stuck"
TIMEOUT_RANGE_S = (1.0, 86_400.0)  # below 1 s a busy 2-core machine times out honest collectives
MAX_BYTES = 10**15  # 1 PB: larger sizes only overflow the models into nonsense
# A model-only script's flags go as far as its budget (common.model_bounds: Bound, MAX_MODEL_WORLD).

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


# ---- value types ------------------------------------------------------------------------------

def parse_size(text: str | float | int, minimum: int = 1, bare_unit: str = "") -> int:
    """Bytes in a size such as "64MB", "256KiB", "1.5GB", "1e6" or 4096. A bare number is in
    `bare_unit` (bytes unless told). Between `minimum` and 1 PB."""
    if isinstance(text, (int, float)):
        value, unit = float(text), bare_unit
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise UsageError(f"not a size: {text!r} (examples: 64MB, 256KiB, 1e6)")
        value, unit = float(match.group(1)), (match.group(2) or bare_unit).lower()
        if unit not in _UNITS:
            raise UsageError(f"unknown unit {match.group(2)!r} in {text!r} "
                             "(use B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB)")
    nbytes = value * _UNITS[unit]
    if not math.isfinite(nbytes) or nbytes > MAX_BYTES:
        raise UsageError(f"size {text!r} is larger than 1 PB")
    if round(nbytes) < minimum:
        raise UsageError(f"size must be at least {minimum} byte{'s' if minimum != 1 else ''}, got {text!r}")
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


def _number(text: str, low: float, high: float, low_open: bool) -> float:
    value = float(text)
    ok = (value > low if low_open else value >= low) and value <= high and math.isfinite(value)
    if not ok:
        bound = ">" if low_open else ">="
        raise UsageError(f"must be a number {bound} {low:g} and at most {high:g}, got {text!r}")
    return value


def _integer(text: str, low: int, high: int) -> int:
    value = int(text)
    if not low <= value <= high:
        raise UsageError(f"must be an integer from {low} to {high:,}, got {text!r}")
    return value


positive_int = _typed(lambda t: _integer(t, 1, 10**9), "a positive integer")
nonnegative_int = _typed(lambda t: _integer(t, 0, 2**31 - 1), "an integer >= 0")
positive_float = _typed(lambda t: _number(t, 0.0, 1e12, True), "a positive number")
# a model's compute time: from a nanosecond (below it seconds underflow to 0 and the ratios divide by it)
time_ms = _typed(lambda t: _number(t, 1e-6, 1e9, False), "a time in ms, 1e-6 (a nanosecond) to 1e9")
nonnegative_float = _typed(lambda t: _number(t, 0.0, 1e12, False), "a number >= 0")
size_bytes = _typed(parse_size, "a size")
# A DDP bucket cap: a bare number is MiB, as PyTorch's bucket_cap_mb; "25MB" is 25 × 10^6 bytes.
bucket_cap = _typed(lambda t: parse_size(t, minimum=0, bare_unit="mib"), "a bucket cap")


@dataclass(frozen=True)
class Flag:
    """One shared flag: its value type (with its validity rule), meaning and unit."""

    type: Callable[[str], object]
    help: str
    metavar: str | None = None
    dest: str | None = None  # where the value lands when its unit is not the flag name's


def ranged(what: str, low: float, high: float, low_open: bool = True) -> Callable[[str], object]:
    return _typed(lambda t: _number(t, low, high, low_open), what)


FLAGS: dict[str, Flag] = {
    "world_size": Flag(positive_int, "number of ranks (real scripts) or devices (models)", "N"),
    "alpha_us": Flag(ranged("a latency in µs", 0.0, 1e6, low_open=False),
                     "per-message latency α in µs", "US"),
    "beta_gbs": Flag(ranged("a bandwidth in GB/s", 1e-6, 1e6),
                     "link bandwidth β in GB/s (GB = 10^9 B)", "GBS"),
    "size": Flag(size_bytes, "message size with a unit: 64MB (10^6 B), 256KiB (2^10 B), 1e6 (bytes)",
                 "BYTES"),
    "bucket_cap_mb": Flag(bucket_cap, "DDP bucket cap: a bare number is MiB, as PyTorch's bucket_cap_mb; "
                          "or a size with a unit (25MB = 25 × 10^6 B); 0 = a bucket per gradient",
                          "MIB", "bucket_cap_bytes"),
    "first_bucket_cap_mb": Flag(bucket_cap, "cap of the first bucket (the last layers' gradients), "
                                "in the same units as --bucket-cap-mb", "MIB", "first_bucket_cap_bytes"),
    "seed": Flag(nonnegative_int, "random seed", "N"),
    "numbers": Flag(positive_int, "numbers per rank in every buffer shown", "N"),
    "steps": Flag(positive_int, "training steps", "N"),
    "batch": Flag(positive_int, "global batch size (samples, all ranks together)", "N"),
    "repeats": Flag(positive_int, "timed repeats (medians are reported)", "N"),
    # The practice judge's limit on one case (not --timeout-s: that is a rank's wait in a collective).
    "case_limit_s": Flag(ranged("seconds", 1.0, 600.0, low_open=False),
                         "time limit of each case in seconds, 1 to 600", "S"),
    "timing_steps": Flag(positive_int, "timed steps (medians are reported)", "N"),
    "lr": Flag(ranged("a learning rate", 0.0, 1e3), "learning rate", "LR"),
    "peak_tflops": Flag(ranged("TFLOP/s", 1e-6, 1e9), "peak compute of one device in TFLOP/s", "TFLOPS"),
    "layers": Flag(positive_int, "number of layers", "N"),
    "width": Flag(positive_int, "layer width (features)", "N"),
    "micro_batches": Flag(positive_int, "micro-batches per step", "M"),
    "micro_batch_size": Flag(positive_int, "samples (or sequences) per micro-batch", "N"),
    "gpu_memory_gb": Flag(ranged("GB", 1e-3, 1e9), "memory of one GPU in GB (GB = 10^9 B)", "GB"),
    "tp": Flag(positive_int, "tensor-parallel ways", "N"),
    "pp": Flag(positive_int, "pipeline stages", "N"),
    "dp": Flag(positive_int, "data-parallel replicas", "N"),
    # Timelines for the ecosystem's viewer: Chrome-trace JSON files (Perfetto, chrome://tracing) into DIR.
    "trace": Flag(str, "write the timelines as Chrome-trace JSON (Perfetto, chrome://tracing) into DIR",
                  "DIR"),
    # the suite's tools (reproduce.py, bench/): which scripts to run
    "only": Flag(str, "run only the scripts whose name contains this text (or one of several: a,b)", "TEXT"),
}


# A flag's metavar from its type, where the script gives none: what the value is counted in
_METAVARS = {id(positive_int): "N", id(nonnegative_int): "N", id(size_bytes): "BYTES", id(time_ms): "MS"}
# a number's unit from the flag's name (--step-ms: MS)
_UNIT_SUFFIXES = {"_ms": "MS", "_us": "US", "_gbs": "GBS", "_s": "S", "_mb": "MIB", "_factor": "X"}


def metavar_for(option: str, kind: Any) -> str | None:
    """N for a count, BYTES for a size, MS/US/GBS/S for a number named in that unit; None: argparse's."""
    if id(kind) in _METAVARS:
        return _METAVARS[id(kind)]
    dest = option.lstrip("-").replace("-", "_")
    return next((unit for suffix, unit in _UNIT_SUFFIXES.items() if dest.endswith(suffix)), None)
