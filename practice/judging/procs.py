"""Process trees for the judge: who dies with whom, and how a whole tree is killed.

A process that forks, `setsid`s a daemon or outlives its parent is still a descendant somewhere:
on Linux orphans are handed to the nearest ancestor that declared itself a *child subreaper* (the
judge and each case's keeper do), never to init. So "everything below me" is a walk down the
kernel's lists of children (/proc/<pid>/task/*/children; a scan of every process's parent where
there are none), and killing it is: stop every process found (a stopped process cannot fork any
more), look again until nothing new appears, then SIGKILL them all and reap what was ours.
Elsewhere (macOS) there is no subreaper and no death signal: a tree is still found through `ps`
and killed, but a daemon that escaped before it was found can survive the judge.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

PR_SET_PDEATHSIG = 1           # the kernel sends a signal when the parent dies
PR_SET_CHILD_SUBREAPER = 36    # orphans below this process are re-parented to it, not to init


LINUX = sys.platform.startswith("linux")


def _prctl(option: int, value: int) -> None:
    if not LINUX:    # elsewhere no subreaper and no death signal: trees are still walked and killed
        return
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def become_subreaper() -> None:
    """Orphans anywhere below this process become its children (so they can still be found)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int, parent: int) -> None:
    """The kernel sends `sig` to this process when `parent` (the one that forked it) dies; if it
    died before this call, act as if the signal came now."""
    _prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def _children(pid: int) -> list[int] | None:
    """The live children of `pid` from /proc/<pid>/task/*/children ([] if it is gone; None where
    the kernel has no such file)."""
    if not os.path.isdir("/proc/self/task"):
        return None
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            return None if task == str(pid) else found
        except OSError:
            continue
    return found


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process (zombies left out: they are only waiting to be reaped)."""
    if not os.path.isdir("/proc/self"):     # macOS: ask ps
        lines = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True).stdout
        return {int(f[0]): int(f[1]) for f in (ln.split() for ln in lines.splitlines())
                if len(f) == 3 and not f[2].startswith("Z")}
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:       # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()   # the name may hold spaces and parentheses
        if fields and fields[0] not in (b"Z", b"X"):
            found[int(entry.name)] = int(fields[1])
    return found


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] in (b"Z", b"X")


def descendants(root: int) -> list[int]:
    """Every live process below `root`: from each process's list of children where the kernel
    keeps one (a walk of the tree only), else from every process's parent (a scan)."""
    if _children(root) is None:
        children: dict[int, list[int]] = {}
        for pid, ppid in _parents().items():        # zombies already left out
            children.setdefault(ppid, []).append(pid)
        lookup, live = children.get, lambda pid: True
    else:
        lookup, live = _children, lambda pid: not _is_zombie(pid)
    found, todo = [], [root]
    while todo:
        for child in lookup(todo.pop()) or []:
            if live(child):
                found.append(child)
            todo.append(child)
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap() -> None:
    """Collect the exit status of every child of this process that has ended."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree_on(sig: int, then: Callable[[int, Any], None] | None = None) -> None:
    """From now on `sig` kills every process below this one, then `then(signum, frame)` (the judge
    raises, so that its clean-up runs and common.script_end says "terminated"); by default it ends this
    one at once with 128 + sig (a keeper, a forked process: nothing of its own to clean)."""
    def take_down(signum: int, frame: Any) -> None:
        kill_tree()
        if then is not None:
            then(signum, frame)
        os._exit(128 + signum)
    signal.signal(sig, take_down)


def kill_tree(root: int | None = None, patience_s: float = 5.0) -> None:
    """Kill every process below `root` (default: this one), forks and daemons included."""
    root = os.getpid() if root is None else root
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        stopped: set[int] = set()
        while True:                      # freeze the tree first: a frozen process forks nothing
            new = [p for p in descendants(root) if p not in stopped]
            if not new:
                break
            _signal(new, signal.SIGSTOP)
            stopped.update(new)
        if not stopped:
            return
        _signal(sorted(stopped), signal.SIGKILL)
        reap()
        time.sleep(0.001)                # the kernel re-parents the orphans of what just died
