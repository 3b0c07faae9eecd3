"""How a Python process ends once its work is done: as a fresh interpreter ends, less the teardown
of torch's thousands of modules (about 1 s of every run that imported torch).

`common.script_end.run_main` ends every script through `end_process`; the reproduction's fork server
(`reproduction/prestarted_serve.py`) ends each child it forked through it too, loading this file by
path. So it imports nothing of code/ (importing `common` would set sys.excepthook in a fork server's
child whose script never imports it), only the standard library.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from typing import Any


def exit_status(code: object) -> int:
    """A SystemExit's code as the exit status Python gives it (a text is printed, then 1)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def end_process(code: int, interrupted: bool = False, words: dict[int, str] | None = None,
                noted: list[int] | None = None) -> None:
    """Interpreter shutdown as a fresh process has it, but for the modules' teardown: non-daemon
    threads joined, atexit functions run, `__main__` cleared and garbage collected (a file left
    open is flushed), streams flushed; then the exit status, or death by SIGINT after an uncaught
    Ctrl-C. The teardown of torch's thousands of modules is what it leaves out: about 1 s of every
    run that imported torch (common.script_end.run_main ends every script through this).

    `noted`: the signals common.script_end noted once the run's work was done (its handlers keep noting
    them here); a run ending well (code 0) then says the first one's word from `words` and exits
    128 + its number."""
    import atexit
    import gc

    steps = (threading._shutdown, atexit._run_exitfuncs,  # type: ignore[attr-defined]
             _clear_main, gc.collect,   # files left open: flushed
             *(functools.partial(_flush, stream)
               for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)))
    for step in steps:   # one by one: a Ctrl-C or a failure in one leaves the rest to run
        try:
            step()
        except BaseException:  # noqa: BLE001 - reported, as Python reports a failing exit function
            sys.excepthook(*sys.exc_info())
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    if noted and words and code == 0:
        if _say(words[noted[0]]):
            _flush(sys.__stderr__)
        code = 128 + noted[0]
    flush_c_stdio()
    os._exit(code & 0xFF)   # as exit() takes a status: sys.exit(256) ends 0


def _say(word: str) -> bool:
    try:
        sys.__stderr__.write(f"{word}\n")
        return True
    except (OSError, ValueError, AttributeError):   # stderr itself gone
        return False


def _clear_main() -> None:
    """__main__'s data first, then (after a collection) its modules, functions and classes: as the
    teardown does, a __del__ still finds the names it uses."""
    import gc
    import types

    names = sys.modules["__main__"].__dict__
    for name in [n for n, v in names.items() if n != "__builtins__"
                 and not isinstance(v, (types.ModuleType, types.FunctionType, type))]:
        names.pop(name, None)
    gc.collect()
    names.clear()


def _flush(stream: Any) -> None:
    if stream is not None and not getattr(stream, "closed", False):   # a script may close stderr
        stream.flush()


def flush_c_stdio() -> None:
    """C's stdio buffers (printf, std::cout in an extension): exit() flushes them, os._exit not."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no libc to ask: nothing buffered there either
        pass
