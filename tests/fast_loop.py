"""The maintainer's fast loop: `python3 -m pytest -m fast` runs the tests that start no process
(FAST_FILES), the checker, the models and the simulators, in well under a minute on the 2-core
machine (README, "Tests", gives its size and time as measured). A test of FAST_FILES that starts a
process (a script, a rank, a browser) fails: the list cannot hold a test that needs more than this
interpreter. COURSE_FAST_PROBE=1 marks every test fast, to find the files that qualify (those that
pass under it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

FAST_FILES = frozenset({
    # tests/common/
    "test_checker.py", "test_flags.py", "test_collectives.py", "test_link.py",
    "test_costmodel_steps.py", "test_parent_side.py", "test_row_tables.py", "test_units.py",
    "test_timeline.py",
    # tests/lecture14/, tests/cs336/, tests/suite/
    "test_costmodel.py", "test_lecture14_collectives.py", "test_collectives_counts.py",
    "test_first_order.py", "test_busbw.py", "test_comm.py", "test_ledger.py", "test_pipeline.py",
    "test_primitives.py",
    "test_every_check_can_fail.py", "test_paths_named.py", "test_one_name.py",
    "test_import_sources.py", "test_layers.py", "test_where_tests_live.py",
    # tests/practice/; tests/common/, tests/lecture15/ and tests/cs336/ again (files split out since)
    "test_casefolder.py", "test_run_cost.py", "test_models.py", "test_mlp.py",
})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: starts no process; `-m fast` is the maintainer's loop")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    probe = os.environ.get("COURSE_FAST_PROBE") == "1"
    for item in items:
        if probe or Path(str(item.fspath)).name in FAST_FILES:
            item.add_marker("fast")


class ProcessStarted(AssertionError):
    """A fast test tried to start a process."""


# Fixtures that stand for processes already run (a session's reproduction, a browser): a fast test
# may not ask for them even where another test has made them already.
PROCESS_FIXTURES = frozenset({"quick_reproduction", "full_reproduction", "quick_run", "browser", "open_page"})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Around a fast test's whole run, its fixtures' set-up included (a session fixture is made
    inside the first test that asks for it), starting a process raises ProcessStarted."""
    if item.get_closest_marker("fast") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        _refuse_processes(patch, item.nodeid)
        yield


@pytest.fixture(autouse=True)
def _no_process_fixture_in_a_fast_test(request: pytest.FixtureRequest) -> None:
    asked = PROCESS_FIXTURES & set(request.fixturenames)
    if asked and request.node.get_closest_marker("fast") is not None:
        raise ProcessStarted(f"{request.node.nodeid} asks for {', '.join(sorted(asked))}: not a fast test")


def _refuse_processes(patch: pytest.MonkeyPatch, nodeid: str) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise ProcessStarted(f"{nodeid} starts a process: it is not a fast test")

    import _posixsubprocess  # what subprocess and multiprocessing fork and exec through

    patch.setattr(_posixsubprocess, "fork_exec", refuse)
    patch.setattr(subprocess, "_fork_exec", refuse)
    patch.setattr(subprocess, "_USE_POSIX_SPAWN", False)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            patch.setattr(os, name, refuse)
    from reproduction.prestarted import Prestarted  # the tests' fork server runs scripts for them

    patch.setattr(Prestarted, "run", refuse)
    patch.setattr(Prestarted, "popen", refuse)
