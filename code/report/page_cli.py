"""`python code/report/<page>.py OUT_DIR`: each page to play with written on its own, as
reproduce.py writes it beside the others (one entry point for timeline, pipeline and memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from common.cli import OneLineParser
from common.output_files import make_output_dir
from common.output_paths import check_output_dir


def page_main(doc: str, name: str, write: Callable[[Path], Path]) -> None:
    """Parse OUT_DIR (checked before any work), write the page `name` into it with `write`, and say
    where and how big."""
    parser = OneLineParser(description=doc)
    parser.add_argument("out_dir", help=f"folder to write {name} into (created if its parent exists)")
    args = parser.parse_args()
    check_output_dir(args.out_dir, "OUT_DIR")
    make_output_dir(args.out_dir)
    path = write(Path(args.out_dir))
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")
