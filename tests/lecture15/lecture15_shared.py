"""What the tests of several lecture 15 scripts share: the scripts' paths and what they read from a run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from conftest import flat, run_script

EXERCISES = "lecture15/exercises.py"
MODEL_VS_REAL = "lecture15/model_vs_real.py"
MY_DDP_CHECK = "lecture15/my_ddp_check.py"


def _run_json(relpath: str, tmp_path: Path, *args: str) -> tuple[str, dict]:
    out = tmp_path / "out.json"
    proc = run_script(relpath, *args, "--json", str(out))
    return proc.stdout, json.loads(out.read_text(encoding="utf-8"))


def _claims(data: dict) -> dict[str, dict]:
    return {c["ref"]: c for c in data["claims"]}


def _quick_claims(relpath: str, tmp_path: Path, quick_run) -> tuple[str, dict[str, dict]]:
    """A script's plain --quick run, from the session's reproduction (conftest): its output (line
    wrapping undone) and its decided rows by id."""
    run = quick_run(relpath, json_to=tmp_path / "run.json")
    return flat(run.stdout), {c["ref"]: c for c in run.data["claims"]}


def _run_claims(*flags: str, script: str = MY_DDP_CHECK, quick_run=None) -> tuple[str, dict[str, dict]]:
    """A --quick run with these flags; a plain one (no flags) comes from the session's reproduction
    when quick_run (conftest's fixture) is given."""
    if quick_run is not None and not flags:
        run = quick_run(script)
        return flat(run.stdout), {c["ref"]: c for c in run.data["claims"]}
    with tempfile.TemporaryDirectory() as tmp:
        out = run_script(script, "--quick", *flags, "--json", f"{tmp}/c.json").stdout
        data = json.loads(open(f"{tmp}/c.json", encoding="utf-8").read())
    return flat(out), {c["ref"]: c for c in data["claims"]}
