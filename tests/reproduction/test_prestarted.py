"""reproduction.prestarted: a run forked from the prestarted interpreter ends as `python FILE ARGS` does.

The reference is a fresh interpreter (subprocess.run) on the same file: output, exit status,
argv, path, working folder and environment must be equal, for every way a script can end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT

from reproduction.prestarted import Prestarted

PROBE = '''
import atexit, dataclasses, json, os, sys
print(json.dumps({"argv": sys.argv[1:], "path0": sys.path[0], "cwd": os.getcwd(),
                  "name": __name__, "var": os.environ.get("PROBE_VAR"), "file": __file__}))
sys.stderr.write("to stderr\\n")
atexit.register(lambda: print("atexit ran"))

@dataclasses.dataclass
class Point:    # dataclasses look their module up in sys.modules while the file runs
    x: int

how = sys.argv[1]
if how == "exit3":
    sys.exit(3)
if how == "message":
    sys.exit("a message on stderr")
if how == "raise":
    raise ValueError("uncaught")
if how == "interrupt":
    raise KeyboardInterrupt
if how == "sleep":
    import time
    time.sleep(60)
print("ends", Point(1))
'''

WHO = "import sys; print('torch' in sys.modules)"

SPAWN = """
import atexit, dataclasses, multiprocessing, pickle

@dataclasses.dataclass
class P:
    x: int

def make(queue):
    queue.put(P(3))

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    rank = ctx.Process(target=make, args=(queue,))
    rank.start()
    print(queue.get())
    rank.join()
    atexit.register(lambda: print(len(pickle.dumps(P(1))) > 0))
"""


@pytest.fixture(scope="module")
def runner():
    with Prestarted() as prestarted:
        yield prestarted


def _fresh(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


@pytest.mark.parametrize("how", ["ok", "exit3", "message", "raise", "interrupt"])
def test_a_forked_run_ends_as_a_fresh_one(runner, tmp_path: Path, how: str) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    argv = [sys.executable, str(script), how, "two words"]
    env = dict(runner.env, PROBE_VAR="x")   # not the runner's: this one runs fresh...
    forked = runner.run(argv, cwd=tmp_path / "elsewhere", env=dict(runner.env))
    fresh = _fresh(argv, cwd=tmp_path / "elsewhere", env=dict(runner.env))
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)
    assert "atexit ran" in forked.stdout
    if how == "interrupt":
        assert forked.returncode == -signal.SIGINT
    again = runner.run(argv, cwd=tmp_path, env=env)   # ...and still gives what a fresh one gives
    assert '"var": "x"' in again.stdout and again.returncode == fresh.returncode


def test_a_real_script_prints_the_same_forked_or_fresh(runner) -> None:
    for args in (["cs336/03_costs.py", "--world-size", "6"],
                 ["lecture14/02_primitives.py", "--world-size", "0"]):
        argv = [sys.executable, str(ROOT / "code" / args[0]), *args[1:]]
        forked, fresh = runner.run(argv, cwd=ROOT), _fresh(argv, cwd=ROOT)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode, fresh.stdout, fresh.stderr)


def test_the_script_is_compiled_without_the_runners_future_imports(runner, tmp_path: Path) -> None:
    """prestarted.py has `from __future__ import annotations`; compile() would pass it on, and DDP's
    register_comm_hook refuses a hook whose annotation is then a string."""
    script = tmp_path / "annotated.py"
    script.write_text("def hook(x: int) -> None: ...\nprint(hook.__annotations__['x'] is int)\n",
                      encoding="utf-8")
    assert runner.run([sys.executable, str(script)]).stdout == "True\n"


def test_runs_fork_only_from_the_environment_the_interpreter_imported_torch_in(runner, tmp_path) -> None:
    script = tmp_path / "who.py"
    script.write_text(WHO, encoding="utf-8")
    argv = [sys.executable, str(script)]
    forked = runner.run(argv)
    assert forked.stdout == "True\n" and forked.forked   # torch came with the interpreter
    assert runner.run(argv, env=dict(runner.env, TORCH_CPP_LOG_LEVEL="INFO")).stdout == "False\n"
    for ours in ({"PYTEST_CURRENT_TEST": "other"}, {"COURSE_MAX_RANKS": "3"}):
        assert runner.run(argv, env=dict(runner.env, **ours)).stdout == "True\n"


def test_imports_that_write_to_stderr_make_every_run_fresh(tmp_path: Path) -> None:
    """A warning at import would be on a fresh run's stderr and not on a forked one's."""
    (tmp_path / "sitecustomize.py").write_text("import sys; sys.stderr.write('a warning\\n')\n")
    script = tmp_path / "who.py"
    script.write_text(WHO, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    with Prestarted(env, preload=("json",)) as warned:   # torch's import is not what is tested here
        assert not warned.usable
        proc = warned.run([sys.executable, str(script)], env=env)
    assert (proc.stdout, proc.stderr) == ("False\n", "a warning\n")


def test_a_run_past_its_timeout_is_killed_and_later_runs_start_fresh(tmp_path: Path) -> None:
    """After a run cut short, a reply may be left unread: taken for the next run's, it would give
    that run the wrong exit status and output, so the runner forks no more."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    (tmp_path / "json_loaded.py").write_text("import sys; print('json' in sys.modules)\n", encoding="utf-8")
    with Prestarted(preload=("json",)) as light:
        assert light.run([sys.executable, str(tmp_path / "json_loaded.py")]).stdout == "True\n"  # forked
        start = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            light.run([sys.executable, str(script), "sleep"], timeout=1)
        assert time.monotonic() - start < 10
        assert light.run([sys.executable, str(tmp_path / "json_loaded.py")]).stdout == "False\n"  # fresh
        assert light.run([sys.executable, str(script), "ok"]).returncode == 0


def test_output_left_by_a_run_never_lands_in_the_next(runner, tmp_path: Path) -> None:
    # The script's child prints once the run has returned (it is told so: a sleep was once too short
    # for a script's exit on loaded cores), or after 10 s if the run waits for it.
    go, written = tmp_path / "go", tmp_path / "written"
    late = tmp_path / "late.py"
    late.write_text("import os, sys, time\nif os.fork() == 0:\n    end = time.monotonic() + 10\n"
                    f"    while not os.path.exists({str(go)!r}) and time.monotonic() < end:\n"
                    "        time.sleep(0.02)\n"
                    f"    print('late line'); sys.stdout.flush(); open({str(written)!r}, 'w').close(); "
                    "os._exit(0)\nprint('done')\n", encoding="utf-8")
    (tmp_path / "hello.py").write_text("print('hello')\n", encoding="utf-8")
    assert runner.run([sys.executable, str(late)]).stdout == "done\n"
    go.touch()
    end = time.monotonic() + 30
    while not written.exists() and time.monotonic() < end:
        time.sleep(0.02)
    assert written.exists()
    assert runner.run([sys.executable, str(tmp_path / "hello.py")]).stdout == "hello\n"


def test_spawned_ranks_and_exit_functions_find_the_scripts_classes(runner, tmp_path: Path) -> None:
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN, encoding="utf-8")
    argv = [sys.executable, str(script)]
    forked, fresh = runner.run(argv), _fresh(argv)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, "P(x=3)\nTrue\n", "")


def test_a_caller_folder_that_shadows_the_standard_library_does_not_break_it(tmp_path: Path) -> None:
    (tmp_path / "glob.py").write_text("raise SystemExit('shadowed')\n", encoding="utf-8")
    (tmp_path / "json_loaded.py").write_text("import sys; print('json' in sys.modules)\n", encoding="utf-8")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        with Prestarted(preload=("json", "glob")) as light:
            assert light.run([sys.executable, "json_loaded.py"]).stdout == "True\n"
    finally:
        os.chdir(here)


def test_a_second_run_at_once_runs_fresh(runner, tmp_path: Path) -> None:
    started = tmp_path / "started"
    (tmp_path / "slow.py").write_text(f"import time; open({str(started)!r}, 'w').close(); time.sleep(2)\n"
                                      + WHO, encoding="utf-8")
    (tmp_path / "who.py").write_text(WHO, encoding="utf-8")
    first: list[str] = []
    thread = threading.Thread(target=lambda: first.append(
        runner.run([sys.executable, str(tmp_path / "slow.py")]).stdout))
    thread.start()
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = runner.run([sys.executable, str(tmp_path / "who.py")]).stdout
    thread.join()
    assert (first, second) == (["True\n"], "False\n")


# ---- popen: a forked process read as it runs and signalled, as subprocess.Popen's --------------

LIVE = """
import os, sys, time
sys.stderr.write("on stderr\\n")
sys.stderr.flush()
print("ready", os.getpgid(0) == os.getpid(), flush=True)
for line in range(100000):
    print("line", line)
    time.sleep(0.001)
"""


def _popen_fresh(argv: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.parametrize("how", ["ctrl-c", "ctrl-c to its group", "kill", "reader gone"])
def test_a_popen_is_read_signalled_and_ends_as_a_fresh_one(runner, tmp_path: Path, how: str) -> None:
    script = tmp_path / "live.py"
    script.write_text(LIVE, encoding="utf-8")
    argv, session = [sys.executable, str(script)], how == "ctrl-c to its group"
    ended = []
    for start in (runner.popen, _popen_fresh):
        proc = start(argv, env=runner.env, start_new_session=session)
        first = proc.stdout.readline()
        if how == "reader gone":   # `| head -1`: the next write finds no reader
            proc.stdout.close()
            err = proc.stderr.read()
            proc.wait(timeout=30)
        else:
            if session:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        ended.append((first, proc.returncode, err.splitlines()[0], err.splitlines()[-1],
                      getattr(proc, "forked", False)))
    assert ended[0][:-1] == ended[1][:-1] and ended[0][0] == f"ready {session}\n"
    assert ended[0][-1] and not ended[1][-1]   # the first was forked, the second fresh


def test_a_live_popen_keeps_other_runs_fresh_until_it_is_waited_for(runner, tmp_path: Path) -> None:
    (tmp_path / "who.py").write_text(WHO, encoding="utf-8")
    (tmp_path / "live.py").write_text(LIVE, encoding="utf-8")
    live = runner.popen([sys.executable, str(tmp_path / "live.py")])
    with pytest.raises(subprocess.TimeoutExpired):
        live.communicate(timeout=0.2)
    assert live.poll() is None
    assert runner.run([sys.executable, str(tmp_path / "who.py")]).stdout == "False\n"   # fresh meanwhile
    live.kill()
    assert live.wait(timeout=30) == -signal.SIGKILL
    assert runner.run([sys.executable, str(tmp_path / "who.py")]).stdout == "True\n"    # forked again


def test_a_popen_in_a_session_of_its_own_has_its_group_when_it_returns(runner, tmp_path: Path) -> None:
    # As Popen returns after its child's exec, popen returns after the child's setsid: a Ctrl-C
    # to the group at once must find it (it once lost that race 7 times in 20).
    (tmp_path / "sleeps.py").write_text("import time\ntime.sleep(30)\n", encoding="utf-8")
    for _ in range(10):
        proc = runner.popen([sys.executable, str(tmp_path / "sleeps.py")], start_new_session=True)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL and proc.forked


def test_closing_the_runner_ends_a_live_popen(tmp_path: Path) -> None:
    (tmp_path / "sleeps.py").write_text("import time\ntime.sleep(30)\n", encoding="utf-8")
    light = Prestarted(preload=("json",))
    proc = light.popen([sys.executable, str(tmp_path / "sleeps.py")])
    start = time.monotonic()
    light.close()
    assert time.monotonic() - start < 5 and proc.returncode == -signal.SIGKILL


def test_closing_a_runner_still_importing_does_not_wait_for_its_imports(tmp_path: Path) -> None:
    # Ctrl-C or SIGTERM in the first seconds of a reproduction: the interpreter is importing torch
    # and has forked nothing, so there is nothing to wait for (it would read its end only after).
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(30)\n", encoding="utf-8")
    importing = Prestarted(dict(os.environ, PYTHONPATH=str(tmp_path)), preload=("slow_import",))
    time.sleep(0.5)   # the interpreter has started and is in its import
    start = time.monotonic()
    importing.close()
    assert time.monotonic() - start < 5 and importing._proc.returncode == -signal.SIGKILL
