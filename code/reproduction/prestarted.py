"""Run scripts in processes forked from an interpreter that has already imported torch.

    with Prestarted() as runner:
        proc = runner.run([sys.executable, "code/lecture15/02_buckets.py", "--quick"], timeout=120)
        live = runner.popen([sys.executable, "tests/probes/launch_probe.py", "sleep", "3"])  # as Popen

A script's own start is one `import torch`, 1-4 s on a laptop: a reproduction runs some thirty
scripts and the tests a few hundred, so starting each from scratch is most of their time. A
prestarted interpreter imports torch and the shared modules once, then forks a child per run. The
child takes the run's argv, working folder, environment and output files and runs the file as
`__main__`: the same code `python FILE ARGS` runs, in a real process of its own that starts its
own ranks. Where that could differ from a fresh start, a fresh one runs instead:

- the environment asked for is not the one the interpreter started with (torch reads some
  variables when it is imported);
- the imports wrote anything (a warning a fresh run would show among its own lines);
- the file or the folder does not exist (Python's own error, as a fresh start words it);
- the runner is busy with another run (two at once from two threads, or a popen not yet ended);
- the interpreter has died, or a run was cut short (a timeout, Ctrl-C) and its reply left unread.

What stays different: the hash seed (the interpreter's, for every run), stdin (/dev/null), and
output that a process the script left behind writes after the script ended (subprocess.run waits
for it on the pipe; here it goes to a file already read). A popen's process is the interpreter's
child, not the caller's: its pid may be signalled, but only the interpreter can reap it.

reproduce.py and the tests run scripts this way; bench/bench_scripts.py times fresh starts, which
is what a student sees. A child's exit status is the one a fresh interpreter gives: SystemExit's
code, 1 after an uncaught exception (with its traceback), killed by SIGINT after a Ctrl-C that
nothing caught, and it runs the atexit functions first. The interpreter's side (the fork, the
child's set-up, its end) is `reproduction.prestarted_serve`.
"""

from __future__ import annotations

import contextlib
import json
import locale
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common.leftovers import owned_folder

# What every real script imports: enough for DDP's constructor and the launcher's forked ranks.
# Not `common`: its import sets sys.excepthook, which a script that does not import it must not get.
PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", "numpy")
# Variables that may differ from the interpreter's and still fork: ours (COURSE_MAX_RANKS, …, read
# when a script runs, never by torch) and the one a test session changes for every test.
FORKS_WITH = ("COURSE_", "PYTEST_CURRENT_TEST")
# The interpreter's side, loaded by path: it imports nothing of code/ that a script would import
# (common/process_exit.py it loads by path as well, kept out of sys.modules).
# `del sys.path[0]`: -c puts the caller's folder first, where a stray glob.py would shadow stdlib.
_BOOT = ("import sys; del sys.path[0]; "
         "import importlib.util as u; s = u.spec_from_file_location('prestarted_serve', {!r}); "
         "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve()"
         ).format(str(Path(__file__).resolve().with_name("prestarted_serve.py")))


class Prestarted:
    """One prestarted interpreter and the runs it forks, one at a time; close() (or leaving the
    `with` block) ends it. A run it cannot take runs fresh (subprocess.run)."""

    def __init__(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = PRELOAD) -> None:
        self.env = dict(os.environ if env is None else env)
        self._lock = threading.Lock()
        self._tmp = owned_folder("prestarted-")   # a killed run's folder is removed here
        self._log = Path(self._tmp.name) / "imports.txt"
        requests_r, self._requests = os.pipe()
        self._replies, replies_w = os.pipe()
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(requests_r), str(replies_w), *preload], env=self.env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(requests_r, replies_w))
        os.close(requests_r)
        os.close(replies_w)
        self._ready: bool | None = None
        self._live: Forked | None = None   # the popen being served

    def run(self, argv: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        """subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout),
        with argv = [python, FILE, ARGS...]; forked from the prestarted interpreter when it can be."""
        env = dict(os.environ if env is None else env)
        if self._lock.acquire(blocking=False):
            try:
                if self._can_fork(argv, cwd, env):
                    return self._forked(argv, os.path.abspath(cwd or os.getcwd()), env, timeout)
            except InterpreterGone:
                self._ready = False   # the interpreter died: this run and every later one start fresh
            finally:
                self._lock.release()
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def popen(self, argv: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
              start_new_session: bool = False) -> Any:
        """subprocess.Popen(argv, cwd=cwd, env=env, stdout=PIPE, stderr=PIPE, text=True,
        start_new_session=...), forked when it can be: for a caller that reads the output as it
        comes or signals the process. The runner serves nothing else until it has ended (waited)."""
        env = dict(os.environ if env is None else env)
        if self._lock.acquire(blocking=False):
            handed = False
            try:
                if self._can_fork(argv, cwd, env):
                    folder = os.path.abspath(cwd or os.getcwd())
                    self._live = Forked(self, argv, folder, env, start_new_session)
                    handed = True   # it releases the lock once it has ended
                    return self._live
            except InterpreterGone:
                self._ready = False
            finally:
                if not handed:
                    self._lock.release()
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=start_new_session)

    def close(self) -> None:
        if self._requests < 0:
            return
        if self._live is not None and self._live.returncode is None:   # a popen not yet waited for
            with contextlib.suppress(Exception):
                self._live.kill()
                self._live.wait(timeout=10)
        self.stop_importing()
        os.close(self._requests)   # the interpreter ends when it reads the end of its requests
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._replies)
        self._requests = self._replies = -1
        self._tmp.cleanup()

    def stop_importing(self) -> None:
        """Kill the interpreter if it has forked nothing yet (it may be importing still: there is
        nothing of it to wait for); from any thread: one waiting for its imports finds it unusable."""
        if self._ready is None:
            self._proc.kill()

    def __enter__(self) -> Prestarted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def usable(self) -> bool:
        """Whether it imported everything, writing nothing on stderr (waits for the imports)."""
        if self._ready is None:
            try:
                self._ready = self._read_reply(None) == {"ready": True} and not self._log.read_bytes()
            except InterpreterGone:
                self._ready = False
        return self._ready

    def _can_fork(self, argv: list[str], cwd: str | Path | None, env: dict[str, str]) -> bool:
        """A plain `python FILE ...` whose file and folder exist (else a fresh start gives the
        error as Python words it), in the interpreter's environment."""
        plain = argv[:1] == [sys.executable] and len(argv) > 1 and not argv[1].startswith("-")
        folder = os.path.abspath(cwd or os.getcwd())
        return (plain and os.path.isdir(folder) and os.path.isfile(os.path.join(folder, argv[1]))
                and _comparable(env) == _comparable(self.env) and self.usable)

    def _forked(self, argv: list[str], cwd: str, env: dict[str, str],
                timeout: float | None) -> subprocess.CompletedProcess:
        # Files of this run's own: a process the script left behind writes into these, never into
        # the next run's output.
        out, err = (tempfile.mkstemp(dir=self._tmp.name, suffix=name)[1] for name in (".out", ".err"))
        pid = self._submit({"argv": argv[1:], "cwd": cwd, "env": env, "stdout": out, "stderr": err})
        try:
            reply = self._read_reply(timeout)
        except BaseException as interrupted:
            self._end(pid, interrupted)
            if isinstance(interrupted, subprocess.TimeoutExpired):
                raise subprocess.TimeoutExpired(argv, timeout or 0) from None
            raise
        try:
            done = subprocess.CompletedProcess(argv, reply["rc"], _text(Path(out)), _text(Path(err)))
            done.forked = True   # type: ignore[attr-defined]  (its time lacks the start's imports)
            return done
        finally:
            os.unlink(out)
            os.unlink(err)

    def _submit(self, request: dict[str, Any]) -> int:
        """Hand the interpreter a run; the child's pid. Interrupted before that reply, the runner
        forks no more: the replies left unread would be taken for the next run's."""
        try:
            os.write(self._requests, json.dumps(request).encode() + b"\n")
        except OSError as broken:
            raise InterpreterGone(str(broken)) from None
        try:
            return self._read_reply(None)["pid"]
        except BaseException:
            self._ready = False
            raise

    def _end(self, pid: int, interrupted: BaseException) -> None:
        """As subprocess.run ends its child on a timeout, Ctrl-C or SIGTERM: after a Ctrl-C it gives
        the child 0.25 s to clean up (it had the SIGINT too), then kills it. Any reply left unread
        would be taken for the next run's, so the interpreter serves no more runs after this."""
        self._ready = False
        with contextlib.suppress(Exception):
            if isinstance(interrupted, KeyboardInterrupt):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._read_reply(0.25)
                    return
            os.kill(pid, signal.SIGKILL)

    def _read_reply(self, timeout: float | None) -> dict[str, Any]:
        line = b""
        while not line.endswith(b"\n"):
            if not select.select([self._replies], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("prestarted", timeout or 0)
            chunk = os.read(self._replies, 1)
            if not chunk:
                raise InterpreterGone(f"the prestarted interpreter ended (exit {self._proc.wait()}): "
                            f"{self._log.read_text(errors='replace')[-500:]}")
            line += chunk
        return json.loads(line)


class Forked:
    """A child forked by the interpreter, as subprocess.Popen(..., stdout=PIPE, stderr=PIPE,
    text=True) shows one: pid, stdout and stderr (named pipes, read as the output comes), poll,
    wait, communicate, send_signal, terminate, kill, returncode. The interpreter reaps it and
    replies its exit status; the runner serves again once that is read."""

    forked = True

    def __init__(self, runner: Prestarted, argv: list[str], cwd: str, env: dict[str, str],
                 new_session: bool) -> None:
        self.args, self.returncode, self._runner = argv, None, runner
        self._texts: dict[str, str] = {}
        self._readers: list[threading.Thread] = []
        folder = tempfile.mkdtemp(dir=runner._tmp.name)
        paths = [os.path.join(folder, name) for name in ("out", "err")]
        ends: list[int] = []
        try:
            for path in paths:
                os.mkfifo(path)
                ends.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # opens with no writer yet
                os.set_blocking(ends[-1], True)
            self.pid = runner._submit({"argv": argv[1:], "cwd": cwd, "env": env, "stdout": paths[0],
                                       "stderr": paths[1], "new_session": new_session})
            encoding = locale.getpreferredencoding(False)
            self.stdout, self.stderr = (open(fd, encoding=encoding) for fd in ends)
        except BaseException:
            for fd in ends:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if hasattr(self, "pid"):   # started, but not handed to the caller: end it, fork no more
                runner._ready = False
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)   # what is open stays open

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                reply = self._runner._read_reply(timeout)
            except subprocess.TimeoutExpired:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            except InterpreterGone:   # the interpreter died: its child's status is lost with it
                self._runner._ready = False
                self._runner._lock.release()
                raise
            self.returncode = reply["rc"]
            self._runner._lock.release()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both outputs to their end, then the exit status; TimeoutExpired leaves it going, as
        Popen's does, for a later call to go on with."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._readers:
            self._readers = [threading.Thread(target=self._drain, args=(name,), daemon=True)
                             for name in ("stdout", "stderr")]
            for reader in self._readers:
                reader.start()
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for text in self._texts.values():
            if isinstance(text, BaseException):
                raise text
        return self._texts["stdout"], self._texts["stderr"]

    def _drain(self, name: str) -> None:
        stream = getattr(self, name)
        try:
            self._texts[name] = stream.read()
        except (OSError, ValueError, UnicodeDecodeError) as err:   # raised by communicate, as Popen's
            self._texts[name] = err   # type: ignore[assignment]
        stream.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:   # not yet reaped: the pid is still the child's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class InterpreterGone(Exception):
    """The prestarted interpreter has ended: its runs start fresh."""


def _text(path: Path) -> str:
    """A file's bytes as subprocess.run(text=True) gives a pipe's: the locale's encoding, strict,
    every line ending a newline."""
    data = path.read_bytes().decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


def _comparable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(FORKS_WITH)}


