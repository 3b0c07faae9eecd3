"""What the tests of several lecture 14 scripts read from a run."""

from __future__ import annotations

import json
from pathlib import Path


def claims(path: Path) -> dict[str, dict]:
    """The run's decided rows of the notes' table, by id."""
    return {c["ref"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}
