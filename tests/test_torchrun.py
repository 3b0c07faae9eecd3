"""Real-process scripts under torchrun: torchrun owns the processes, its world size wins, and only
rank 0 prints."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def torchrun(script: str, nproc: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(ROOT / "code" / script), *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_primitives_under_torchrun_use_its_world_size_and_print_once() -> None:
    out = torchrun("lecture14/02_primitives.py", 3, "--quick").stdout
    assert out.count("02_primitives.py:") == 1  # the title: rank 0 alone prints
    assert "--world-size is torchrun's 3" in out
    assert "on 3 gloo ranks" in out
    assert "differs" not in out  # the identities hold on torchrun's 3 ranks


def test_ddp_script_under_torchrun() -> None:
    out = torchrun("lecture15/01_ddp_basics.py", 2, "--quick").stdout
    assert out.count("01_ddp_basics.py:") == 1
    assert "differs" not in out
