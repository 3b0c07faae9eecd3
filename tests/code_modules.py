"""The modules of code/ by their dotted names, read from the files (no import): the one listing the
scans of the house use (tests/suite/test_layers.py, tests/suite/test_where_tests_live.py)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

CODE = Path(__file__).resolve().parents[1] / "code"


@cache
def code_modules() -> dict[str, Path]:
    """Every .py file under code/ by its dotted module name (a package by its __init__.py)."""
    out = {}
    for path in sorted(CODE.rglob("*.py")):
        parts = path.relative_to(CODE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out
