"""Every file the code, the tests, the docs and the pages name by its path exists: a moved or split
module or test file leaves no text pointing at its old place (the pages told students which test
holds their numbers, and named a file split since)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = {".py", ".md", ".toml", ".js", ".j2", ".css"}
# a path from the checkout's root, or from code/ (how the scripts and docs name modules)
ROOTED = re.compile(r"(?<![\w/.])((?:code|tests|docs|bench|practice)/[\w./-]+\.(?:py|md|toml|js|j2|css))\b")
IN_CODE = re.compile(r"(?<![\w/.])((?:common|cs336|lecture14|lecture15|report|reproduction)/[\w./-]+"
                     r"\.(?:py|toml|js|j2|css))\b")
MADE_UP = {"code/x.py", "lecture15/example.py",   # names the tests invent for their own checks
           "common/not_a_module_xyz.py", "report/model.py", "reproduction/cache.py",
           "common/launch/process.py"}


def named_paths() -> dict[str, list[str]]:
    """Each path named in a text file of the checkout -> the files that name it."""
    found: dict[str, list[str]] = {}
    for path in ROOT.rglob("*"):
        if path.suffix not in SUFFIXES or not path.is_file() or {".git", "__pycache__"} & set(path.parts):
            continue
        text = path.read_text(encoding="utf-8", errors="ignore")
        for pattern in (ROOTED, IN_CODE):
            for name in pattern.findall(text):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_named_path_exists() -> None:
    found = named_paths()
    assert len(found) > 100        # the scan sees the names (a broken pattern would pass with none)
    missing = {name: where[:3] for name, where in found.items() if name not in MADE_UP
               and not (ROOT / name).exists() and not (ROOT / "code" / name).exists()}
    assert not missing, missing
