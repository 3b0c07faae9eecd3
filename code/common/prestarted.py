"""Run scripts in processes forked from an interpreter that has already imported torch.

    with Prestarted() as runner:
        proc = runner.run([sys.executable, "code/lecture15/02_buckets.py", "--quick"], timeout=120)

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
- the runner is busy with another run (two runs asked for at once from two threads);
- the interpreter has died, or a run was cut short (a timeout, Ctrl-C) and its reply left unread.

What stays different: the hash seed (the interpreter's, for every run), stdin (/dev/null), and
output that a process the script left behind writes after the script ended (subprocess.run waits
for it on the pipe; here it goes to a file already read).

reproduce.py and the tests run scripts this way; bench/bench_scripts.py times fresh starts, which
is what a student sees. A child's exit status is the one a fresh interpreter gives: SystemExit's
code, 1 after an uncaught exception (with its traceback), killed by SIGINT after a Ctrl-C that
nothing caught, and it runs the atexit functions first.
"""

from __future__ import annotations

import contextlib
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# What every real script imports: enough for DDP's constructor and the launcher's forked ranks.
# Not `common`: its import sets sys.excepthook, which a script that does not import it must not get.
PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", "numpy")
# Variables that may differ from the interpreter's and still fork: ours (COURSE_MAX_RANKS, …, read
# when a script runs, never by torch) and the one a test session changes for every test.
FORKS_WITH = ("COURSE_", "PYTEST_CURRENT_TEST")
# This file, loaded by path: the interpreter imports nothing of code/ that a script would import.
# `del sys.path[0]`: -c puts the caller's folder first, where a stray glob.py would shadow stdlib.
_BOOT = ("import sys; del sys.path[0]; "
         "import importlib.util as u; s = u.spec_from_file_location('prestarted', {!r}); "
         "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve()"
         ).format(str(Path(__file__).resolve()))


class Prestarted:
    """One prestarted interpreter and the runs it forks, one at a time; close() (or leaving the
    `with` block) ends it. A run it cannot take runs fresh (subprocess.run)."""

    def __init__(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = PRELOAD) -> None:
        self.env = dict(os.environ if env is None else env)
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="prestarted-")
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

    def run(self, argv: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        """subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout),
        with argv = [python, FILE, ARGS...]; forked from the prestarted interpreter when it can be."""
        env = dict(os.environ if env is None else env)
        if self._lock.acquire(blocking=False):
            try:
                if self._can_fork(argv, cwd, env):
                    return self._forked(argv, os.path.abspath(cwd or os.getcwd()), env, timeout)
            except _Gone:
                self._ready = False   # the interpreter died: this run and every later one start fresh
            finally:
                self._lock.release()
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def close(self) -> None:
        if self._requests < 0:
            return
        os.close(self._requests)   # the interpreter ends when it reads the end of its requests
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._replies)
        self._requests = self._replies = -1
        self._tmp.cleanup()

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
            except _Gone:
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
        request = {"argv": argv[1:], "cwd": cwd, "env": env, "stdout": out, "stderr": err}
        try:
            os.write(self._requests, json.dumps(request).encode() + b"\n")
        except OSError as broken:
            raise _Gone(str(broken)) from None
        pid = self._read_reply(None)["pid"]
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
                raise _Gone(f"the prestarted interpreter ended (exit {self._proc.wait()}): "
                            f"{self._log.read_text(errors='replace')[-500:]}")
            line += chunk
        return json.loads(line)


class _Gone(Exception):
    """The prestarted interpreter has ended: its runs start fresh."""


def _text(path: Path) -> str:
    """A file's bytes as subprocess.run(text=True) gives a pipe's: the locale's encoding, strict,
    every line ending a newline."""
    data = path.read_bytes().decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


def _comparable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(FORKS_WITH)}


# ---- the prestarted interpreter's side ---------------------------------------------------------

def serve() -> None:
    """Import the modules named after the two descriptors, say ready, then fork a child for each
    request until the requests end."""
    requests, replies = (int(fd) for fd in sys.argv[1:3])
    for name in sys.argv[3:]:
        __import__(name)
    base_path = [p for p in sys.path if p]   # without -c's "" (the folder it started in)
    reply = _replier(replies)
    reply({"ready": True})
    with os.fdopen(requests, "rb") as lines:
        for line in lines:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(replies)
                os.close(requests)
                _child(request, base_path)   # never returns
            reply({"pid": pid})
            reply({"rc": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])})


def _replier(fd: int):  # type: ignore[no-untyped-def]
    def reply(message: dict[str, Any]) -> None:
        os.write(fd, json.dumps(message).encode() + b"\n")
    return reply


def _child(request: dict[str, Any], base_path: list[str]) -> None:
    """Become `python FILE ARGS` run in `cwd` with `env`, its output into the two files."""
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _reseed()
    script = os.path.abspath(request["argv"][0])  # relative to cwd, as python resolves it
    sys.argv = list(request["argv"])               # argv[0] as typed; __file__ absolute, as Python
    sys.path[:] = [os.path.dirname(os.path.realpath(script)), *base_path]
    code: int = 0
    interrupted = False
    try:
        _run_as_main(script)
    except SystemExit as exit_:
        code = _exit_status(exit_.code)
    except KeyboardInterrupt as err:
        _uncaught(err)
        interrupted = True
    except BaseException as err:  # noqa: BLE001 - what a fresh interpreter does with it: traceback, 1
        _uncaught(err)
        code = 1
    _finish(code, interrupted)


def _run_as_main(script: str) -> None:
    """Run the file as Python runs `python FILE`: in a module that is `__main__` (and, as for
    multiprocessing's spawn, `__mp_main__`) until the process ends, so that pickling its classes
    works in spawned ranks and at exit alike."""
    import builtins
    import importlib.machinery
    import io
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __cached__=None, __package__=None, __spec__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", script),
                         __builtins__=builtins)
    with io.open_code(script) as source:
        code = compile(source.read(), script, "exec", dont_inherit=True)  # not this file's __future__
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main
    exec(code, main.__dict__)


def _reseed() -> None:
    """A fresh interpreter seeds `random` and numpy's global generator from the OS: so does each
    child, instead of every run drawing the interpreter's one sequence. (The hash seed cannot
    change after start: every forked run shares the interpreter's.)"""
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def _uncaught(err: BaseException) -> None:
    """sys.excepthook with the traceback a fresh run shows: from the script's frame on, without
    this file's."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    sys.excepthook(type(err), err.with_traceback(tb), tb)  # Python prints the exception's own


def _exit_status(code: object) -> int:
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _finish(code: int, interrupted: bool) -> None:
    """Interpreter shutdown as a fresh process has it: non-daemon threads joined, atexit functions
    run, streams flushed; then the exit status, or death by SIGINT after an uncaught Ctrl-C."""
    import atexit
    import gc

    steps = (threading._shutdown, atexit._run_exitfuncs,  # type: ignore[attr-defined]
             lambda: sys.modules["__main__"].__dict__.clear(), gc.collect,   # files left open: flushed
             lambda: [s.flush() for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) if s])
    for step in steps:   # one by one: a Ctrl-C or a failure in one leaves the rest to run
        try:
            step()
        except BaseException:  # noqa: BLE001 - reported, as Python reports a failing exit function
            sys.excepthook(*sys.exc_info())
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)
