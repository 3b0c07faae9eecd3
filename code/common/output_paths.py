"""Where an output flag's path leads (--json, --save-figs, --report, the judge's --json), and the
checks that it can be written, made before any work: a UsageError in one line, never a failure
after the run.

    check_output_file(path, "--json")      # before any work
    kind, target = resolve_output(path)    # ("fd", N), ("node", path) or ("file", path)

"-" (or /dev/stdout, /dev/fd/N, /proc/self/fd/N) is this process's own file descriptor: then
`divert_stdout` sends the human-readable text to stderr, so stdout holds only the file. How each
kind is written at the end is `common.output_files`'.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from typing import Any

from common.error_types import UsageError
from common.launch import is_rank0

_MAX_LINKS = 40  # as the kernel's limit on a chain of symlinks (ELOOP)
_OWN_FD = re.compile(r"/proc/(?:self|(\d+)(?:/task/\d+)?)/fd/(\d+)")   # also /proc/thread-self/fd/N
_PATH_ROOM = 128  # bytes a path must leave for what is written beside it (a temporary file) or in it


# ---- what a path names ------------------------------------------------------------------------

def resolve_output(path: str) -> tuple[str, Any]:
    """("fd", N) for one of this process's descriptors, ("node", path) for something written in
    place (a device, a FIFO, another process's descriptor), ("file", path) for a regular
    file or a new name: the end of the path's chain of symlinks."""
    if path == "-":
        return "fd", 1
    current = os.path.join(os.getcwd(), path)  # not abspath: "link/../x" must go where the shell's would
    for _ in range(_MAX_LINKS):
        current = os.path.join(os.path.realpath(os.path.dirname(current)), os.path.basename(current))
        own = _OWN_FD.fullmatch(current)
        if own and own.group(1) in (None, str(os.getpid())):
            return "fd", int(own.group(2))
        if current.startswith("/proc/") and os.path.exists(current):
            return "node", current  # a magic link of /proc: never renamed over
        if not os.path.islink(current):
            break
        link = os.readlink(current)
        current = link if os.path.isabs(link) else os.path.join(os.path.dirname(current), link)
    else:
        raise UsageError(f"{path}: too many levels of symbolic links")
    try:
        mode = os.stat(current).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "file", current  # a new name (check_output_file says when its folder is wrong)
    except OSError as err:  # a name too long (through a symlink), a loop the kernel saw first
        raise UsageError(f"{path}: {err.strerror or err}") from None
    return ("file" if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "node"), current


def writes_to_stdout(path: str | None) -> bool:
    """Whether `path` is this process's standard output ("-", /dev/stdout, …)."""
    return bool(path) and resolve_output(path) == ("fd", 1)


def divert_stdout(*paths: str | None) -> None:
    """When an output goes to standard output, the human-readable text goes to stderr instead
    (on the rank that prints: under torchrun the others stay silent)."""
    if is_rank0() and any(writes_to_stdout(p) for p in paths):
        sys.stdout.flush()
        sys.stdout = sys.stderr


# ---- checks before any work -------------------------------------------------------------------

def _not_empty(path: str, flag: str, what: str) -> None:
    if not path or not path.strip():
        raise UsageError(f"{flag}: an empty path; give {what}")
    _fits_the_file_system(path, flag)


def _fits_the_file_system(path: str, flag: str) -> None:
    """A name the file system can hold: each part within its NAME_MAX bytes, the whole within
    PATH_MAX (else the write at the end would fail after all the work, quoting the whole value)."""
    whole = os.path.join(os.getcwd(), path)
    existing = whole
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    name_max, path_max = (_limit(existing, "PC_NAME_MAX", 255), _limit(existing, "PC_PATH_MAX", 4096))
    longest = max(whole.split(os.sep), key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > name_max:
        raise UsageError(f"{flag}: a name of {len(os.fsencode(longest)):,} bytes ('{longest}'); "
                         f"the file system holds {name_max}")
    if len(os.fsencode(whole)) + _PATH_ROOM >= path_max:
        raise UsageError(f"{flag}: a path of {len(os.fsencode(whole)):,} bytes; the file system holds "
                         f"{path_max - 1}, less {_PATH_ROOM} for the names written in or beside it")


def _limit(folder: str, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError):
        return default


def check_output_file(path: str, flag: str) -> None:
    """A file we can write at the end of the run: its folder exists and is writable (it is not
    created: a typo in a folder name should not become a new tree), or it is a node we write to."""
    _not_empty(path, flag, "a file name (or - for standard output)")
    if path.endswith(os.sep):
        raise UsageError(f"{flag} {path}: ends with {os.sep}; give a file name")
    kind, target = resolve_output(path)
    if kind == "fd":
        try:
            os.fstat(target)
        except OSError:
            raise UsageError(f"{flag} {path}: file descriptor {target} is not open") from None
        return
    if kind == "node" and stat.S_ISSOCK(os.stat(target).st_mode):
        raise UsageError(f"{flag} {path}: is a socket; give a file, a FIFO or a device")
    if os.path.isdir(target):
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if kind == "node" or os.path.exists(target):
        if not os.access(target, os.W_OK):
            raise UsageError(f"{flag} {path}: not writable")
        if kind == "node":
            return
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "no such folder"
        raise UsageError(f"{flag} {path}: {folder} {what}")
    _try_writing_in(folder, flag, path)


def check_output_dir(path: str, flag: str) -> None:
    """A folder to write files into: it exists and is writable, or its parent does (then it is
    created, that one folder only)."""
    _not_empty(path, flag, "a folder")
    if path == "-":
        raise UsageError(f"{flag} -: give a folder (standard output cannot hold files)")
    target = os.path.realpath(path)
    _fits_the_file_system(target, flag)   # a symlink may name a folder the file system cannot hold
    if os.path.exists(target) and not os.path.isdir(target):
        raise UsageError(f"{flag} {path}: is a file; give a folder")
    folder = target if os.path.isdir(target) else os.path.dirname(target)
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "no such folder"
        raise UsageError(f"{flag} {path}: {folder} {what}")
    _try_writing_in(folder, flag, path)


def _try_writing_in(folder: str, flag: str, path: str) -> None:
    """Create and remove a file in `folder`: permissions, read-only file systems and /proc all
    answer this honestly (os.access says yes to root everywhere)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
        try:
            os.close(fd)
        finally:
            os.unlink(probe)   # even when a signal lands in between
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot write in {folder} ({err.strerror})") from None
