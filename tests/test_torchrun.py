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


def test_two_nodes_keep_torchruns_local_rank() -> None:
    """Two torchrun 'nodes' of one process each, on loopback: rank 1 is local rank 0 on its node."""
    import re
    import socket

    with socket.socket() as sock:  # a free port for the rendezvous (a test may pick one; scripts never do)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                               f"--node-rank={node}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                               str(ROOT / "code" / "lecture15" / "01_ddp_basics.py"), "--quick"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][1][-2000:] + outs[1][1][-2000:]
    table = outs[0][0]  # node 0 holds rank 0, which prints
    rows = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^\s+2\s+(\d)\s+(\d)\s", table, re.M)}
    assert rows == {0: 0, 1: 0}  # WORLD_SIZE 2; RANK -> LOCAL_RANK
    assert outs[1][0] == ""  # rank 1 prints nothing
