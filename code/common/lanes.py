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
  (Script.timed) runs in this thread with the side lane paused (Turns), as alone as in a
  sequential run; a model-only one that reads a clock runs here too.
- The results come back in the caller's order: run(i) of a side script waits for its result.
- Ctrl-C and SIGTERM end the side lane's live run too: leaving the `with` block stops the lane,
  kills the run in flight and ends both interpreters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

from common.prestarted import PRELOAD, Prestarted
from common.suite import Script

Result = tuple[subprocess.CompletedProcess, float]   # the run, and its own seconds


class Turns:
    """The gate between the lanes: a timed run waits for the side lane's run in flight; the side
    lane starts nothing while a timed run waits or runs, nor once stopped."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._side_running = False
        self._timed_waiting = 0
        self.stopped = False

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._timed_waiting += 1
            self._cond.wait_for(lambda: not self._side_running)
        try:
            yield
        finally:
            with self._cond:
                self._timed_waiting -= 1
                self._cond.notify_all()

    def side_may_start(self) -> bool:
        """Wait until no timed run waits or runs, then mark the side lane running; False once
        stopped (the lane ends). side_done() must follow a True."""
        with self._cond:
            self._cond.wait_for(lambda: self.stopped or not self._timed_waiting)
            self._side_running = not self.stopped
            return self._side_running

    def side_done(self) -> None:
        with self._cond:
            self._side_running = False
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()


class SideLane:
    """Runs `commands` (key -> argv) in order in a thread of its own, forked from `runner`;
    result(key) waits for one. stop() starts nothing more and kills the run in flight."""

    def __init__(self, runner: Prestarted, commands: dict[int, list[str]], turns: Turns) -> None:
        self.runner, self.commands, self.turns = runner, commands, turns
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
        self.turns.stop()
        with self._guard:
            if self._live is not None:
                with contextlib.suppress(OSError):
                    os.kill(self._live.pid, signal.SIGKILL)
        self._thread.join(timeout=10)

    def _work(self) -> None:
        for key, argv in self.commands.items():
            if not self.turns.side_may_start():
                break
            try:
                self._results[key] = self._one(argv)
            except BaseException as err:   # raised again by result(), in the caller's thread
                self._results[key] = err
            finally:
                self.turns.side_done()
                self._done[key].set()
        for key, done in self._done.items():   # stopped: whoever still waits is woken
            if not done.is_set():
                self._results[key] = RuntimeError("the side lane was stopped")
                done.set()

    def _one(self, argv: list[str]) -> Result:
        start = time.perf_counter()
        with self._guard:
            if self.turns.stopped:
                raise RuntimeError("the side lane was stopped")
            self._live = self.runner.popen(argv)
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
        extra = ("matplotlib", "matplotlib.pyplot") if drawing and quiet_import("matplotlib.pyplot") else ()
        self.runners: list[Prestarted] = []
        self.turns, self.side = Turns(), None
        try:
            self.main = self._start(preload(mine) + extra) if mine else None
            if side:
                self.side = SideLane(self._start(("numpy",) + extra), side, self.turns)
        except BaseException:
            self.close()
            raise

    def run(self, i: int) -> Result:
        if self.side is not None and i in self.side.commands:
            return self.side.result(i)
        assert self.main is not None
        with self.turns.alone() if self.chosen[i].timed else contextlib.nullcontext():
            start = time.perf_counter()
            proc = self.main.run(self.commands[i])
            return proc, time.perf_counter() - start

    def close(self) -> None:
        if self.side is not None:
            self.side.stop()
        for runner in self.runners:
            runner.close()

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, modules: tuple[str, ...]) -> Prestarted:
        self.runners.append(Prestarted(preload=modules))
        return self.runners[-1]


def preload(scripts: list[Script]) -> tuple[str, ...]:
    """What an interpreter imports before it forks these scripts: torch's modules when one of them
    starts ranks (a model-only script never imports torch: 3-4 s saved here), numpy always."""
    return PRELOAD if any(s.real for s in scripts) else ("numpy",)


def quiet_import(module: str) -> bool:
    """Whether a fresh interpreter imports `module` printing nothing, asked twice: a first import may
    say something once (matplotlib's font cache, built on a new machine, when that takes over 5 s).
    A Prestarted whose imports printed anything forks nothing (a fresh run would show it), so the
    interpreters import matplotlib (0.75 s a drawing script here) only when this holds."""
    for _ in range(2):
        try:
            proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                                  timeout=600)
        except subprocess.TimeoutExpired:
            return False
        if proc.returncode == 0 and not proc.stdout and not proc.stderr:
            return True
    return False
