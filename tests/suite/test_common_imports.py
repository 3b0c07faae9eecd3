"""Importing common/ changes nothing: no module redirects output, installs a signal handler or
edits the environment when imported, even in a process torchrun made one of its silent ranks.
What a script's start does (silence a rank, take SIGTERM) happens where it starts: cli's parse,
run_main, launch."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

from conftest import ROOT, code_env

# Rank 1 of a torchrun group: the case in which the launcher used to silence stdout at import.
_TORCHRUN_RANK_1 = {"TORCHELASTIC_RUN_ID": "imports", "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}

# Runs in the child: the process's state before and after `then` runs, as JSON.
_PROBE = """
import json, os, signal, sys
import common  # the package itself: its Ctrl-C hook (sys.excepthook) is its documented purpose
import torch, torch.distributed  # third-party imports are not ours to judge

def state():
    fds = [tuple(os.fstat(fd)[1:3]) for fd in (1, 2)]
    handlers = {s.name: repr(signal.getsignal(s)) for s in signal.Signals
                if s not in (signal.SIGKILL, signal.SIGSTOP)}
    return {"stdout": id(sys.stdout), "stderr": id(sys.stderr), "fds": fds, "signals": handlers,
            "env": dict(os.environ), "excepthook": repr(sys.excepthook)}

before = state()
THEN
after = state()
sys.__stdout__.write(json.dumps({k: [before[k], after[k]] for k in before if before[k] != after[k]}))
"""


def _changed_by(then: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE.replace("THEN", then)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=code_env(**_TORCHRUN_RANK_1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _common_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages([str(ROOT / "code" / "common")], prefix="common."))


def test_importing_every_common_module_changes_nothing() -> None:
    modules = _common_modules()
    assert {"common.cli", "common.launch", "common.launch.launcher", "common.launch.torchrun",
            "common.script_end"} <= set(modules)
    imports = "\n".join(f"import {m}" for m in modules)
    assert _changed_by(imports) == {}


def test_the_probe_sees_what_a_script_start_changes() -> None:
    # The check is not empty: what launch and run_main do at a script's start is seen as a change.
    changed = _changed_by("from common.launch.torchrun import quiet_unless_rank0\nquiet_unless_rank0()")
    assert {"stdout", "stderr", "fds"} <= set(changed), changed
    changed = _changed_by("import signal\nsignal.signal(signal.SIGTERM, lambda *a: None)\n"
                          "import os\nos.environ['X_COURSE'] = '1'")
    assert {"signals", "env"} <= set(changed), changed
