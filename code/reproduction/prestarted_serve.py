"""The prestarted interpreter's side of `reproduction.prestarted`: import the preloaded modules once,
then fork a child for each request and make it `python FILE ARGS`.

The interpreter runs this file, loaded by path (`python -c BOOT`): it imports nothing of code/ as a
module (common/process_exit.py, how each child ends, is loaded by path too, outside sys.modules),
so a script that never imports `common` gets nothing of it (its import sets sys.excepthook). A
request is one JSON line: argv, cwd, env, the two output paths (files, or named pipes the caller
already reads), and whether the child starts a session of its own. The outputs are opened here
before the fork, so once the child's pid is replied the caller holds every writer's count it
will wait for. Replies are JSON lines too: "ready" once, then "pid" and "rc" for each request.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any


def _process_exit():  # type: ignore[no-untyped-def]
    """common/process_exit.py (how a process ends, as run_main ends a script), loaded by path: not
    through the package `common`, whose import sets sys.excepthook."""
    code = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(code, "common", "process_exit.py")
    spec = importlib.util.spec_from_file_location("process_exit", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_exit = _process_exit()
end_process, exit_status, _flush_c_stdio = _exit.end_process, _exit.exit_status, _exit.flush_c_stdio


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
            _flush_c_stdio()   # or each child would write the interpreter's C buffers again
            outputs = _open_outputs(request)
            settled_r, settled_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(replies)
                os.close(requests)
                os.close(settled_r)
                _child(request, outputs, base_path, settled_w)   # never returns
            for fd in (*outputs, settled_w):
                os.close(fd)
            os.read(settled_r, 1)   # its session is set (or it died): the caller may signal its group
            os.close(settled_r)
            reply({"pid": pid})
            reply({"rc": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])})
    end_process(0)   # the requests ended: its children are reaped, nothing else to wait for


def _replier(fd: int):  # type: ignore[no-untyped-def]
    def reply(message: dict[str, Any]) -> None:
        os.write(fd, json.dumps(message).encode() + b"\n")
    return reply


def _open_outputs(request: dict[str, Any]) -> list[int]:
    """The request's stdout and stderr, opened for writing: a named pipe opens at once, since its
    reader (the caller) opened it first."""
    return [os.open(request[name], os.O_WRONLY | os.O_TRUNC) for name in ("stdout", "stderr")]


def _child(request: dict[str, Any], outputs: list[int], base_path: list[str], settled: int) -> None:
    """Become `python FILE ARGS` run in `cwd` with `env`, its output into the two opened files;
    `settled` is closed once the caller may signal it (as Popen returns after its child's exec)."""
    for fd, opened in zip((1, 2), outputs):
        os.dup2(opened, fd)
        os.close(opened)
    if request.get("new_session"):
        os.setsid()   # as Popen(start_new_session=True): its own process group, for a Ctrl-C to all of it
    os.close(settled)
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
        code = exit_status(exit_.code)
    except KeyboardInterrupt as err:
        _uncaught(err)
        interrupted = True
    except BaseException as err:  # noqa: BLE001 - what a fresh interpreter does with it: traceback, 1
        _uncaught(err)
        code = 1
    end_process(code, interrupted)


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
