"""The launcher under torchrun: torchrun is told from leftover variables, a failed or stopped rank
is named by rank 0 alone, the ranks listen on loopback only (the tests that start torchrun are
marked `torchrun`: slow). The scripts under torchrun: tests/suite/test_torchrun_numbers.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

PROBE = ROOT / "tests" / "probes" / "launch_probe.py"


# Scripts under torchrun (its world size, rank 0 alone printing, two nodes' local ranks) are run
# in batches by tests/suite/test_torchrun_numbers.py, beside their numbers.


# ---- what only torchrun sets, and the failures rank 0 names -----------------------------------

def test_leftover_rank_variables_are_a_usage_error_not_a_torchrun_run() -> None:
    # What anything can leave behind (no TORCHELASTIC_RUN_ID): before, this ran one rank silently
    # and listened on *:29500. Now it is refused before any work, naming what is set.
    env = dict(os.environ, MASTER_ADDR="0.0.0.0", RANK="0", WORLD_SIZE="1", MASTER_PORT="29500")
    proc = subprocess.run([sys.executable, str(ROOT / "code" / "lecture15" / "01_ddp_basics.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", proc.stderr
    # the one-line stderr contract: the leftover variables named, and why it stops
    assert ("RANK=0, WORLD_SIZE=1, MASTER_ADDR=0.0.0.0, MASTER_PORT=29500 set, but torchrun did not start"
            in lines[0])


@pytest.mark.parametrize("env, torchrun, refused", [
    ({}, False, False),
    ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, False, False),  # an address alone: ignored
    ({"LOCAL_RANK": "0"}, False, True),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, False, True),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     True, False),
])
def test_only_torchrun_makes_a_process_a_rank(monkeypatch: pytest.MonkeyPatch, env: dict, torchrun: bool,
                                              refused: bool) -> None:
    from common.error_types import UsageError
    from common.launch import torchrun as tr

    for name in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert tr.under_torchrun() is torchrun
    assert tr.is_rank0() is (not torchrun)  # RANK 1 under torchrun writes nothing
    if refused:
        with pytest.raises(UsageError, match="torchrun did not start this process"):
            tr.check_environment()
    else:
        tr.check_environment()


def test_loopback_hosts() -> None:
    from common.launch.loopback import is_loopback_host

    assert is_loopback_host("localhost") and is_loopback_host("127.0.0.1") and is_loopback_host("127.3.4.5")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("192.0.2.1")
    assert not is_loopback_host("no-such-host.invalid")


def test_an_address_alone_is_ignored_and_the_run_stays_on_loopback() -> None:
    from test_launcher import _children, _is_loopback, _listeners

    env = dict(os.environ, MASTER_ADDR="0.0.0.0", MASTER_PORT="29500")
    proc = subprocess.Popen([sys.executable, str(PROBE), "sleep", "3"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        children = _children(proc.pid, 3)
        time.sleep(1.0)
        listening = _listeners([proc.pid] + children)
        assert len(listening) >= 4 and all(_is_loopback(a) for a in listening), listening
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        out = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True).stdout
        kids = [int(p) for p in out.split()]
        found += kids
        todo += kids
    return found


class _Torchrun:
    """The probe under torchrun, its stderr read line by line as it comes (with the time)."""

    def __init__(self, *args: str, nproc: int = 3, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      f"--nproc-per-node={nproc}", str(PROBE), *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **(env or {})))
        self.lines: list[tuple[float, str]] = []
        self.out: list[tuple[float, str]] = []   # stdout: only rank 0 speaks under torchrun
        self.reader = threading.Thread(target=self._read, args=(self.proc.stderr, self.lines), daemon=True)
        self.reader.start()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True).start()

    @staticmethod
    def _read(stream: Any, into: list[tuple[float, str]]) -> None:
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    def errors(self) -> list[tuple[float, str]]:
        self.proc.wait(timeout=120)
        self.reader.join(10)
        return [(t, line) for t, line in self.lines if "error:" in line]


@pytest.mark.torchrun
@pytest.mark.timeout(240)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", ["stop-start", "stop", "stop-end"])
def test_a_stopped_rank_under_torchrun_is_named_by_rank_0(mode: str, tmp_path: Path) -> None:
    # SIGSTOP before rank 1 joins, in its work, and after it left the group: the live ranks'
    # timeouts end in one line, printed by rank 0 only, naming rank 1, within twice the timeout.
    timeout_s = 4
    stop_file = tmp_path / "stopped_at"   # rank 1 writes when it stops itself (launch_probe.stop_self)
    run = _Torchrun(mode, "3", str(timeout_s), env={"PROBE_STOPPED_AT": str(stop_file)})
    errors = run.errors()
    ended = time.monotonic()
    assert stop_file.exists(), f"rank 1 never stopped: {run.lines}"
    stopped_at = float(stop_file.read_text())
    # Rank 0's wait starts when it joins, after its own import of torch: on loaded cores that can
    # be seconds after rank 1 stopped (stop-start), and those seconds are no deadline's.
    started = [t for t, line in run.out if line == "started"]
    assert started, run.out
    stopped_at = max(stopped_at, started[0])
    assert run.proc.returncode != 0
    assert len(errors) == 1, run.lines
    named_at, line = errors[0]
    phase = {"stop-start": "joining the group", "stop": "working", "stop-end": "leaving the group"}[mode]
    assert line.startswith(f"launch_probe.py: error: rank 1 stopped responding while {phase} "
                           "(it is stopped"), line
    assert named_at - stopped_at < 2 * timeout_s, f"named {named_at - stopped_at:.1f} s after the stop"
    # the stopped rank is ended once the line is out: torchrun's SIGTERM would wait 30 s for it
    assert ended - named_at < 20, f"torchrun ended {ended - named_at:.1f} s after the line"


@pytest.mark.torchrun
@pytest.mark.timeout(240)
def test_an_error_in_rank_k_under_torchrun_names_rank_k() -> None:
    run = _Torchrun("raise", "3", "60")
    errors = run.errors()
    assert [line for _, line in errors] == [
        "launch_probe.py: error: rank 1 failed: ValueError: deliberate failure"]
    # rank 0 waits in an all-reduce with a 60 s timeout: its helper names rank 1 long before,
    # counted from rank 0's start (after torchrun and its import of torch, which load stretches)
    started = [t for t, line in run.out if line == "started"]
    assert started and errors[0][0] - started[0] < 45, run.out


@pytest.mark.torchrun
@pytest.mark.timeout(240)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_torchrun_ranks_listen_on_loopback_only() -> None:
    # torchrun --standalone rendezvouses on localhost: the ranks' own sockets (gloo's) stay there.
    # (torchrun's agent is not ours: its store listens on every interface.)
    from test_launcher import _is_loopback, _listeners

    run = _Torchrun("sleep", "2", nproc=2)
    try:
        deadline = time.monotonic() + 90
        ranks: list[int] = []
        while time.monotonic() < deadline and len(_listeners(ranks)) < 2:
            time.sleep(0.5)
            ranks = [p for p in _descendants(run.proc.pid)
                     if "launch_probe" in Path(f"/proc/{p}/cmdline").read_text()]
        listening = _listeners(ranks)
        assert len(listening) >= 2 and all(_is_loopback(a) for a in listening), listening
    finally:
        run.proc.send_signal(signal.SIGINT)
        run.proc.wait(timeout=60)
