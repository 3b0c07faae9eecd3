"""Outputs never replace what their path points at (common/output_files.py): a device node, a FIFO and a
symlink stay what they were; a regular file is written whole, keeping its mode and owner; "-" is
standard output; an empty path or a missing folder is a usage error; a failed or interrupted write
leaves no file and no temporary file, and says which file failed.

Every node here is made in a temporary folder (os.mknod, os.mkfifo): no test touches /dev.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, python

from common import output_files, output_paths
from common.error_types import RunFailure, UsageError

MODEL = "lecture15/03_overlap.py"   # model only: a second or so, writes --json and draws figures
NULL, FULL = (1, 3), (1, 7)          # the major/minor numbers of Linux's null and full devices


def node(folder: Path, name: str, numbers: tuple[int, int]) -> Path:
    """A character device like /dev/null or /dev/full, made in `folder` (needs root: else skip)."""
    path = folder / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    except PermissionError:
        pytest.skip("making a device node needs root (CI runs as root)")
    return path


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return python(ROOT / "code" / MODEL, "--quick", *args, env=env, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess, rc: int) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == rc and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp"))


# ---- device nodes and FIFOs are written to, never replaced ----------------------------------------

def test_a_device_node_stays_a_device(tmp_path: Path) -> None:
    null = node(tmp_path, "null", NULL)
    proc = run("--json", str(null))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.lstat(null).st_mode), "the device node was replaced by a file"
    assert leftovers(tmp_path) == []


def test_a_full_device_is_one_line_naming_the_file(tmp_path: Path) -> None:
    full = node(tmp_path, "full", FULL)
    line = one_error_line(run("--json", str(full)), 1)
    # the one-line stderr contract: the line names the file and the system's reason
    assert f"writing {full} failed: No space left on device" in line
    assert line.startswith("03_overlap.py: error:")
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    assert leftovers(tmp_path) == []


def test_the_guard_itself_keeps_the_node(tmp_path: Path) -> None:
    """In-process: write_bytes on a node writes to it; with the node kind removed from _resolve
    (the guard) the rename would have replaced it, which this test would see."""
    null = node(tmp_path, "null", NULL)
    assert output_paths.resolve_output(str(null)) == ("node", str(null))
    output_files.write_bytes(str(null), b"x" * 100_000)
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    proc = run("--json", str(fifo))
    reader.join(30)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(received[0])["script"] == "03_overlap.py"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_whose_reader_leaves_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)

    def read_one_byte_and_leave() -> None:
        with open(fifo, "rb") as fh:
            fh.read(1)

    reader = threading.Thread(target=read_one_byte_and_leave)
    reader.start()
    with pytest.raises(RunFailure, match=f"writing {fifo} failed: Broken pipe"):
        output_files.write_bytes(str(fifo), b"x" * (4 << 20))   # more than a pipe holds
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# ---- symlinks, modes, owners ----------------------------------------------------------------------

def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target.name)
    output_files.write_json(str(link), {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "made.json")
    output_files.write_json(str(dangling), {"b": 2})
    assert dangling.is_symlink() and json.loads((tmp_path / "made.json").read_text()) == {"b": 2}
    assert leftovers(tmp_path) == []


def test_an_existing_file_keeps_its_mode_and_owner(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("old")
    os.chmod(out, 0o600)
    owner = os.geteuid()
    if owner == 0:
        os.chown(out, 65534, 65534)   # nobody's file stays nobody's when root writes it
    proc = run("--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.stat().st_uid == (65534 if owner == 0 else owner)
    assert json.loads(out.read_text())["script"] == "03_overlap.py"


def test_a_new_file_gets_the_usual_mode(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    output_files.write_json(str(out), {})
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


# ---- standard output, empty paths, missing folders ------------------------------------------------

def test_dash_is_standard_output_and_the_text_moves_to_stderr() -> None:
    proc = run("--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["script"] == "03_overlap.py"   # stdout holds the JSON only
    assert "Part 1" in proc.stderr


def test_own_descriptors_are_written_in_place() -> None:
    assert output_paths.resolve_output("-") == ("fd", 1)
    assert output_paths.resolve_output(f"/proc/{os.getpid()}/fd/2") == ("fd", 2)
    assert output_paths.resolve_output("/proc/self/fd/1") == ("fd", 1)


@pytest.mark.parametrize("flag", ["--json", "--save-figs"])
def test_an_empty_path_is_a_usage_error(flag: str) -> None:
    proc = run(flag, "")
    # the one-line stderr contract: the usage error says what is wrong
    assert "an empty path" in one_error_line(proc, 2) and proc.stdout == ""


def test_a_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    proc = run("--json", str(tmp_path / "no" / "such" / "out.json"))
    # the one-line stderr contract, for each flag
    assert "no such folder" in one_error_line(proc, 2)
    assert not (tmp_path / "no").exists()
    proc = run("--save-figs", str(tmp_path / "no" / "figs"))
    # (the same line for --save-figs)
    assert "no such folder" in one_error_line(proc, 2)
    with pytest.raises(UsageError):
        output_paths.check_output_dir("-", "--save-figs")


def test_figures_go_into_a_new_folder_and_through_a_symlinked_one(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "figs").symlink_to(real)
    proc = run("--save-figs", str(tmp_path / "figs"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "figs").is_symlink() and list(real.glob("*.png"))
    proc = run("--save-figs", str(tmp_path / "new"))
    assert proc.returncode == 0 and list((tmp_path / "new").glob("*.png"))


# ---- reproduce.py's pages ---------------------------------------------------------------------------

def reproduce(*args: str) -> subprocess.CompletedProcess:
    return python(ROOT / "code" / "reproduce.py", *args, timeout=300)


def test_reproduce_refuses_an_empty_report_path_and_a_run_of_nothing(tmp_path: Path) -> None:
    # the one-line stderr contract: the usage error says what is wrong
    assert "an empty path" in one_error_line(reproduce("--report", ""), 2)
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("a good report")
    proc = reproduce("--only", "zzz", "--report", str(report))
    # the one-line stderr contract: the usage error says what is wrong
    assert "matches no script" in one_error_line(proc, 2)
    assert (report / "index.html").read_text() == "a good report"


def test_sigterm_leaves_no_temporary_file(tmp_path: Path) -> None:
    """SIGTERM in the middle of a reproduction: its temporary folder and any half-written page are
    gone (the temporary folder lives in TMPDIR, here a folder of the test's own)."""
    tmp, report = tmp_path / "tmp", tmp_path / "report"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, str(ROOT / "code" / "reproduce.py"), "--quick",
                             "--only", "lecture15/0", "--report", str(report)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # torch's own cache (torchinductor_USER, kept by design) elsewhere: TMPDIR
                            # then holds only what reproduce.py makes
                            env=dict(os.environ, TMPDIR=str(tmp),
                                     TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch_cache")))
    assert proc.stdout.readline().startswith("[ 1/")   # the first script is running
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and err.strip().splitlines()[-1] == "terminated", err
    assert list(tmp.iterdir()) == []
    assert not report.exists() or leftovers(report) == []


# ---- what an independent review found (each case failed before its fix) -----------------------------

def test_dotdot_after_a_symlinked_folder_goes_where_the_shell_would(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "inner")
    monkeypatch.chdir(tmp_path)
    output_files.write_json("link/../out.json", {"a": 1})        # the shell: real/inner/.. = real
    assert (tmp_path / "real" / "out.json").is_file() and not (tmp_path / "out.json").exists()


def test_a_symlink_to_a_folder_not_made_yet(tmp_path: Path) -> None:
    (tmp_path / "figs").symlink_to(tmp_path / "made-later")
    output_paths.check_output_dir(str(tmp_path / "figs"), "--save-figs")
    output_files.make_output_dir(str(tmp_path / "figs"))
    assert (tmp_path / "made-later").is_dir() and (tmp_path / "figs").is_symlink()


def test_a_fifo_nobody_reads_fails_in_one_line(tmp_path: Path, monkeypatch) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(output_files, "_FIFO_WAIT_S", 0.3)
    with pytest.raises(RunFailure, match="nothing read it within 0.3 s"):
        output_files.write_bytes(str(fifo), b"{}")


def test_sockets_closed_descriptors_and_trailing_slashes_are_refused(tmp_path: Path) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s"))
    with pytest.raises(UsageError, match="is a socket"):
        output_paths.check_output_file(str(tmp_path / "s"), "--json")
    sock.close()
    free = os.open(os.devnull, os.O_RDONLY)
    os.close(free)   # a descriptor number that is not open now
    with pytest.raises(UsageError, match=f"descriptor {free} is not open"):
        output_paths.check_output_file(f"/proc/self/fd/{free}", "--json")
    with pytest.raises(UsageError, match="ends with /"):
        output_paths.check_output_file(str(tmp_path / "new") + "/", "--json")


def test_a_proc_link_to_a_regular_file_is_truncated(tmp_path: Path) -> None:
    """Another process's descriptor (/proc/<pid>/fd/N) is opened as the shell's `>` would: a
    regular file behind it loses its old bytes. Our own (/proc/self/fd/N, /proc/thread-self/fd/N,
    /dev/fd/N, -) is written at its position instead, as `>&N` would."""
    target = tmp_path / "t.txt"
    target.write_text("0123456789ABCDEF")
    with open(target, "r+") as held:
        other = subprocess.Popen(["sleep", "30"], stdout=held)
    try:
        output_files.write_bytes(f"/proc/{other.pid}/fd/1", b"xy")
    finally:
        other.kill()
        other.wait()
    assert target.read_text() == "xy"
    assert output_paths.resolve_output("/proc/thread-self/fd/2") == ("fd", 2)


def test_hard_links_and_setuid_bits_are_kept(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("old")
    os.link(a, b)
    output_files.write_json(str(a), {"new": 1})
    assert json.loads(b.read_text()) == {"new": 1} and os.stat(a).st_ino == os.stat(b).st_ino
    c = tmp_path / "c.json"
    c.write_text("old")
    os.chmod(c, 0o4750)
    output_files.write_json(str(c), {})
    assert stat.S_IMODE(c.stat().st_mode) == 0o4750


def test_dash_on_a_silent_rank_stays_silent_and_a_closed_pipe_is_141(monkeypatch) -> None:
    proc = run("--json", "-", env={"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "test"})
    assert proc.stdout == "" and "Part 1" not in proc.stderr
    script = ROOT / "code" / MODEL
    closed = subprocess.run(["bash", "-c", f"{sys.executable} {script} --quick --json - | true; "
                             "exit ${PIPESTATUS[0]}"], capture_output=True, text=True, timeout=120)
    # the tables went to stderr (--json -); no line says the closed pipe was an error
    assert closed.returncode == 141 and ": error:" not in closed.stderr, closed.stderr[-300:]


# ---- names the file system cannot hold, folders two runs make at once -------------------------------

@pytest.mark.parametrize("name", ["a" * 300, "é" * 130], ids=["300-bytes", "260-bytes-in-130-characters"])
def test_a_name_the_file_system_cannot_hold_is_a_short_usage_error(tmp_path: Path, name: str) -> None:
    for flag in ("--json", "--save-figs"):
        line = one_error_line(run(flag, str(tmp_path / name)), 2)
        # the one-line stderr contract: the flag and the name's length, short
        assert f"{flag}: a name of {len(name.encode())} bytes" in line and len(line) < 200, line
    line = one_error_line(reproduce("--only", "03_costs", "--report", str(tmp_path / name)), 2)
    # the one-line stderr contract: the file system's limit, short
    assert "the file system holds 255" in line and len(line) < 200, line
    assert not list(tmp_path.iterdir())


def test_a_name_of_the_longest_length_is_written_whole(tmp_path: Path) -> None:
    """255 bytes is a name the file system holds: its temporary file must fit too."""
    target = tmp_path / ("b" * 255)
    assert run("--json", str(target)).returncode == 0
    assert json.loads(target.read_text())["script"] and leftovers(tmp_path) == []


def test_a_folder_another_run_made_first_is_used(tmp_path: Path, monkeypatch) -> None:
    """Check-then-create raced: the other run's mkdir lands between our check and ours."""
    target, mkdir = tmp_path / "report", os.mkdir

    def the_other_run_first(path: str, *args: object) -> None:
        mkdir(path)
        mkdir(path, *args)          # ours, second: FileExistsError

    monkeypatch.setattr(os, "mkdir", the_other_run_first)
    output_files.make_output_dir(str(target))
    assert target.is_dir()


DELAYED_MKDIR = """
import os, sys, time, runpy
mkdir = os.mkdir
def late(path, *args, **kwargs):
    time.sleep(0.5)       # both runs have checked that the folder is not there yet
    return mkdir(path, *args, **kwargs)
os.mkdir = late
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_two_reproductions_into_one_new_folder_both_succeed(tmp_path: Path) -> None:
    wrapper, report = tmp_path / "late_mkdir.py", tmp_path / "report"
    wrapper.write_text(DELAYED_MKDIR, encoding="utf-8")
    args = [sys.executable, str(wrapper), str(ROOT / "code" / "reproduce.py"), "--only", "03_costs",
            "--quick", "--report", str(report)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "code")}
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert (report / "index.html").stat().st_size > 1000 and leftovers(report) == []


def test_names_the_review_found_fail_before_work_in_one_short_line(tmp_path: Path) -> None:
    """Through a symlink to a name too long, a path near PATH_MAX (no room for the temporary
    file), a newline in a path, a value of quotes and spaces: each exit 2, one short line."""
    (tmp_path / "link.json").symlink_to(tmp_path / ("a" * 256))
    (tmp_path / "dir_link").symlink_to(tmp_path / ("a" * 256))
    deep = tmp_path
    while len(os.fsencode(str(deep))) < 3900:
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    for args in (["--json", str(tmp_path / "link.json")], ["--save-figs", str(tmp_path / "dir_link")],
                 ["--json", str(deep / ("b" * 100))], ["--json", str(tmp_path / "no\nsuch" / "x.json")],
                 ["--json", str(tmp_path / "nope" / ("it's a b " * 2000) / "x.json")]):
        line = one_error_line(run(*args), 2)
        assert len(line) < 600, line[:200]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["link.json", "dir_link", "d" * 200])


def test_a_name_in_another_encoding_is_written(tmp_path: Path) -> None:
    """A Latin-1 byte in a file name: argv holds a lone surrogate, which --json records escaped."""
    name = os.fsdecode(b"caf\xe9.json")
    assert run("--json", str(tmp_path / name)).returncode == 0
    assert json.loads((tmp_path / name).read_text(encoding="utf-8"))["script"]
