"""The rank that failed is the rank named, and its own words come with the line (issue 30 item 2,
issue 36 item 1): a rank that raises is named over the ranks that then find their connection to it
closed, whatever line of theirs the closed connection surfaced in (a `Work.wait()` is C++ called
from the worker's own frame; dist_count's wrapper calls the group's C++ method); gloo's reason for
aborting a rank ("Received data size doesn't match expected size") is shown under the one line;
under torchrun on two nodes, a rank killed on node 1 is named by node 0, not the rank its agent
then stopped, and a connection that closed is not called a timeout. The two-node runs start
torchrun and are marked `torchrun` (slow); the rest are quick.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
import torch.distributed as dist
from conftest import ROOT

from common import dist_count
from common.launch import RankError, launch, rank_failure, torchrun_blame
from common.launch.rank_failure import KILLED, LOST, RAISED, TORCH, Failure, failure_of

RUNS = 20       # launches per pattern: the old verdict was wrong in every run (wait) or 1 in 4
WORLD = 3


# ---- a rank raises while the others wait on it -------------------------------------------------

def _ring_step(rank: int, world: int, t: torch.Tensor, how: str) -> None:
    """One step of a ring: send to the right, receive from the left, add; the peers wait here."""
    right, left, buf = (rank + 1) % world, (rank - 1) % world, torch.empty_like(t)
    if how == "wait":         # practice/115's README: batch_isend_irecv, then wait() in the student's line
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, t.clone(), right),
                                            dist.P2POp(dist.irecv, buf, left)]):
            work.wait()
    elif how == "recv":       # a blocking receive (torch's frame), then the send's wait() (ours)
        work = dist.isend(t.clone(), right)
        dist.recv(buf, left)
        work.wait()
    else:
        raise AssertionError(how)
    t += buf


def raise_while_others_wait(rank: int, world: int, culprit: int, where: str) -> float:
    """Rank `culprit` divides by zero at step 1, once the others are waiting for it in `where`."""
    t = torch.ones(4)
    for step in range(3):
        if rank == culprit and step == 1:
            time.sleep(0.05)  # the others have posted their step-1 messages and wait
            print(1 / 0)
        if where == "collective":
            dist.all_reduce(t)
        elif where == "counter":   # the judge's counting wrapper around every ProcessGroup method
            with dist_count.counting():
                _ring_step(rank, world, t, "wait")
        else:
            _ring_step(rank, world, t, where)
    return float(t[0])


@pytest.mark.parametrize("where", ["wait", "recv", "collective", "counter"])
def test_a_rank_that_raises_is_named_whatever_line_the_others_lost_it_at(where: str) -> None:
    # Before: the ranks that found the connection closed in wait() (their own line: C++ called from
    # it) were taken for a failure of their own, and rank 0 was named in every run.
    wrong = []
    for run in range(RUNS):
        culprit = run % WORLD
        with pytest.raises(RankError) as info:
            launch(raise_while_others_wait, WORLD, culprit, where, timeout_s=30)
        err = info.value
        if (err.rank, err.kind) != (culprit, RAISED) or "ZeroDivisionError" not in err.message:
            wrong.append(f"run {run}: rank {culprit} raised, named: {err}")
    assert wrong == [], f"{len(wrong)} of {RUNS} wrong:\n" + "\n".join(wrong)


# ---- gloo's words, kept --------------------------------------------------------------------------

def mismatched_sizes(rank: int, world: int) -> None:
    """Rank 1 sends 8 floats (32 bytes) where rank 0 posted a receive for 6 (24): gloo aborts rank 0."""
    if rank == 0:
        dist.recv(torch.empty(6), 1)
    else:
        dist.send(torch.empty(8), 0)


def test_gloo_says_why_it_aborted_a_rank_and_the_error_keeps_its_words() -> None:
    # pytest's faulthandler, inherited by the forked rank, would dump its stacks on the terminal
    was_enabled = faulthandler.is_enabled()
    faulthandler.disable()
    try:
        with pytest.raises(RankError) as info:
            launch(mismatched_sizes, 2, timeout_s=30)
    finally:
        if was_enabled:
            faulthandler.enable(file=sys.__stderr__)
    err = info.value
    assert (err.rank, err.kind) == (0, KILLED) and "SIGABRT" in err.message, str(err)
    said = "\n".join(err.said)
    # torch's own words, passed on as the rank wrote them
    assert "Received data size doesn't match expected size" in said and "32 vs 24" in said, err.said
    assert all(line.startswith("  rank 0 wrote: ") for line in err.under), err.under
    assert "/third_party/" not in said   # gloo's source path cut to its file name


MISMATCH_PROGRAM = """
import sys
sys.path.insert(0, {code!r})
import torch, torch.distributed as dist
from common.script_end import run_main
from common.launch.launcher import launch

def mismatched_sizes(rank, world):
    if rank == 0:
        dist.recv(torch.empty(6), 1)
    else:
        dist.send(torch.empty(8), 0)

run_main(lambda: launch(mismatched_sizes, 2, timeout_s=30))
"""


@pytest.mark.timeout(120)
def test_the_one_line_has_gloos_words_under_it() -> None:
    # What a student sees: "rank 0 was killed by SIGABRT", and under it why gloo aborted it.
    proc = subprocess.run([sys.executable, "-c", MISMATCH_PROGRAM.format(code=str(ROOT / "code"))],
                          capture_output=True, text=True, timeout=100)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("-c: error: rank 0 was killed by SIGABRT"), proc.stderr
    assert 2 <= len(lines) <= 1 + rank_failure._KEPT_WORDS, proc.stderr
    assert all(line.startswith("  rank 0 wrote: ") for line in lines[1:]), proc.stderr
    # torch's own words, passed on as the rank wrote them
    assert "Received data size doesn't match expected size" in proc.stderr, proc.stderr


def test_last_words_leave_out_torchs_waiting_warnings_and_keep_the_end() -> None:
    gloo = "/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456"
    text = ("[W1203 23:26:17.958000 123 socket.cpp:460] [c10d] waiting\n"
            + "".join(f"line {i}\n" for i in range(9))
            + "[I1203 23:26:18.000000 123 socket.cpp:1] info\n"
            + f"  what():  [enforce fail at {gloo}] 32 vs 24\n\n")
    assert rank_failure.last_words(text) == ("line 6", "line 7", "line 8",
                                          "what():  [enforce fail at pair.cc:456] 32 vs 24")
    assert rank_failure.last_words("x" * 1000)[0] == "x" * rank_failure._WORDS_WIDTH + "…"
    assert rank_failure.last_words("") == ()


# ---- what a failure is, from what torch raised -----------------------------------------------------

def _caught(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as err:  # noqa: BLE001
        return err
    raise AssertionError("no error")


def _wait_on(message: str) -> None:
    """C code raising RuntimeError(`message`) when called from this frame, as torch's C++ Work.wait()
    does: no Python frame of torch's in between (CPython's own PyErr_SetString, through ctypes)."""
    ctypes.pythonapi.PyErr_SetString(ctypes.py_object(RuntimeError), message.encode())


CLOSED = "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:7089"


def _raise_closed() -> None:
    raise RuntimeError(CLOSED)


def _reraise_from_closed() -> None:
    try:
        _wait_on(CLOSED)
    except RuntimeError as lost:
        raise ValueError("my ring broke at step 2") from lost


@pytest.mark.parametrize("make, kind", [
    (lambda: _wait_on(CLOSED), LOST),                           # Work.wait() in the worker's line
    (lambda: _wait_on("Read error [127.0.0.1]:1: Connection reset by peer"), LOST),
    (lambda: _wait_on("Timed out waiting 5000ms for recv operation to complete"), TORCH),
    (lambda: torch.ones(2).view(5), RAISED),                   # an operation of the worker's own
    (_raise_closed, RAISED),                                   # torch's words in the worker's raise
    (_reraise_from_closed, LOST),                              # raised while handling a lost peer
    (lambda: 1 / 0, RAISED),
])
def test_a_failure_is_what_torch_raised_not_where(make: Any, kind: str) -> None:
    err = _caught(make)
    assert failure_of(err, "", time.monotonic()).kind == kind


# ---- torchrun's verdict, from what the ranks wrote (two nodes) -------------------------------------

class _Store:
    """What the ranks wrote to torchrun's store, for Diagnosis (a rank 0 that reads it)."""

    def __init__(self, world: int, timeout_s: float, entries: dict[str, Any],
                 later: dict[str, Any] | None = None) -> None:
        self.rank, self.world, self.timeout_s = 0, world, timeout_s
        self.entries, self.later, self.reads = dict(entries), later or {}, 0

    def _read(self, key: str) -> Any:
        if key.startswith("beat/"):
            self.reads += 1
            if self.reads > self.world:   # the second look, after stale_s: who is still beating
                return self.later.get(key, self.entries.get(key))
        return self.entries.get(key)


_HERE = socket.gethostname()


def _beat(count: int, node: int, host: str = "elsewhere", pid: int = 1, phase: str = "working") -> tuple:
    return (count, phase, True, "step (train.py:9)", host, pid, node)


def _lost(at: float = 1.0) -> Failure:
    return Failure(LOST, "failed: RuntimeError: Connection closed by peer [127.0.0.1]:1", at=at,
                   in_group_s=1.0)


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid   # reaped: no such process now


def test_the_rank_that_died_is_named_not_the_one_its_agent_stopped() -> None:
    # Rank 3 (node 1) was killed; rank 2 lost it, then its agent ended it (it said so); ranks 0 and 1
    # lost it. Before: rank 2 was named "stopped responding", and "timed out after 5 s".
    entries = {"beat/0": _beat(5, 0), "beat/1": _beat(5, 0), "beat/2": _beat(5, 1, _HERE, _gone_pid()),
               "beat/3": _beat(5, 1, _HERE, _gone_pid()),
               "error/0": _lost(), "error/1": _lost(), "error/2": _lost(), "ended/2": "terminated"}
    later = {"beat/0": _beat(9, 0), "beat/1": _beat(9, 0)}
    verdict = torchrun_blame.Diagnosis(_Store(4, 5.0, entries, later), 0.0).verdict()
    assert (verdict.rank, verdict.kind, verdict.peers) == (3, KILLED, (0, 1, 2)), str(verdict)
    assert str(verdict).startswith("rank 3 on node 1 died while working (its process ended without a word")
    # the verdict a student reads names the ranks left waiting
    assert "rank 0, rank 1, rank 2 lost their connection to it" in str(verdict)
    assert "timed out" not in str(verdict)


def test_a_rank_that_lost_its_peer_is_never_named_as_its_culprit() -> None:
    # Rank 2 wrote that its connection closed, then went silent; rank 3 went silent without a word
    # (its machine, far away: no process to look at). Before: rank 2, culprit and waiter at once.
    entries = {"beat/0": _beat(5, 0), "beat/1": _beat(5, 0), "beat/2": _beat(5, 1), "beat/3": _beat(5, 1),
               "error/0": _lost(), "error/2": _lost()}
    later = {"beat/0": _beat(9, 0), "beat/1": _beat(9, 0)}
    verdict = torchrun_blame.Diagnosis(_Store(4, 5.0, entries, later), 0.0).verdict()
    assert verdict.rank == 3 and 2 in verdict.peers, str(verdict)
    assert str(verdict).startswith("rank 3 on node 1 stopped responding while working (no heartbeat")
    # the verdict a student reads names the ranks left waiting
    assert "rank 0, rank 2 lost their connection to it" in str(verdict)


def test_two_silent_ranks_of_one_node_are_a_rank_on_that_node() -> None:
    # Node 1 gone whole (its agent too: no word from either rank): nothing tells its ranks apart.
    entries = {"beat/0": _beat(5, 0), "beat/1": _beat(5, 0), "beat/2": _beat(5, 1), "beat/3": _beat(5, 1),
               "error/0": _lost(), "error/1": _lost()}
    later = {"beat/0": _beat(9, 0), "beat/1": _beat(9, 0)}
    verdict = torchrun_blame.Diagnosis(_Store(4, 5.0, entries, later), 0.0).verdict()
    assert str(verdict).startswith("a rank on node 1 went silent (rank 2, rank 3: no heartbeat"), str(verdict)
    assert (verdict.rank, verdict.also, verdict.peers) == (2, (3,), (0, 1))


def test_a_real_timeout_still_says_how_long_was_waited() -> None:
    entries = {"beat/0": _beat(5, 0), "beat/1": _beat(5, 0),
               "error/0": Failure(TORCH, "failed: RuntimeError: Timed out waiting 5000ms", at=6.0,
                                  in_group_s=6.0)}
    verdict = torchrun_blame.Diagnosis(_Store(2, 5.0, entries, {"beat/0": _beat(9, 0)}), 0.0).verdict()
    # the verdict a student reads says who waited and how long
    assert verdict.rank == 1 and "rank 0 timed out after 5 s waiting for it" in str(verdict), str(verdict)


# ---- torchrun on two nodes of this machine: SIGKILL rank 3 on node 1 ------------------------------

# runs, each one torchrun pair (two agents) killed once: 2 in the suite, run together (about 20 s of a
# worker; the bug this guards showed in 5 of 6 kills); COURSE_BLAME_KILLS=10 for the count
# (10/10 named right, twice, when this was written)
KILLS = max(1, int(os.environ.get("COURSE_BLAME_KILLS", "2")))   # 0 would pass with nothing killed
TOGETHER = 2        # runs at a time: a run waits half its time (rendezvous, imports on 2 cores)
DDP_BASICS = ROOT / "code" / "lecture15" / "01_ddp_basics.py"


def _rank_pid(run_id: str, rank: int) -> int | None:
    """The pid of torchrun's rank `rank` in run `run_id` on this machine (from /proc)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if env.get(b"TORCHELASTIC_RUN_ID") == run_id.encode() and env.get(b"RANK") == str(rank).encode():
            return int(entry)
    return None


def _two_nodes_kill_rank_3(after_s: float) -> tuple[float, list[tuple[float, str]], list[int]]:
    """01_ddp_basics.py --timeout-s 5 on two agents of two ranks each (rendezvous on loopback);
    `after_s` after rank 0 prints Part 2's header, SIGKILL rank 3. The moment of the kill, node
    0's stderr lines (time, text), and both agents' exit statuses."""
    with socket.socket() as sock:  # a free port for the rendezvous (a test may pick one; scripts never do)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_id = f"blame-{os.getpid()}-{port}"
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}"]
    agents = [subprocess.Popen([*command, f"--node-rank={node}", f"--rdzv-conf=is_host={int(node == 0)}",
                                str(DDP_BASICS), "--timeout-s", "5"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for node in range(2)]
    lines: list[tuple[float, str]] = []

    def read(stream: Any, into: list | None) -> None:
        for line in stream:
            if into is not None:
                into.append((time.monotonic(), line.rstrip("\n")))

    readers = [threading.Thread(target=read, args=(agents[0].stderr, lines), daemon=True),
               threading.Thread(target=read, args=(agents[1].stderr, None), daemon=True),
               threading.Thread(target=read, args=(agents[1].stdout, None), daemon=True)]
    for reader in readers:
        reader.start()
    killed_at = 0.0
    try:
        for line in agents[0].stdout:
            if "== Part 2:" in line:
                break
        time.sleep(after_s)
        pid = _rank_pid(run_id, 3)
        assert pid is not None, "rank 3 not found"
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        agents[0].stdout.read()
        for agent in agents:
            agent.wait(timeout=120)
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    readers[0].join(10)
    return killed_at, lines, [agent.returncode for agent in agents]


@pytest.mark.torchrun
@pytest.mark.timeout(60 * KILLS)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the rank in /proc")
def test_two_nodes_name_the_killed_rank_every_time() -> None:
    # Before: "rank 2 stopped responding ... timed out after 5 s" in 5 of 6 kills, a second after.
    # The kills land spread over Part 2's first second, DDP's construction to its training steps, each
    # in the middle of its share (2 kills: 0.25 and 0.75 s; 10: 0.05 … 0.95 s).
    with ThreadPoolExecutor(TOGETHER) as pool:
        runs = list(pool.map(lambda run: _two_nodes_kill_rank_3(after_s=(run + 0.5) / KILLS), range(KILLS)))
    wrong = []
    for run, (killed_at, lines, statuses) in enumerate(runs):
        errors = [(t, line) for t, line in lines if "01_ddp_basics.py: error:" in line]
        if len(errors) != 1:
            wrong.append(f"run {run}: {len(errors)} error lines: {lines[-20:]}")
            continue
        named_at, line = errors[0]
        if (not line.startswith("01_ddp_basics.py: error: rank 3 on node 1 died") or "timed out" in line
                or named_at - killed_at > 10 or statuses[0] == 0):
            wrong.append(f"run {run}: {named_at - killed_at:.1f} s after the kill, exit {statuses}: {line}")
    assert wrong == [], f"{len(wrong)} of {KILLS} wrong:\n" + "\n".join(wrong)


def test_last_words_stop_where_faulthandler_dumps_the_stacks() -> None:
    """pytest (or PYTHONFAULTHANDLER) dumps a dying rank's stacks after gloo's reason: the reason is kept."""
    from common.launch.rank_failure import last_words

    text = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
            "  what():  [enforce fail at /x/gloo/transport/tcp/pair.cc:456] 32 vs 24. Received data size "
            "doesn't match expected size.\nFatal Python error: Aborted\n\nCurrent thread 0x1 (most recent "
            "call first):\n  File \"a.py\", line 3 in f\n\nExtension modules: numpy, torch._C (total: 2)\n")
    words = last_words(text)
    assert words[-1].endswith("Received data size doesn't match expected size."), words
    assert not any("Extension modules" in w or "Fatal Python" in w for w in words)
