"""A case's own folder: where the solution's process runs and writes, and what it wrote elsewhere.

    folder = CaseFolder.make(solution_path)   # in the judge, before the case's processes start
    folder.enter()                            # in the solution's process, before its file loads
    notes = folder.settle()                   # in the judge, once nothing of the case is left

The solution's process (and every rank forked from it) works in a fresh temporary folder: its
current directory, TMPDIR and Python's tempfile all point there, so `open("log.txt", "w")` or a
checkpoint saved to a relative path lands there and goes when the case ends. Its own folder (the
one holding solution.py) is first on its import path, as when a student runs `python solution.py`,
so a helper module beside it imports; no bytecode cache is written beside it.

Writes that go elsewhere are noticed two ways. Python's audit hook in the solution's process sees
every file it opens for writing, creates, renames or removes through Python (open, os, shutil,
pathlib), anywhere, and appends one line per path to a record in the case's folder (before the
operation runs, so it knows whether the path existed). The judge reads that record when the case
is over: a file the case created outside its folder is removed and said, one it changed or removed
is said (and left: the judge keeps no copy). Writes from C++ (torch.save) raise no audit event, so
the judge also compares the listings of the places a stray file would land (the solution's folder,
the folder the judge runs in, practice/) before and after the case, and says what changed there
without removing it: another program may have written it. The record is kept in the solution's
process, which can edit it: like the rest of the judge, this catches accidents, not intent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.leftovers import make_owned

RECORD = ".judge-writes"          # the audit hook's lines, inside the case's folder
MAX_RECORD_BYTES = 1 << 20        # what the judge reads of it
MAX_NOTES = 6                     # notes per case; past that, how many more
SHOWN_CHARS = 60                  # a path in a note
IGNORED = ("/dev/", "/proc/", "/sys/")          # devices and the kernel's views: nothing to leave behind
# What each audit event writes: the positions of its path arguments, and what it does to them.
EVENTS = {"open": ((0, "write"),), "os.mkdir": ((0, "write"),), "os.symlink": ((1, "write"),),
          "os.link": ((1, "write"),), "os.truncate": ((0, "write"),),
          "os.rename": ((0, "remove"), (1, "write")), "os.remove": ((0, "remove"),),
          "os.rmdir": ((0, "remove"),), "shutil.rmtree": ((0, "remove"),)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _writes(event: str, args: tuple) -> bool:
    """Whether an "open" event opens for writing (other events in EVENTS always change something)."""
    if event != "open":
        return True
    mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _absolute(path: Any) -> str | None:
    """The absolute, symlink-free path an audited call names (None: a file descriptor, or junk)."""
    if isinstance(path, int) or path is None:
        return None
    try:
        text = os.fsdecode(path)
        return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(text))), os.path.basename(text))
    except (TypeError, ValueError, OSError):
        return None


def _record(record: int, event: str, path: str, what: str) -> None:
    """One line for a path outside the case's folder that an audited call is about to change;
    nothing for a call that changes nothing there (a folder that exists made again, a missing
    path removed) or that opens a folder (O_TMPFILE: an unnamed file, gone when closed)."""
    existed = os.path.lexists(path)
    if (event == "os.mkdir" and existed) or (what == "remove" and not existed) or (
            event == "open" and os.path.isdir(path)):
        return
    os.write(record, json.dumps({"path": path, "what": what, "existed": existed}).encode() + b"\n")


def _snapshot(places: list[Path]) -> dict[str, tuple]:
    """Each entry of `places` (not recursive): files by (mtime, size), folders by being there (a
    folder's mtime moves whenever anything inside it does)."""
    found: dict[str, tuple] = {}
    for place in places:
        try:
            entries = list(os.scandir(place))
        except OSError:
            continue
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[entry.path] = ("dir",) if entry.is_dir(follow_symlinks=False) else (info.st_mtime_ns,
                                                                                     info.st_size)
    return found


@dataclass
class CaseFolder:
    path: Path                                  # the case's temporary folder
    solution: Path                              # the student's file (absolute)
    places: list[Path] = field(default_factory=list)
    before: dict[str, tuple] = field(default_factory=dict)
    began_ns: int = 0

    @classmethod
    def make(cls, solution: Path) -> CaseFolder:
        practice = Path(__file__).resolve().parents[1]
        places = list(dict.fromkeys([solution.parent, Path.cwd().resolve(), practice]))
        folder = cls(Path(make_owned("judge-case-")).resolve(), solution, places)
        try:
            folder.before, folder.began_ns = _snapshot(places), _now_ns()
        except BaseException:   # the caller never learns of the folder: it goes here (a signal, say)
            shutil.rmtree(folder.path, ignore_errors=True)
            raise
        return folder

    # ---- in the solution's process --------------------------------------------------------------------
    def enter(self) -> None:
        """Work in the case's folder, import from the solution's, record writes elsewhere."""
        os.chdir(self.path)
        os.environ["TMPDIR"] = tempfile.tempdir = str(self.path)
        sys.path.insert(0, str(self.solution.parent))
        sys.dont_write_bytecode = True
        record = os.open(self.path / RECORD, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        inside = str(self.path) + os.sep
        state = threading.local()          # what the hook itself calls must not come back into it

        def hook(event: str, args: tuple) -> None:
            spots = EVENTS.get(event)
            if spots is None or getattr(state, "busy", False) or not _writes(event, args):
                return
            state.busy = True
            try:
                for index, what in spots:
                    path = _absolute(args[index]) if len(args) > index else None
                    if path and not path.startswith((inside, *IGNORED)) and "__pycache__" not in path:
                        _record(record, event, path, what)
            except Exception:  # noqa: BLE001 - the hook must never break the call it watches
                pass
            finally:
                state.busy = False
        sys.addaudithook(hook)

    # ---- in the judge, after the case ------------------------------------------------------------------
    def _records(self) -> dict[str, dict[str, Any]]:
        """Path -> its first record (whether it existed before the case touched it)."""
        try:
            with open(self.path / RECORD, "rb") as f:
                lines = f.read(MAX_RECORD_BYTES).splitlines()
        except OSError:
            return {}
        first: dict[str, dict[str, Any]] = {}
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("path"), str) and os.path.isabs(item["path"]):
                first.setdefault(item["path"], item)
        return first

    def _undo(self, path: str, item: dict[str, Any]) -> str | None:
        """The note for one path the case wrote or removed outside its folder; new files go."""
        if item.get("what") == "remove":
            return f"removed {_shown(path)}" if item.get("existed") and not os.path.lexists(path) else None
        if not os.path.lexists(path):
            return None                    # written and gone again (a temporary file renamed, say)
        if item.get("existed"):
            return f"changed {_shown(path)} (it was there before: left as it is)"
        folder = os.path.isdir(path) and not os.path.islink(path)
        what = f"made the folder {_shown(path)}" if folder else f"wrote {_shown(path)}"
        try:
            if os.lstat(path).st_mtime_ns < self.began_ns:   # older than the case: not its file
                return f"{what} (left: it is older than the case)"
            if folder:
                os.rmdir(path)             # only when empty: what is inside was said on its own
            else:
                os.unlink(path)
        except OSError as err:
            return f"{what} (could not remove it: {err.strerror})"
        return f"{what} (removed)"

    def settle(self) -> list[str]:
        """What the case wrote outside its folder, in words; its new files there removed, the
        case's folder gone."""
        records = self._records()
        undone = {path: self._undo(path, records[path])              # a folder's files before it
                  for path in sorted(records, key=len, reverse=True)}
        notes = [note for _, note in sorted(undone.items()) if note]
        after = _snapshot(self.places)
        for path in sorted(set(after) | set(self.before)):
            if path in records or after.get(path) == self.before.get(path):
                continue
            change = "appeared" if path not in self.before else "is gone" if path not in after else "changed"
            notes.append(f"{_shown(path)} {change} during the case (not through Python: left as it is)")
        shutil.rmtree(self.path, ignore_errors=True)
        return notes[:MAX_NOTES] + ([f"and {len(notes) - MAX_NOTES} more"] if len(notes) > MAX_NOTES else [])


def _shown(path: str) -> str:
    """A path relative to the folder the judge runs in when it is inside it; a long one by its
    last three parts (a note's line stays within 100 columns)."""
    try:
        text = str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        text = path
    return text if len(text) <= SHOWN_CHARS else "…/" + "/".join(Path(path).parts[-3:])[-SHOWN_CHARS:]


def _now_ns() -> int:
    """A second before now: file times come from a coarser clock than time.time_ns, so a file the
    case wrote is never older than this."""
    return time.time_ns() - 1_000_000_000
