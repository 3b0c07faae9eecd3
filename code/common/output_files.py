"""Every file the suite writes (--json, --save-figs, --report, the judge's --json), written one way.

    write_json(path, data)                 # at the end: whole, or not at all

(The flags' paths are checked before any work by `common.output_paths`.)

What the path names decides how it is written, so an output never replaces what it points at:
  "-" (or /dev/stdout, /dev/fd/N, /proc/self/fd/N): this process's own file descriptor, written
      at its current position (a shell's `> out.txt` keeps everything printed before); then
      `common.output_paths.divert_stdout` sends the human-readable text to stderr, so stdout holds
      only the file;
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
import stat
import sys
import tempfile
import time
from typing import Any

from common.error_types import RunFailure
from common.launch import is_rank0
from common.output_paths import resolve_output
from common.script_end import signals_held

_TMP_NAME_ROOM = 200  # bytes of a target's name its temporary file repeats (NAME_MAX is 255 here)
_FIFO_WAIT_S = 30.0  # how long a FIFO may wait for its reader at the end of a run


# ---- writing ----------------------------------------------------------------------------------

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


def write_bytes(path: str, data: bytes) -> None:
    """Write `data` to what `path` names (see the module's docstring); RunFailure naming the file
    when it cannot be written."""
    if not is_rank0():
        return
    kind, target = resolve_output(path)
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
