"""Placeholder until the timeline page lands (being written in another branch)."""

from __future__ import annotations

from pathlib import Path


def write_timeline(directory: Path) -> Path:
    path = directory / "timeline.html"
    path.write_text("<!DOCTYPE html><html><body><p>timeline</p></body></html>", encoding="utf-8")
    return path
