"""Two lanes for a reproduction: the model-only scripts run beside the ones that start ranks.

    with Lanes(chosen, commands, drawing=True) as lanes:
        for i in range(len(chosen)):
            proc, wall = lanes.run(i)     # in the caller's order, whichever lane ran it

A script that starts ranks waits on them (a barrier, a gloo round trip, a join) as much as it
computes, so on two cores one core is often idle while it runs; a model-only script needs no torch
and takes a second or two. So the model-only scripts run one after another in a thread of their
own, each forked from a light interpreter (numpy and, for the pages, matplotlib), while this thread
runs the others from the one that imported torch. The side lane starts at once, beside the torch
interpreter's import.

What a reader could doubt, and why it holds:
- A number read off a clock must not include another script's work: a script that reads one
  (Script.timed) runs in this thread with the work beside it paused (Turns: the side lane, and
  the reproduction's timeline page), as alone as in a sequential run; a model-only one that
  reads a clock runs here too.
- The results come back in the caller's order: run(i) of a side script waits for its result.
- A side run whose interpreter died under it runs again fresh, as Prestarted.run does.
- Ctrl-C and SIGTERM end the side lane's live run too: leaving the `with` block stops the lane,
  kills the run in flight and an interpreter still importing, and ends both interpreters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Any, Iterator

from reproduction.prestarted import PRELOAD, InterpreterGone, Prestarted
from reproduction.suite import Script

MATPLOTLIB = ("matplotlib", "matplotlib.pyplot")
Result = tuple[subprocess.CompletedProcess, float]   # the run, and its own seconds


class Turns:
    """The gate between a timed run and the work beside it (the side lane's runs, the timeline
    page's thread): a timed run waits for the work in flight; no work starts beside while a timed
    run waits or runs, nor once stopped."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._beside = 0          # pieces of work running beside
        self._timed_waiting = 0   # timed runs waiting or running
        self.stopped = False

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._timed_waiting += 1
            self._cond.wait_for(lambda: not self._beside)
        try:
            yield
        finally:
            with self._cond:
                self._timed_waiting -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def beside(self) -> Iterator[bool]:
        """Wait until no timed run waits or runs, then hold a turn beside for the block; yields
        False, holding nothing, once stopped (the work is not to start)."""
        with self._cond:
            self._cond.wait_for(lambda: self.stopped or not self._timed_waiting)
            started = not self.stopped
            self._beside += started
        try:
            yield started
        finally:
            with self._cond:
                self._beside -= started
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()


class SideLane:
    """Runs `commands` (key -> argv) in order in a thread of its own, forked from `interpreter`;
    result(key) waits for one. stop() starts nothing more and kills the run in flight."""

    def __init__(self, interpreter: Interpreter, commands: dict[int, list[str]], turns: Turns) -> None:
        self.interpreter, self.commands, self.turns = interpreter, commands, turns
        self._results: dict[int, Result | BaseException] = {}
        self._done = {key: threading.Event() for key in commands}
        self._guard = threading.Lock()        # the live process, between this thread and stop()
        self._live: Any = None
        self._thread = threading.Thread(target=self._work, daemon=True, name="side-lane")
        self._thread.start()

    def result(self, key: int) -> Result:
        self._done[key].wait()
        found = self._results[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def stop(self) -> None:
        """Start nothing more, stop an interpreter still importing (nothing of it to wait for),
        kill the run in flight, and wait for the thread."""
        self.turns.stop()
        self.interpreter.stop_importing()
        with self._guard:
            if self._live is not None and self._live.returncode is None:
                # its pid is the child's until its status is read (a Forked: the interpreter
                # reaps it just before it replies, milliseconds in which the pid is free)
                with contextlib.suppress(OSError):
                    os.kill(self._live.pid, signal.SIGKILL)
        self._thread.join(timeout=10)

    def _work(self) -> None:
        for key, argv in self.commands.items():
            with self.turns.beside() as started:
                if not started:
                    break
                try:
                    self._results[key] = self._one(argv)
                except BaseException as err:   # raised again by result(), in the caller's thread
                    self._results[key] = err
                finally:
                    self._done[key].set()
        for key, done in self._done.items():   # stopped: whoever still waits is woken
            if not done.is_set():
                self._results[key] = RuntimeError("the side lane was stopped")
                done.set()

    def _one(self, argv: list[str]) -> Result:
        """The run, forked; fresh again if the interpreter died under it (its status died with
        it; that runner forks no more), as Prestarted.run does."""
        try:
            return self._attempt(argv)
        except InterpreterGone:
            return self._attempt(argv)

    def _attempt(self, argv: list[str]) -> Result:
        start = time.perf_counter()
        runner = self.interpreter.runner()   # outside the guard: it may wait for the imports
        with self._guard:
            if self.turns.stopped:
                raise RuntimeError("the side lane was stopped")
            self._live = runner.popen(argv)   # fresh once that runner is gone
        try:
            out, err = self._live.communicate()
        finally:
            with self._guard:
                proc, self._live = self._live, None
        done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        done.forked = getattr(proc, "forked", False)   # type: ignore[attr-defined]
        return done, time.perf_counter() - start


class Lanes:
    """The reproduction's runs: commands[i] runs `chosen[i]`; run(i) gives its result in order.
    The side lane takes the model-only scripts that read no clock; this thread the rest."""

    def __init__(self, chosen: list[Script], commands: list[list[str]], drawing: bool) -> None:
        side = {i: commands[i] for i, s in enumerate(chosen) if not s.real and not s.timed}
        self.commands, self.chosen = commands, chosen
        mine = [s for i, s in enumerate(chosen) if i not in side]
        self.interpreters: list[Interpreter] = []
        self.turns, self.side = Turns(), None
        try:
            self.main = self._start(preload(mine), drawing) if mine else None
            if side:
                self.side = SideLane(self._start(("numpy",), drawing), side, self.turns)
        except BaseException:
            self.close()
            raise

    def run(self, i: int) -> Result:
        if self.side is not None and i in self.side.commands:
            return self.side.result(i)
        assert self.main is not None
        runner = self.main.runner()   # its imports first: the side lane goes on meanwhile
        with self.turns.alone() if self.chosen[i].timed else contextlib.nullcontext():
            start = time.perf_counter()
            proc = runner.run(self.commands[i])
            return proc, time.perf_counter() - start

    def close(self) -> None:
        self.turns.stop()
        if self.side is not None:
            self.side.stop()
        for interpreter in self.interpreters:
            interpreter.close()

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, modules: tuple[str, ...], drawing: bool) -> Interpreter:
        self.interpreters.append(Interpreter(modules, drawing))
        return self.interpreters[-1]


class Interpreter:
    """A lane's prestarted interpreter. When the pages want figures it imports matplotlib too (0.75 s
    a drawing script here), started at once, without first asking whether that import is quiet: if
    it printed anything (a warning at every import, or a font cache built once on a new machine),
    that interpreter forks nothing (a fresh run would show it), so the lane's first run starts
    another without matplotlib, and the drawing scripts import it themselves."""

    def __init__(self, modules: tuple[str, ...], drawing: bool) -> None:
        self.modules, self._checked, self._stopped = modules, not drawing, False
        self._runners = [Prestarted(preload=modules + (MATPLOTLIB if drawing else ()))]

    def runner(self) -> Prestarted:
        """The runner to fork from, its imports done (RuntimeError once stopped)."""
        if not self._runners[-1].usable and not self._checked and not self._stopped:
            self._runners[-1].close()
            self._runners.append(Prestarted(preload=self.modules))
            self._runners[-1].usable   # noqa: B018  (its imports, here: not under a lane's guard)
        self._checked = True
        if self._stopped:
            raise RuntimeError("the lane was stopped")
        return self._runners[-1]

    def stop_importing(self) -> None:
        """From another thread, on the way out: no replacement is started, and an interpreter
        still importing is killed (whoever waits for it finds it unusable)."""
        self._stopped = True
        for runner in list(self._runners):
            runner.stop_importing()

    def close(self) -> None:
        for runner in self._runners:
            runner.close()


def preload(scripts: list[Script]) -> tuple[str, ...]:
    """What an interpreter imports before it forks these scripts: torch's modules when one of them
    starts ranks (a model-only script never imports torch: 3-4 s saved here), numpy always."""
    return PRELOAD if any(s.real for s in scripts) else ("numpy",)
