"""A rank that torchrun started: what `common.launch.launch` does when torchrun owns the processes.

torchrun starts the W processes (on one node or several) and hosts the rendezvous store; this
process is one rank. The first launch joins torchrun's group (gloo on the loopback interface when
torchrun's address is a loopback one: nothing then listens beyond it); each launch runs the
worker on this rank, on its own copy of the arguments (as a forked or spawned rank has), and
gathers the results to every rank; the group is torn down when the process exits.

A failure is named as a standalone run names it, in one line that rank 0 alone prints:
  - every rank has a helper thread that writes, several times a second, a heartbeat (a counter,
    where its main thread is, its node and process) to torchrun's store, through a connection of
    its own; a rank that ends (by a signal: its agent stops a node's ranks once one died there; or
    after its failure) says so there first;
  - a rank that fails (its own error, a collective that timed out, a peer that vanished) writes
    its `Failure` there; rank 0's helper then decides who is to blame (common.launch.torchrun_blame): a
    rank's own error first, else a rank whose heartbeat stopped without a word (killed, stopped by
    a signal, or its machine gone; never one that wrote that its connection to a peer closed),
    else a rank at work outside torch.distributed while the others timed out waiting for it;
  - the other ranks wait for that verdict (a few seconds at most) before they exit, quietly:
    torchrun stops every rank as soon as one exits, and by then rank 0 must have printed. If rank
    0 itself is the one that stopped, the lowest failing rank gives the verdict instead.
"""

from __future__ import annotations

import atexit
import copy
import gc
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch.distributed as dist

from common.launch.loopback import is_loopback_host, loopback_interface
from common.launch.rank_failure import Failure, RankError, failure_of
from common.launch.rank_side import capture_stderr, setup_rank, where_main_thread
from common.launch.torchrun import speak
from common.launch.torchrun_blame import Diagnosis, end_stopped_ranks

_BEAT_S = 0.1          # how often a rank's helper writes its heartbeat and whereabouts
_STALE_S = 1.0         # a heartbeat unchanged this long: that rank's process is not running
_VERDICT_WAIT_S = 5.0  # how long a failed rank waits for rank 0's verdict before it decides itself
_STORE_WAIT_S = 2.0    # one store operation of the helper: torchrun's store may be gone

_state: _Rank | None = None


def launch_in_torchrun(worker: Callable[..., Any], world_size: int, args: tuple, kwargs: dict,
                       timeout_s: float, threads: int, choose_backend: Callable[[int], str]) -> list[Any]:
    """Run the worker on this rank of torchrun's group; every rank gets every rank's result."""
    global _state
    if _state is None:
        _state = _Rank(timeout_s)
        _state.join(choose_backend, threads)
    rank, world = _state.rank, _state.world
    if world != world_size:
        print(f"(torchrun gives {world} ranks; this part asked for {world_size} and runs on {world})")
    _state.enter("working")
    with _state.failures():
        args, kwargs = copy.deepcopy((args, kwargs))  # this rank's own copy, as a forked rank has
        result = worker(rank, world, *args, **kwargs)
    _state.enter("gathering the results")
    gc.collect()
    gathered: list[Any] = [None] * world
    with _state.failures():
        dist.all_gather_object(gathered, result)
    _state.enter("waiting for the next part")
    return gathered


class _Rank:
    """This process's rank under torchrun: its helper thread and its share of naming a failure."""

    def __init__(self, timeout_s: float) -> None:
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.node = int(os.environ.get("GROUP_RANK", 0))   # torchrun's node rank (--node-rank)
        self.timeout_s = timeout_s
        self.phase = "joining the group"
        self.joined_at: float | None = None  # when this rank joined torchrun's group
        self.prefix = f"course/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/" \
                      f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self.store: Any = None           # the helper's own connection to torchrun's store
        self.connected = threading.Event()  # the first heartbeat is in the store
        self.verdict_lock = threading.Lock()
        self.verdict: RankError | None = None
        self.failing = False             # the main thread has failed and waits for the verdict
        self.exit_status = 1
        self.claimed = False             # rank 0's main thread or helper is printing the verdict
        self.stopping = threading.Event()
        # a new phase, and that it is in the store
        self.wake, self.published = threading.Event(), threading.Event()
        self.helper = threading.Thread(target=self._helper, daemon=True, name="course-heartbeat")
        self.helper.start()
        atexit.register(self._stop_helper)  # runs after teardown (atexit is last in, first out)

    def enter(self, phase: str) -> None:
        """This rank is now `phase`: in the store before it goes on, so a rank that stops right
        after is reported in the phase it stopped in."""
        self.phase = phase
        if self.helper.is_alive() and self.connected.is_set():
            self.published.clear()
            self.wake.set()
            self.published.wait(_BEAT_S * 5)

    def _stop_helper(self) -> None:
        """The helper must not be inside a store call while the interpreter frees the store: a
        daemon thread left in C++ at exit aborted a rank here (SIGABRT, "terminate called")."""
        self.stopping.set()
        self.wake.set()
        self.helper.join(_STORE_WAIT_S)

    def join(self, choose_backend: Callable[[int], str], threads: int) -> None:
        backend = choose_backend(int(os.environ.get("LOCAL_WORLD_SIZE", self.world)))
        if backend == "gloo" and is_loopback_host(os.environ["MASTER_ADDR"]):
            # Every rank is on this machine: gloo's sockets need not listen beyond it.
            os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
        # torchrun's own LOCAL_RANK picks the GPU; across nodes it is not the global rank.
        setup_rank(int(os.environ.get("LOCAL_RANK", self.rank)), backend, threads)
        self.connected.wait(_STORE_WAIT_S)  # beating before joining: a rank that never joins is named
        with self.failures(), capture_stderr() as folded:  # a peer that never comes: socket warnings
            dist.init_process_group(backend, timeout=timedelta(seconds=self.timeout_s))
        self.joined_at = time.monotonic()
        sys.stderr.write(folded[0])  # joined: what torch had to say, it may say
        atexit.register(self.teardown)  # a group left alive aborts the process at exit

    @contextmanager
    def failures(self) -> Iterator[None]:
        """An error in the block becomes the verdict (raised); Ctrl-C or SIGTERM, which torchrun
        sends every rank, just ends this one, with run_main's exit status."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - the verdict is rank 0's to give
            self.fail(failure_of(err, traceback.format_exc(), self.joined_at))
        except BaseException as err:
            self.failing = True
            self.exit_status = 130 if isinstance(err, KeyboardInterrupt) else 128 + signal.SIGTERM
            self.ended("interrupted" if isinstance(err, KeyboardInterrupt) else "terminated")
            raise

    def ended(self, how: str) -> None:
        """Say in the store that this rank is ending, and how, before its heartbeat stops: a rank
        that ends with a word is not the one that died without one."""
        self._publish(f"ended/{self.rank}", how)

    def teardown(self) -> None:
        """At exit: every rank leaves the group together; a rank that does not is named."""
        if self.failing:
            _exit_with(None, self.exit_status)  # the line is printed; a broken group is not left politely
        if not dist.is_initialized():
            return
        self.enter("leaving the group")
        try:
            gc.collect()
            dist.barrier()
            dist.destroy_process_group()
            self._publish(f"left/{self.rank}", True)
            if self.rank == 0:  # torchrun waits for every rank to exit, without a deadline: we have one
                self._wait_for("left", self.timeout_s)
        except BaseException as err:  # noqa: BLE001 - too late to raise: print the line and go
            try:
                # our own wait for the others to leave is a wait on them, as torch's are
                waited = isinstance(err, _OthersLate)
                self.fail(failure_of(err, traceback.format_exc(), self.joined_at, waited=waited))
            except RankError as verdict:
                _exit_with(verdict)

    def _wait_for(self, kind: str, timeout_s: float) -> None:
        """Until every rank has published `kind` (polled: torch's own wait prints socket warnings)."""
        keys = [f"{self.prefix}{kind}/{r}" for r in range(self.world)]
        deadline = time.monotonic() + timeout_s
        while self.store is not None and not self.store.check(keys):
            if time.monotonic() > deadline:
                raise _OthersLate(f"timed out after {timeout_s:g} s waiting for every rank to leave the "
                                   "group")
            time.sleep(_BEAT_S)

    # ---- a failure ----------------------------------------------------------------------------

    def fail(self, failure: Failure) -> None:
        """This rank failed: publish why, wait for the verdict, raise it (printed by one rank only)."""
        self.failing = True
        if self._publish(f"error/{self.rank}", failure):
            try:
                self.store.add(f"{self.prefix}failed", 1)  # what rank 0's helper watches
            except Exception:  # noqa: BLE001 - the store is gone: torchrun is ending the run
                pass
        if self.rank == 0:
            verdict = self._decide()
            if not self._claim():
                time.sleep(3600)  # the helper thread has claimed the printing and ends the process
            raise verdict
        self.connected.wait(_STORE_WAIT_S)
        deadline = time.monotonic() + _VERDICT_WAIT_S
        while self.store is not None and time.monotonic() < deadline:
            found = self._read("verdict")
            if found is not None:
                time.sleep(0.5)  # rank 0 prints it now; torchrun stops every rank once one exits
                raise found
            time.sleep(_BEAT_S)
        # No verdict: rank 0 has stopped or is gone. The lowest failed rank decides and prints.
        failed = [r for r in range(self.world) if self._read(f"error/{r}") is not None]
        if not failed or self.rank == min(failed):
            speak()
        raise self._decide()

    def _decide(self) -> RankError:
        """The one verdict of this run (decided once, here, and published for the other ranks)."""
        with self.verdict_lock:
            if self.verdict is None:
                self.verdict = Diagnosis(self, _STALE_S).verdict()
                self._publish("verdict", self.verdict)  # a RankError pickles whole: kind, peers and all
            return self.verdict

    def _claim(self) -> bool:
        """Whether the caller is the one to print the verdict (rank 0's main thread or helper)."""
        with self.verdict_lock:
            first, self.claimed = not self.claimed, True
            return first

    # ---- the helper thread --------------------------------------------------------------------

    def _helper(self) -> None:
        """Heartbeat and whereabouts; on rank 0, a verdict as soon as any rank has failed."""
        try:
            self.store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                       is_master=False,
                                       timeout=timedelta(seconds=max(_STORE_WAIT_S, self.timeout_s)))
        except Exception:  # noqa: BLE001 - no store: failures are then each rank's own
            return
        count = 0
        while not self.stopping.is_set():
            count += 1
            in_collective, location = where_main_thread()
            self.wake.clear()
            beat = (count, self.phase, in_collective, location, socket.gethostname(), os.getpid(), self.node)
            if not self._publish(f"beat/{self.rank}", beat):
                return
            self.connected.set()
            if not self.wake.is_set():
                self.published.set()
            if self.rank == 0 and not self.failing and self._any_failed():
                self._decide()
                time.sleep(0.5)  # the main thread prints it, unless it is stuck in a collective
                if self._claim():
                    _exit_with(self.verdict)
                return
            self.wake.wait(_BEAT_S)

    def _any_failed(self) -> bool:
        return self.store.add(f"{self.prefix}failed", 0) > 0

    def _publish(self, key: str, value: Any) -> bool:
        try:
            self.store.set(self.prefix + key, pickle.dumps(value))
            return True
        except Exception:  # noqa: BLE001 - the store is gone: torchrun is ending the run
            return False

    def _read(self, key: str) -> Any:
        try:
            if self.store is not None and self.store.check([self.prefix + key]):
                return pickle.loads(self.store.get(self.prefix + key))
        except Exception:  # noqa: BLE001
            pass
        return None


class _OthersLate(TimeoutError):
    """The other ranks did not all leave the group in time (rank 0's own wait at exit)."""


def _exit_with(verdict: RankError | None, status: int = 1) -> None:
    """End the process now, from the helper thread or at exit, as run_main would end it."""
    if _state is not None:
        _state.ended("failed" if status == 1 else "terminated")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
            pass
    if verdict is not None:
        if os.environ.get("COURSE_DEBUG"):
            sys.stderr.write(verdict.details)
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {verdict}\n")  # as run_main writes it
        sys.stderr.writelines(f"{line}\n" for line in verdict.under)
        sys.stderr.flush()
    end_stopped_ranks()   # the line is out: torchrun may now stop the others
    os._exit(status)
