"""Every file the suite writes (--json, --save-figs, --report, the judge's --json), written one way.

    check_output_file(path, "--json")      # before any work: a UsageError for a path we cannot use
    write_json(path, data)                 # at the end: whole, or not at all

What the path names decides how it is written, so an output never replaces what it points at:
  "-" (or /dev/stdout, /dev/fd/N, /proc/self/fd/N): this process's own file descriptor, written
      at its current position (a shell's `> out.txt` keeps everything printed before);
      `divert_stdout` then sends the human-readable text to stderr, so stdout holds only the file;
  a device or a FIFO: opened and written directly (a rename would replace the node: run as root,
      `--json /dev/full` once turned the device into a regular file); a FIFO waits at most 30 s
      for its reader; a socket is refused;
  a symlink: the file it points at, by the same rules; the link stays a link;
  a regular file, or a name not there yet: a temporary file in the same folder, renamed over it
      once whole; an existing file keeps its mode and, where this user may keep it, its owner; a
      file with several names (hard links) is written in place, so every name sees the new text.
A write that fails (a full disk, a FIFO whose reader left) raises RunFailure, one line naming the
file (exit status 1); an interrupted run (an error, Ctrl-C, SIGTERM: run_main turns it into an
exception) leaves no temporary file. Under torchrun only rank 0 writes.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
import tempfile
import time
from typing import Any

from common.errors import RunFailure, UsageError
from common.exits import signals_held
from common.launch import is_rank0

_MAX_LINKS = 40  # as the kernel's limit on a chain of symlinks (ELOOP)
_OWN_FD = re.compile(r"/proc/(?:self|(\d+)(?:/task/\d+)?)/fd/(\d+)")   # also /proc/thread-self/fd/N
_PATH_ROOM = 128  # bytes a path must leave for what is written beside it (a temporary file) or in it
_TMP_NAME_ROOM = 200  # bytes of a target's name its temporary file repeats (NAME_MAX is 255 here)
_FIFO_WAIT_S = 30.0  # how long a FIFO may wait for its reader at the end of a run


# ---- what a path names ------------------------------------------------------------------------

def _resolve(path: str) -> tuple[str, Any]:
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
    return bool(path) and _resolve(path) == ("fd", 1)


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
    kind, target = _resolve(path)
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


def make_output_dir(path: str) -> None:
    """The folder check_output_dir accepted, created if it is not there yet (one level). Two runs
    may make it at once: whichever comes second finds it made (not an error)."""
    if not is_rank0():
        return
    try:
        os.mkdir(os.path.realpath(path))  # through a symlink to a folder not made yet
    except FileExistsError:
        if not os.path.isdir(path):
            raise RunFailure(f"making the folder {path} failed: a file of that name appeared") from None
    except OSError as err:
        raise RunFailure(f"making the folder {path} failed: {err.strerror or err}") from None


# ---- writing ----------------------------------------------------------------------------------

def write_bytes(path: str, data: bytes) -> None:
    """Write `data` to what `path` names (see the module's docstring); RunFailure naming the file
    when it cannot be written."""
    if not is_rank0():
        return
    kind, target = _resolve(path)
    try:
        if kind == "fd":
            _write_fd(target, data)
        elif kind == "node":
            _write_node(path, target, data)
        elif _hard_linked(target):
            _write_in_place(target, data)
        else:
            _replace_file(target, data)
    except BrokenPipeError:
        if kind == "fd" and target == 1:
            raise  # stdout's reader left (| head): run_main ends quietly, 141, as for any output
        raise RunFailure(f"writing {path} failed: Broken pipe") from None
    except OSError as err:
        raise RunFailure(f"writing {path} failed: {err.strerror or err}") from None


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def _write_node(path: str, target: str, data: bytes) -> None:
    """A device or a FIFO, opened as it is (no temporary file, no rename). A FIFO waits for its
    reader a while, then fails with one line instead of waiting for ever."""
    deadline = time.monotonic() + _FIFO_WAIT_S
    while True:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as err:
            if err.errno == errno.ENXIO and time.monotonic() < deadline:   # a FIFO nobody reads yet
                time.sleep(0.1)
                continue
            why = f"nothing read it within {_FIFO_WAIT_S:g} s" if err.errno == errno.ENXIO else err.strerror
            raise RunFailure(f"writing {path} failed: {why}") from None
    try:
        os.set_blocking(fd, True)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)  # a /proc link that led to a regular file: its old bytes go
        _write_all(fd, data)
    finally:
        os.close(fd)


def _hard_linked(target: str) -> bool:
    try:
        return os.stat(target).st_nlink > 1
    except FileNotFoundError:
        return False


def _write_in_place(target: str, data: bytes) -> None:
    """A file with several names (hard links): written through, so every name sees the new text
    (a rename would give this name a new file and leave the others the old one). Not atomic."""
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_fd(fd: int, data: bytes) -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()  # what was printed before comes first
    _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _replace_file(target: str, data: bytes) -> None:
    """A temporary file beside `target`, renamed over it once whole, with the old file's mode
    (and owner, where allowed); removed if anything goes wrong, interruptions included."""
    folder = os.path.dirname(target)
    name = os.path.basename(target)
    # the temporary name must fit where the target's does: a long name gives way to "output"
    prefix = f".{name if len(os.fsencode(name)) <= _TMP_NAME_ROOM else 'output'}."
    tmp = None
    try:
        with signals_held():   # a signal between making the file and knowing its name left it behind
            fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
        try:
            _take_over_mode(fd, target)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _take_over_mode(fd: int, target: str) -> None:
    """An existing file's mode and owner, or a new file's usual mode (mkstemp's 0600 would make
    the result private, unlike a plain open())."""
    try:
        old = os.stat(target)
    except FileNotFoundError:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    if old.st_uid != os.geteuid() or old.st_gid != os.getegid():
        try:
            os.fchown(fd, old.st_uid, old.st_gid)  # root may keep another user's file theirs
        except PermissionError:
            pass  # an ordinary user cannot give a file away: it becomes theirs, as with any editor
    os.fchmod(fd, stat.S_IMODE(old.st_mode))  # after fchown, which clears set-user-ID


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def write_json(path: str, data: Any) -> None:
    """Strict JSON (no NaN or Infinity: those become the strings "nan", "inf", "-inf")."""
    text = json.dumps(_strict(data), indent=1, ensure_ascii=False, allow_nan=False)
    # a lone surrogate (a file name typed in another encoding, in argv) as JSON's own \udcXX escape
    write_bytes(path, (text + "\n").encode("utf-8", "backslashreplace"))


def _strict(value: Any) -> Any:
    """What strict JSON can hold: containers walked, numpy/torch values unwrapped, non-finite
    floats as strings, anything else as its str()."""
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if hasattr(value, "tolist"):
        return _strict(value.tolist())
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _strict(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
