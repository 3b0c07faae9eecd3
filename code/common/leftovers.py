"""Temporary folders named after the process that owns them ("course-ranks-PID-…"), so that a run
killed outright (SIGKILL, an out-of-memory kill: no clean-up of ours runs) leaves nothing for
good: the next run that makes a folder of the same kind first removes those whose owner is gone.

    with owned_folder("course-ranks-") as folder:   # a TemporaryDirectory, orphans removed first
        ...

A folder is removed only when no process has its number, it is a real folder (not a link) and it
is this user's. A reused number keeps the folder, the safe side, until that process ends too.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from common.script_end import signals_held

# Every kind of folder the suite makes under the temporary directory: each is cleaned by its own
# next run (PREFIXES: the test that every mkdtemp/TemporaryDirectory of ours uses one of them).
PREFIXES = ("course-ranks-", "course-run-", "prestarted-", "judge-case-")


class OwnedFolder(tempfile.TemporaryDirectory):
    """A TemporaryDirectory removed whole: Ctrl-C, SIGTERM and SIGHUP wait until it is gone (one
    that landed in its removal left the folder behind, 3 of 120 runs signalled as their ranks
    ended), then end the run as usual."""

    def cleanup(self) -> None:
        with signals_held():
            super().cleanup()


def owned_folder(prefix: str) -> OwnedFolder:
    """A temporary folder named prefix + this process's number, made after removing the folders
    of this kind whose owners are gone."""
    remove_orphans(prefix)
    return OwnedFolder(prefix=f"{prefix}{os.getpid()}-")


def make_owned(prefix: str) -> str:
    """mkdtemp's folder, named and preceded as owned_folder's (the caller removes it)."""
    remove_orphans(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def remove_orphans(prefix: str) -> None:
    """Remove the folders prefix-PID-… in the temporary directory whose process PID is gone."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        match = re.fullmatch(rf"{re.escape(prefix)}(\d+)-\w+", name)
        path = os.path.join(root, name)
        if not match or not gone(int(match.group(1))):
            continue
        try:
            mine = os.lstat(path).st_uid == getattr(os, "getuid", lambda: 0)()
            if mine and os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def gone(pid: int) -> bool:
    """No process has this number (one that is someone else's is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:   # alive, someone else's
        return False
    return False
