"""How a script ends: `run_main(main)` turns whatever stops a run into one line on stderr and the
exit status a shell expects, never a traceback.

    if __name__ == "__main__":
        run_main(main)

Bad input (`UsageError`) -> exit 2; a failure at run time (a rank, a file: `RunFailure`, or any
other exception) -> exit 1; Ctrl-C -> 130; SIGTERM -> 143; SIGHUP (the terminal closed) -> 129;
a closed pipe -> 141. The flags
themselves are `common.cli`'s.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator

from common import WORDS, raise_terminated
from common import Terminated as _Terminated
from common.error_types import RunFailure, UsageError, clip_values
from common.launch import quiet_unless_rank0
from common.process_exit import end_process, exit_status

__all__ = ["run_main", "signals_held"]


def run_main(main: Callable[[], object]) -> None:
    """Run a script's main() so that it ends in one line, never a traceback, every line with the
    same prefix as a usage error's ("02_buckets.py: error: …"):
    bad input -> exit 2; a failure at run time (a rank, a file) -> exit 1 (COURSE_DEBUG=1 shows
    the traceback too); Ctrl-C -> "interrupted", 130; SIGTERM -> "terminated", 143, SIGHUP (a
    closed terminal, a dropped SSH session) -> "hung up", 129, both after the same clean-up as an
    error (no temporary file is left); a closed pipe (`| head`) -> quiet,
    141, as a shell reports a reader that stopped early.

    Run by `python FILE` (not -i), the process then ends as Python would end it less the teardown of
    torch's modules, about 1 s here (common.process_exit.end_process). Under a tool that
    runs the file and waits for it to return (cProfile, pdb, runpy: its frame is below the
    script's), it returns or raises SystemExit as before, for the tool to finish its work."""
    program = sys._getframe(1).f_back is None   # the script's module frame is the bottom one
    _ENDS_HERE[:] = [_ends_here(program)]
    status = 0
    try:
        _run(main)
        _ending(0)
    except SystemExit as done:
        if not program:
            raise
        status = exit_status(done.code)
        _ending(status)    # before main's frames are freed: their finalizers run next
    # Out of the except block: the exception, and main's frames with their locals (an open file,
    # a temporary one), are freed first.
    if _ENDS_HERE[0]:
        end_process(status, words=WORDS, noted=_NOTED)   # a signal while it ends: its word and status


def _ends_here(program: bool) -> bool:
    """run_main ends the process (end_process): `python FILE`, not -i (nor PYTHONINSPECT set
    meanwhile), where the prompt comes next and Ctrl-C must stay Python's."""
    return program and not (sys.flags.inspect or os.environ.get("PYTHONINSPECT"))


def _run(main: Callable[[], object]) -> None:
    quiet_unless_rank0()  # under torchrun only rank 0 speaks: set where the script starts, not at import
    signal.signal(signal.SIGTERM, raise_terminated)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: kept
        signal.signal(signal.SIGHUP, raise_terminated)
    try:
        main()
        sys.stdout.flush()
    except UsageError as err:
        _ending(2)
        _error_line(clip_values(str(err)))
        sys.exit(2)
    except (KeyboardInterrupt, _Terminated) as err:
        _end_by_signal(err)
    except BrokenPipeError:
        _ending(141)
        # Python would complain again when it flushes stdout at exit: point stdout at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except Exception as err:  # noqa: BLE001 - the one place a run-time failure becomes one line
        _end_by_signal(err.__context__)   # a clean-up that failed after Ctrl-C or SIGTERM
        _ending(1)
        if os.environ.get("COURSE_DEBUG"):  # the rank's traceback, or ours
            sys.stderr.write(getattr(err, "details", "") or traceback.format_exc())
        _error_line(_one_line(err))
        for line in getattr(err, "under", ()):   # a failed rank's own last words (RankError.under)
            sys.stderr.write(f"{line}\n")
        sys.exit(1)


# The signals that end a run cleanly: Ctrl-C, SIGTERM, and SIGHUP (a closed terminal)
ENDING_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM,
                            *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])})


@contextmanager
def signals_held(mask: bool = False) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP noted, not raised, inside the block, and raised again as it ends:
    for a few steps that must happen together (a temporary file made and its name kept for the
    clean-up; ranks forked and known). With `mask`, this thread also blocks them at the C level, a
    mask a forked child inherits (see common.launch.launcher). Only the main thread sets handlers: in
    another thread this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    handlers = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in ENDING_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS) if mask else None
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if before is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        for sig in dict.fromkeys(noted):   # now raised where the caller can end by it
            signal.raise_signal(sig)


def _end_by_signal(err: BaseException | None) -> None:
    """Ctrl-C: "interrupted", 130; SIGTERM: "terminated", 143; SIGHUP: "hung up", 129; for `err`
    or an exception it was raised while handling, so that a clean-up failing after the signal
    (a pipe a stopped rank closed: EBADF) ends the run as the signal does. Returns when none of
    them is a signal."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, KeyboardInterrupt):
            _ending(130)
            sys.stderr.write("interrupted\n")
            sys.exit(130)
        if isinstance(err, _Terminated):
            _ending(128 + err.signum)
            sys.stderr.write(f"{WORDS.get(err.signum, 'terminated')}\n")
            sys.exit(128 + err.signum)
        err = err.__context__


_NOTED: list[int] = []   # a signal that landed once the run's work was done (end_process says it)


_ENDS_HERE = [False]   # run_main will end this process (under pytest or runpy, Ctrl-C stays theirs)


def _ending(status: int) -> None:
    """The run's end is decided. Status 0 (its work done): a signal from now on is noted, and
    end_process says its word and exits 128 + n (one landing while main's frames were freed ran in
    a finalizer: "Exception ignored", exit 0); a second ends it at once. Otherwise (an error or a
    signal's word said): a signal ends it at once with `status`, saying nothing more (a second
    Ctrl-C printed "interrupted" again; one after an error line turned exit 2 into 130)."""
    if not _ENDS_HERE[0] or threading.current_thread() is not threading.main_thread():
        return

    def note(signum: int, frame: object) -> None:
        if _NOTED or status:
            os._exit(status or 128 + _NOTED[0])
        _NOTED.append(signum)
    for sig in ENDING_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, note)


def _error_line(text: str) -> None:
    sys.stderr.write(f"{_prog()}: error: {text}\n")


def _prog() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def _one_line(err: BaseException) -> str:
    text = clip_values(str(err).strip().splitlines()[0]) if str(err).strip() else ""
    if isinstance(err, RunFailure):
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
