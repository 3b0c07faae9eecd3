"""The launcher's contract: results in rank order, failures named and never a hang, no leftovers."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import ROOT, popen

from common.launch import RankError, launch
from common.launch.rank_failure import RAISED

PROBE = Path(__file__).resolve().parents[1] / "probes" / "launch_probe.py"


def rank_and_sum(rank: int, world_size: int, n: int) -> tuple[int, int, list[float], str]:
    x = torch.arange(n, dtype=torch.float64) + rank
    dist.all_reduce(x)
    return rank, dist.get_world_size(), x.tolist(), os.environ["MASTER_ADDR"]


def raise_on_rank_1(rank: int, world_size: int) -> int:
    if rank == 1:
        raise ValueError("deliberate failure")
    dist.barrier()
    return rank


def skip_collective(rank: int, world_size: int) -> int:
    if rank != world_size - 1:  # the last rank skips the all-reduce the others wait in
        dist.all_reduce(torch.ones(1))
    return rank


def return_tensor(rank: int, world_size: int) -> dict:
    return {"t": torch.full((3,), float(rank)), "rank": rank}


def threads(rank: int, world_size: int) -> int:
    return torch.get_num_threads()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_results_come_back_in_rank_order(world: int) -> None:
    results = launch(rank_and_sum, world, 5)
    expected = [sum(r + i for r in range(world)) for i in range(5)]
    assert [r[0] for r in results] == list(range(world))
    assert all(r[1] == world and r[2] == expected and r[3] == "127.0.0.1" for r in results)
    assert multiprocessing.active_children() == []


def test_one_thread_per_rank_by_default_and_configurable() -> None:
    torch.set_num_threads(2)
    a = torch.randn(512, 512)
    (a @ a).sum()  # the parent's OpenMP team now exists: forking a 2-thread rank would hang
    assert launch(threads, 2) == [1, 1]
    assert launch(threads, 2, threads=2) == [2, 2]


def test_a_raising_rank_is_named_quickly_and_leaves_no_child() -> None:
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(raise_on_rank_1, 3, timeout_s=60)
    assert info.value.rank == 1
    # the rank's own error, as the parent prints it (its words are what comes back)
    assert "ValueError: deliberate failure" in str(info.value)
    assert "deliberate failure" in info.value.details  # the rank's traceback comes back too
    # The others are stuck in a barrier with a 60 s timeout: the parent must not wait for it.
    assert time.monotonic() - start < 20
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
def test_a_skipped_collective_ends_in_a_timeout_not_a_hang() -> None:
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(skip_collective, 2, timeout_s=1.5)
    # The timeout asked for, not a hard-wired one (30 s, 60 s): start-up, 1.5 s and the grace.
    assert time.monotonic() - start < 12
    # The rank that skipped is named, not the one left waiting in the all-reduce.
    assert info.value.rank == 1
    assert "finished its work while rank 0 waited 1.5 s in a collective" in info.value.message
    assert multiprocessing.active_children() == []


def test_ranks_may_return_tensors() -> None:
    results = launch(return_tensor, 2)
    assert [r["t"].tolist() for r in results] == [[0.0] * 3, [1.0] * 3]


def test_bad_world_size_is_rejected() -> None:
    with pytest.raises(ValueError):
        launch(threads, 0)


def test_two_runs_started_together_both_work() -> None:
    procs = [subprocess.Popen([sys.executable, str(PROBE), "sum", "3"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
        assert "results [3.0, 3.0, 3.0]" in out   # the probe's stdout is its only report


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (state first, then ppid, pgrp,
    session), read after its last ")": a name may hold spaces or brackets; [] once it has ended."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if _stat(pid)[:1] not in ([], ["Z"])]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_leaves_no_process_behind() -> None:
    proc = popen(PROBE, "sleep", "3", start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    children: list[int] = []
    deadline = time.monotonic() + 30
    while len(children) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
        children = [int(p) for p in out.split()]
    assert len(children) >= 3
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C: the whole group
    proc.wait(timeout=20)
    assert proc.returncode != 0
    time.sleep(0.5)
    assert _alive(children) == []


# ---- the safety nets, each with a test that fails without it ---------------------------------

def _probe(*args: str, **kwargs: object) -> subprocess.Popen:
    """The probe, forked after torch's import where it can be (conftest's popen)."""
    return popen(PROBE, *args, **kwargs)


def _left_in_session(sid: int) -> list[int]:
    """Processes still alive in session `sid` (zombies aside): what a run started with a session
    of its own (popen's start_new_session) left behind, its ranks included, forked or not: none
    of ours calls setsid. (`pgrep -f TAG` would see only fresh processes: a forked one's command
    line is the prestarted interpreter's.)"""
    in_session = [int(entry) for entry in filter(str.isdigit, os.listdir("/proc"))
                  if _stat(entry)[3:4] == [str(sid)]]
    return _alive(in_session)


def _children(pid: int, at_least: int, within_s: float = 30) -> list[int]:
    deadline = time.monotonic() + within_s
    found: list[int] = []
    while len(found) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        found = [int(p) for p in out.split()]
    assert len(found) >= at_least, f"only {len(found)} children of {pid}"
    return found


def _gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pids)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_to_the_parent_alone_takes_the_ranks_down() -> None:
    proc = _probe("sleep", "3")
    assert proc.stdout.readline().strip() == "ready"
    children = _children(proc.pid, 3)
    os.kill(proc.pid, signal.SIGINT)  # the parent only, not its process group
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and err.strip() == "interrupted"
    assert _gone(children, 5)


SIGTERM_IN_BOOTSTRAP = """
import os, signal, sys, time
sys.path.insert(0, {code!r})
from common.launch import launcher, rank_side
from common.script_end import run_main

def slow_bootstrap(*args):  # rank 0 interrupts the parent before the rank's own set-up has run
    if args[1] == 0 and args[3].poll(20):  # once the parent sends the port, its forks are done
        os.kill(os.getppid(), signal.SIGINT)
    time.sleep(0.5)
    rank_side.child_main(*args)

def work(rank, world_size):
    return rank

launcher.child_main = slow_bootstrap
run_main(lambda: launcher.launch(work, 2, timeout_s=5))
"""


@pytest.mark.timeout(60)
def test_ranks_terminated_before_their_set_up_end_quietly() -> None:
    # Seen once in CI: a Ctrl-C right after the fork, the clean-up's SIGTERM reached a rank still in
    # multiprocessing's bootstrap, which ran the parent's SIGTERM handler and printed a traceback.
    proc = subprocess.run([sys.executable, "-c", SIGTERM_IN_BOOTSTRAP.format(code=str(ROOT / "code"))],
                          capture_output=True, text=True, timeout=50)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_parent_leaves_no_orphan() -> None:
    proc = _probe("sleep", "3")
    assert proc.stdout.readline().strip() == "ready"
    children = _children(proc.pid, 3)
    proc.kill()  # SIGKILL: no finally block runs in the parent; only the kernel can clean up
    proc.wait(timeout=10)
    assert _gone(children, 5), "ranks outlived their parent"


def _listeners(pids: list[int]) -> list[str]:
    """Local addresses of the TCP sockets these processes listen on (from /proc/net/tcp{,6})."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            pass
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.append(fields[1].split(":")[0].rjust(width, "0"))
    return found


def _is_loopback(hex_addr: str) -> bool:
    if len(hex_addr) == 8:  # IPv4, little-endian: 0100007F is 127.0.0.1
        return bytes.fromhex(hex_addr)[::-1][0] == 127
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return words == bytes(15) + b"\x01" or (words[:12] == bytes(10) + b"\xff\xff" and words[12] == 127)


def _other_interface() -> str | None:
    names = [n for n in os.listdir("/sys/class/net")] if os.path.isdir("/sys/class/net") else []
    return next((n for n in names if n != "lo" and not n.startswith(("ifb", "dummy"))), None)


@pytest.mark.timeout(90)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("gloo_env", [None, "other interface"])
def test_nothing_listens_beyond_loopback(gloo_env: str | None) -> None:
    env = dict(os.environ)
    if gloo_env:  # a user's GLOO_SOCKET_IFNAME pointing at the network must not open the ranks to it
        other = _other_interface()
        if other is None:
            pytest.skip("no network interface besides loopback on this machine")
        env["GLOO_SOCKET_IFNAME"] = other
    proc = _probe("sleep", "3", env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        children = _children(proc.pid, 3)
        deadline, listening = time.monotonic() + 30, []
        while len(listening) < 4 and time.monotonic() < deadline:   # until the ranks have joined
            time.sleep(0.1)
            listening = _listeners([proc.pid] + children)
        assert len(listening) >= 4, listening  # the store and a listener per rank: the check is not empty
        assert all(_is_loopback(a) for a in listening), listening
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode, expected", [
    ("raise", r"^launch_probe\.py: error: rank 1 failed: ValueError: deliberate failure"),
    ("kill", r"^launch_probe\.py: error: rank 1 was killed by SIGKILL"),
    ("oom", r"^launch_probe\.py: error: rank 1 ran out of memory"),
    ("stall", r"^launch_probe\.py: error: rank 1 stopped responding \(at fail \(launch_probe\.py:\d+\)\); "
              r"rank 0 timed out"),
    ("busy", r"^launch_probe\.py: error: rank 1 stopped responding \(at fail \(launch_probe\.py:\d+\)\); "
             r"rank 0 timed out"),
])
def test_every_failure_is_one_line_naming_the_rank_and_its_cause(mode: str, expected: str) -> None:
    start = time.monotonic()
    proc = _probe(mode, "2", "2", start_new_session=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(expected, lines[0]), lines[0]
    assert time.monotonic() - start < 30
    time.sleep(0.5)
    if sys.platform.startswith("linux"):   # the session is read from /proc; the one line holds anywhere
        assert _left_in_session(proc.pid) == [], "processes left behind"


@pytest.mark.timeout(90)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode, expected", [
    ("stop-start", r"^launch_probe\.py: error: rank 1 did not join the group within \d+ s "
                   r"\((it is stopped|no answer)"),
    ("stop", r"^launch_probe\.py: error: rank 1 stopped responding \((it is stopped|no answer).*\); "
             r"rank 0, rank 2, rank 3 timed out after 4 s"),
    ("stop-end", r"^launch_probe\.py: error: rank 1 did not finish within 4 s after rank [023] did "
                 r"\((it is stopped|no answer)"),
])
def test_a_stopped_rank_is_named_within_twice_the_timeout(mode: str, expected: str) -> None:
    # SIGSTOP before rank 1 joins the group, in its work while the others wait in an all-reduce, and
    # after it left the group once the others delivered their results: every wait has a deadline.
    timeout_s = 4
    proc = _probe(mode, "4", str(timeout_s), start_new_session=True)
    assert proc.stdout.readline().strip() == "started"
    stopped_at = _when_a_child_stops(proc.pid)
    # Timed to the error line itself, not to the process's exit (its clean-up is no deadline's).
    first = proc.stderr.readline()
    took = time.monotonic() - stopped_at
    _, rest = proc.communicate(timeout=60)
    err = first + rest
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, err  # torch's socket warnings folded away
    assert re.search(expected, lines[0]), lines[0]
    assert took < 2 * timeout_s, f"named after {took:.1f} s"
    time.sleep(0.5)
    assert _left_in_session(proc.pid) == []


def _when_a_child_stops(pid: int, within_s: float = 30) -> float:
    """The moment (time.monotonic) one of pid's children is seen stopped (state T in /proc)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
            if _stat(child)[:1] == ["T"]:
                return time.monotonic()
        time.sleep(0.02)
    raise AssertionError("no rank stopped")


def test_a_slow_start_is_not_a_stall() -> None:
    # Spawned ranks (two threads each) import torch before they can answer: longer than the 1 s
    # timeout here, but they are starting, not stuck, so the start-up allowance covers them.
    assert launch(threads, 2, threads=2, timeout_s=1) == [2, 2]


def raise_in_own_code_with_torchs_words(rank: int, world_size: int) -> int:
    if rank == 1:
        time.sleep(0.3)  # rank 0 has returned from its work and waits in the launcher's teardown
        raise RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1234; Timed out waiting 2000ms")
    return rank


def test_a_rank_raising_torchs_words_is_blamed_for_its_own_error() -> None:
    # The old matcher took this text for an echo: rank 1 "waited" while rank 0, done with its work,
    # was named for skipping a collective. What rank 1 did (raise in its own code) decides.
    with pytest.raises(RankError) as info:
        launch(raise_in_own_code_with_torchs_words, 2, timeout_s=30)
    assert (info.value.rank, info.value.kind) == (1, RAISED), str(info.value)
    # torch's words in the rank's own error stay its message (not read as a lost peer)
    assert "Connection closed by peer" in info.value.message


def test_ddp_preload_in_the_parent_when_ranks_outnumber_cores_or_the_parent_needs_it(monkeypatch) -> None:
    # With a core per rank the ranks import torch._dynamo side by side; a parent that steps an
    # optimizer of its own after them (parent_too) would import it again alone, so it goes first.
    import builtins

    from common.launch import launcher

    imported: list[str] = []
    real_import = builtins.__import__

    def recording_import(name: str, *args: object, **kwargs: object) -> object:
        imported.append(name)
        if name == "torch._dynamo":   # recorded, not loaded: this worker's later tests stay as they were
            return sys.modules["torch"]
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", recording_import)
    monkeypatch.setattr(launcher, "cores", lambda: 2)
    seen = []
    for ranks, parent_too in ((2, False), (3, False), (2, True)):
        imported.clear()
        launcher.preload_for_ddp(ranks, parent_too=parent_too)
        seen.append("torch._dynamo" in imported)
    assert seen == [False, True, True]
