"""Problem 113 that, as it is imported, finds its keeper's pipe to the judge through
/proc/<keeper>/fd, writes a forged header there ({"exit_code": "x"}, then a "fail" that is not a
dict) and kills the keeper (from the review: int("x") in the judge ended the run). Every case must
fail, saying the process that ran it was killed or tampered with."""

import os
import signal


def _own_pipes() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def _write_ends(pid: int) -> list[str]:
    """The pipes `pid` holds open for writing that this process does not hold."""
    mine, found = _own_pipes(), []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            flags = int(open(f"/proc/{pid}/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
        except OSError:
            continue
        if target.startswith("pipe:") and target not in mine and flags & 3 == os.O_WRONLY:
            found.append(f"/proc/{pid}/fd/{fd}")
    return found


def _forge() -> None:
    keeper = os.getppid()
    forged = os.environ.get("FORGED_HEADER", '{"exit_code": "x"}').encode()
    for path in _write_ends(keeper):
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"L" + forged + b"\n")
        os.close(fd)
    os.kill(keeper, signal.SIGKILL)


_forge()


def assign_buckets(*args):
    return []
