"""The parent's side of a run (common.launch.parent_side.Collector) on its own: who is blamed for a failure
and when a silent rank is named, with children and pipes made up for each case (test_launcher.py
runs the same code on real ranks)."""

from __future__ import annotations

import os
import pickle
import threading
from multiprocessing import Pipe
from typing import Any

import pytest

from common.launch import parent_side
from common.launch.rank_failure import LOST, RAISED, TORCH, Failure


class _Gone:
    """A child process that has already exited (what _blame sees after the grace period)."""

    def is_alive(self) -> bool:
        return False


@pytest.mark.parametrize("waiter_saw", ["failed: RuntimeError: [gloo] Connection closed by peer "
                                        "[127.0.0.1]:1234",
                                        "failed: RuntimeError: Timed out waiting 2000ms for recv operation",
                                        "failed: DistBackendError: words no matcher knows"])
def test_the_skipper_is_blamed_even_when_its_own_teardown_fails_first(waiter_saw: str) -> None:
    # Rank 1 returned from its work (it skipped a collective), timed out in its teardown barrier and
    # exited; rank 0, left in the collective, then lost its peer or timed out. Blame rank 1.
    collector = parent_side.Collector([_Gone(), _Gone()], [None, None], 2.0)
    collector.worker_done = {1}
    collector.failures = {0: Failure(TORCH, waiter_saw, at=2.0, in_group_s=2.5),
                          1: Failure(TORCH, "failed: RuntimeError: Timed out waiting 500ms for recv", at=1.0)}
    error = collector._blame(set())
    assert error.rank == 1 and error.message.startswith("finished its work while rank 0 waited")
    assert (error.kind, error.peers, error.also) == ("skipped", (0,), ())


# The words the launcher once matched to tell an echo from a cause ("timed out", "Connection closed
# by peer"), and words that match nothing: a verdict must not move when a rank's text changes.
_WORDINGS = ["failed: RuntimeError: Timed out waiting 2000ms; Connection closed by peer [127.0.0.1]:1",
             "failed: ValueError: deliberate failure", ""]


@pytest.mark.parametrize("own_words", _WORDINGS)
@pytest.mark.parametrize("echo_words", _WORDINGS)
def test_blame_follows_what_ranks_did_not_their_words(own_words: str, echo_words: str) -> None:
    # Rank 2 raised in its own code; rank 0 then lost it inside torch; rank 1 had finished its work
    # and lost it in its teardown. Rank 2 is to blame, whatever either text says.
    collector = parent_side.Collector([_Gone()] * 3, [None] * 3, 2.0)
    collector.worker_done = {1}
    collector.failures = {2: Failure(RAISED, own_words, at=1.0, in_group_s=3.0),
                          0: Failure(TORCH, echo_words, at=1.1, in_group_s=3.1),
                          1: Failure(TORCH, echo_words, at=1.2, in_group_s=3.1)}
    error = collector._blame(set())
    assert (error.rank, error.kind, error.peers) == (2, RAISED, (0, 1)), str(error)
    # Only torch's failures: the first one is named, and a wait that lasted the timeout says so.
    collector.failures = {1: Failure(TORCH, own_words, at=5.0, in_group_s=2.1),
                          0: Failure(TORCH, echo_words, at=4.0, in_group_s=2.0)}
    collector.worker_done = set()
    error = collector._blame(set())
    assert error.rank == 0 and error.message.endswith("(timeout 2 s) (then rank 1 failed too)"), str(error)


def test_a_lost_connection_is_an_echo_never_the_cause() -> None:
    # Rank 0 lost its connection first (in wait(), where the old rule called it its own failure);
    # rank 2 raised: rank 2. Without a cause, a wait that ran out comes before a lost connection.
    collector = parent_side.Collector([_Gone()] * 3, [None] * 3, 2.0)
    closed = "failed: RuntimeError: Connection closed by peer [127.0.0.1]:1"
    collector.failures = {0: Failure(LOST, closed, at=0.5, in_group_s=1.0),
                          2: Failure(RAISED, "failed: ZeroDivisionError: division by zero", at=1.0)}
    error = collector._blame(set())
    assert (error.rank, error.kind, error.peers) == (2, RAISED, (0,)), str(error)
    collector.failures = {0: Failure(LOST, closed, at=0.5, in_group_s=1.0),
                          1: Failure(TORCH, "failed: RuntimeError: Timed out waiting 500ms", at=0.9)}
    assert collector._blame(set()).rank == 1


def test_a_skipper_is_blamed_when_its_waiter_lost_it() -> None:
    # Rank 1 finished its work and, its teardown failed, exited: rank 0 lost it while still waiting.
    collector = parent_side.Collector([_Gone(), _Gone()], [None, None], 2.0)
    collector.worker_done = {1}
    collector.failures = {0: Failure(LOST, "failed: RuntimeError: Connection reset by peer", at=2.0),
                          1: Failure(TORCH, "failed: RuntimeError: Timed out waiting 500ms for recv", at=1.0)}
    error = collector._blame(set())
    assert (error.rank, error.kind, error.peers) == (1, "skipped", (0,)), str(error)


class _Running:
    """A child that is alive and never stopped (this process's pid); its sentinel never fires."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.sentinel, self._keep = os.pipe()

    def is_alive(self) -> bool:
        return True

    def close(self) -> None:
        os.close(self.sentinel)
        os.close(self._keep)


def _answering_rank(answer_from: int | None) -> tuple[Any, Any, list[bytes]]:
    """Both ends of a pipe to a made-up started rank that answers "where" from its `answer_from`-th
    question on (None: never), served by a thread until the rank's end is closed, and the questions
    it got."""
    parent, rank = Pipe()
    asked: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                asked.append(rank.recv_bytes())
            except (EOFError, OSError):
                return
            if answer_from is not None and len(asked) >= answer_from:
                rank.send_bytes(pickle.dumps(("where", (False, "work (probe.py:7)"))))

    threading.Thread(target=serve, daemon=True).start()
    return parent, rank, asked


@pytest.mark.parametrize("answer_from, start_s, named", [(3, 600, False), (None, 600, True), (1, 0, True)])
def test_a_started_rank_that_answers_late_is_not_named_for_its_silence(answer_from, start_s, named,
                                                                        monkeypatch) -> None:
    # Before its join deadline a started rank is named for silence alone: two looks unanswered. On
    # a loaded machine (two test suites at once) one missed both and answered the third look, the
    # one taken to say where it was, and was named all the same ("it is at _send"). Past the
    # deadline (start_s) an answer does not save it: it is named, saying where it is.
    monkeypatch.setattr(parent_side, "_WHERE_WAIT_S", 0.5)
    conn, rank_end, asked = _answering_rank(answer_from)
    child = _Running()
    try:
        collector = parent_side.Collector([child], [conn], timeout_s=0.1, start_s=start_s)
        collector.pending, collector.started = {0}, {0}
        stall = None
        for _ in range(2):
            collector.next_look = 0.0
            stall = stall or collector._watch({0})
        if not named:
            assert stall is None, stall
            assert len(asked) == 3   # two looks, then the one before naming
        elif answer_from is None:
            assert stall.rank == 0 and stall.message.startswith("did not join the group within"), stall
        else:
            assert stall.message == "did not join the group within 0 s (it is at work (probe.py:7))", stall
    finally:
        for end in (conn, rank_end):
            end.close()
        child.close()
