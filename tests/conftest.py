"""Helpers for the tests: run a numbered script as a student would, in a process of its own."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["fast_loop"]   # `-m fast`: the tests that start no process (tests/fast_loop.py)

# A shell starts a background job (`… &`, a CI runner's step) with SIGINT ignored, and every process
# inherits that across exec: each test of Ctrl-C would then wait for an interrupt that never comes.
# A handler of Python's own here is reset to the default in every process the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# What the scripts write when given no path (reproduce.py's pages, --save-figs' figures): a student's
# own results in the checkout, which no test may replace. The controlling process checks it.
_DEFAULT_OUTPUTS = ("report", "figs", "out")


def _default_outputs() -> dict[str, tuple[int, int]]:
    found = {}
    for folder in _DEFAULT_OUTPUTS:
        for path in (ROOT / folder).rglob("*"):
            try:
                if path.is_file():
                    found[str(path.relative_to(ROOT))] = (path.stat().st_mtime_ns, path.stat().st_size)
            except FileNotFoundError:   # removed meanwhile (by something else than the tests, say)
                pass
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        session.config._default_outputs = _default_outputs()  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = getattr(session.config, "_default_outputs", None)
    after = _default_outputs() if before is not None and exitstatus == 0 else before
    if after != before:
        changed = set(before.items()) ^ set(after.items())
        sys.stderr.write(f"the tests wrote into the checkout's {'/, '.join(_DEFAULT_OUTPUTS)}/: "
                         f"{', '.join(sorted({name for name, _ in changed})[:5])}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def code_env(**extra: str) -> dict[str, str]:
    """The environment for a `python -c` child that imports this checkout's code/ (scripts run by
    path find it themselves)."""
    path = os.pathsep.join(filter(None, [str(ROOT / "code"), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


_RUNNER: list = []   # this worker's prestarted interpreter, made on the first run_script


def _runner():  # type: ignore[no-untyped-def]
    """The worker's reproduction.prestarted.Prestarted: each run forks from an interpreter that has
    imported torch once (a fresh start per run was most of the suite's time). Tests of how a
    process starts, signals and torchrun start theirs with subprocess."""
    if not _RUNNER:
        import atexit

        from reproduction.prestarted import Prestarted

        _RUNNER.append(Prestarted(dict(os.environ, PYTHONUNBUFFERED="1")))
        atexit.register(_RUNNER[0].close)
    return _RUNNER[0]


def python(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """`python FILE ARGS` with its output captured (subprocess.run's result), with the test's
    environment plus `env`; forked from the worker's prestarted interpreter where it can be."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return _runner().run([sys.executable, *map(str, args)], cwd=cwd, env=env, timeout=timeout)


def popen(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None,
          start_new_session: bool = False):  # type: ignore[no-untyped-def]
    """`python FILE ARGS` as subprocess.Popen(stdout=PIPE, stderr=PIPE, text=True) starts it (read
    as it comes, signalled, waited), forked where it can be, like `python`. For tests of what a
    script does with signals and its ranks, not of how a process starts: those Popen their own."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = _runner().popen([sys.executable, *map(str, args)], cwd=cwd, env=env,
                           start_new_session=start_new_session)
    _POPENS.append(proc)
    return proc


_POPENS: list = []   # this test's popens: ended after it, so that a failed test leaves none running


@pytest.fixture(autouse=True)
def _end_popens():  # type: ignore[no-untyped-def]
    """A popen the test did not wait for (it failed first) is killed and waited for: the runner
    serves nothing else until then, and every later run of the worker would start fresh."""
    yield
    while _POPENS:
        proc = _POPENS.pop()
        if proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - the test's own failure is the one to report
                pass


def run_script(relpath: str, *args: str, timeout: float = 120,
               expect_rc: int | None = 0) -> subprocess.CompletedProcess:
    """Run code/<relpath> with args; check the exit status (None: don't) and return the result."""
    proc = python(ROOT / "code" / relpath, *args, timeout=timeout)
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError(f"{relpath} {' '.join(args)} exited {proc.returncode}, expected {expect_rc}\n"
                             f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}")
    return proc


def flat(text: str) -> str:
    """Output with its line wrapping undone (every run of whitespace one space), for tests that
    look for a phrase wherever the page width broke it."""
    return " ".join(text.split())


def assert_usage_error(relpath: str, *args: str) -> None:
    """Bad input: exit status 2, exactly one line on stderr, no traceback."""
    proc = run_script(relpath, *args, expect_rc=2, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def load_script(relpath: str) -> ModuleType:
    """Import code/<relpath> as a module without running main() (numbered names are no identifiers)."""
    path = ROOT / "code" / relpath
    name = f"script_{path.parent.name}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


PATCHED = """
import sys
sys.path.insert(0, {code!r})
sys.argv = [{argv0!r}, *{args!r}]
import importlib.util
spec = importlib.util.spec_from_file_location("patched", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules["patched"] = module
spec.loader.exec_module(module)
{patch}
from common.script_end import run_main
run_main(module.main)   # forked ranks inherit the patch
"""


def run_patched(tmp_path: Path, relpath: str, patch: str, args: list[str]) -> str:
    """`relpath` run with `patch` (code that edits `module`, the script) applied first; it must end
    as a failed self-check does: exit 1 and one line on stderr, which is returned."""
    wrapper = tmp_path / "patched.py"
    script = ROOT / "code" / relpath
    wrapper.write_text(PATCHED.format(code=str(ROOT / "code"), argv0=script.name, args=args,
                                      script=str(script), patch=patch), encoding="utf-8")
    proc = python(wrapper)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def script():
    return run_script


def _shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder that every worker of this test session sees: pytest-xdist gives each worker its
    own base temporary folder inside the session's, so the session's is the parent of a worker's."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


def computed_once(folder: Path, compute: Callable[[Path], None]) -> None:
    """compute(folder) in the first worker that asks, under a lock; the others wait for it and
    reuse what it wrote. A failure is kept too, so each worker fails with it instead of running
    the same broken work again."""
    failed, done = folder / "failed.txt", folder / "done"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if compute() raises
        if not done.exists() and not failed.exists():
            try:
                compute(folder)
            except BaseException as err:
                failed.write_text(f"{type(err).__name__}: {err}", encoding="utf-8")
                raise
            done.touch()
    if failed.exists():
        pytest.fail(f"computed once for the session, and it failed: {failed.read_text(encoding='utf-8')}")


def _reproduction(tmp_path_factory: pytest.TempPathFactory, name: str, *flags: str,
                  pages: bool = True) -> dict:
    """reproduce.py's --json, with "report_dir" (its pages, unless pages=False) and "stdout" added;
    run once per test session, whatever the number of workers."""
    folder = _shared_folder(tmp_path_factory, name)
    out, pages_dir = folder / "all.json", folder / "report"

    def run(_: Path) -> None:
        # A script that fails fails its own tests (each run's exit status is in the JSON), not
        # every test that reads the reproduction: only a reproduction that wrote no JSON is lost.
        where = ["--report", str(pages_dir)] if pages else ["--no-report"]
        proc = run_script("reproduce.py", *flags, "--json", str(out), *where, timeout=540, expect_rc=None)
        if not out.is_file():
            raise AssertionError(f"reproduce.py {' '.join(flags)} exited {proc.returncode} and wrote no "
                                 f"--json\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr "
                                 f"---\n{proc.stderr[-3000:]}")
        (folder / "stdout.txt").write_text(proc.stdout, encoding="utf-8")

    computed_once(folder, run)
    return dict(json.loads(out.read_text(encoding="utf-8")), report_dir=pages_dir,
                stdout=(folder / "stdout.txt").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def quick_reproduction(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`reproduce.py --quick --json`, run once for every test that reads it: the claims policy,
    the pages, and every smoke test of a script's `--quick` run (`quick_run`)."""
    return _reproduction(tmp_path_factory, "reproduce-quick", "--quick")


@pytest.fixture(scope="session")
def memory_claims() -> list[dict]:
    """The claims 04_memory.py's rows give the memory page (report/memory.py), decided once."""
    from report.memory import script_claims

    return script_claims()


@pytest.fixture(scope="session")
def memory_costs() -> list[dict]:
    """The claims of 03_costs.py's link rows the memory page cites, decided once."""
    from report.memory import COSTS, script_claims

    return script_claims(COSTS)


@pytest.fixture(scope="session")
def memory_page(tmp_path_factory: pytest.TempPathFactory, memory_claims: list[dict],
                memory_costs: list[dict]) -> Path:
    """report/memory.html as reproduce.py writes it, for the two memory page test files."""
    from report.memory import write_memory

    return write_memory(tmp_path_factory.mktemp("memory-page"), memory_claims, memory_costs)


@pytest.fixture(scope="session")
def full_reproduction(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`reproduce.py --json` without --quick, run once, for the scripts --quick shortens (a script
    whose code never sees --quick runs the same either way: its quick run stands for both)."""
    from reproduction.suite import scripts

    shortened = ",".join(s.name for s in scripts() if s.shortened)
    return _reproduction(tmp_path_factory, "reproduce-full", "--only", shortened, pages=False)


class QuickRun(NamedTuple):
    stdout: str
    data: dict      # the script's own --json
    figures: Path   # where its --save-figs figures are (with every other script's)


def _whole_reproduction_wanted(session: pytest.Session) -> bool:
    """Whether a test this session collected reads the whole reproduction itself (the claims
    policy, the pages, the output's share): then every quick_run reads it too."""
    return any("quick_reproduction" in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session")
def quick_run(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Callable[..., QuickRun]:
    """quick_run("lecture14/02_primitives.py", json_to=PATH): that script's `--quick --json` run
    (with --save-figs where it draws), taken from a reproduction instead of a run of its own: the
    same command a student types, run once for every test that reads it. json_to writes its --json
    to PATH as the run would have. In the whole suite, the session's one reproduction of every
    script; in a session that collected no test of the whole reproduction (`pytest
    tests/lecture15/test_03_overlap.py`), a reproduction of just the scripts its tests read, each
    when first asked for (seconds, not the whole run's half minute)."""
    runs: dict[str, tuple[dict, Path]] = {}
    if _whole_reproduction_wanted(request.session):
        data = request.getfixturevalue("quick_reproduction")
        runs.update({run["script"]: (run, data["report_dir"] / "figures") for run in data["runs"]})

    def reproduction_of(relpath: str) -> tuple[dict, Path]:
        if relpath not in runs:    # no whole reproduction in this session (or not in it): this script alone
            data = _reproduction(tmp_path_factory, "reproduce-quick-" + relpath.replace("/", "-"),
                                 "--quick", "--only", relpath)
            found = [run for run in data["runs"] if run["script"] == relpath]
            assert len(found) == 1, f"--only {relpath} ran {[run['script'] for run in data['runs']]}"
            runs[relpath] = (found[0], data["report_dir"] / "figures")
        return runs[relpath]

    def lookup(relpath: str, json_to: Path | None = None) -> QuickRun:
        run, figures = reproduction_of(relpath)
        if run["rc"] != 0 or run.get("json") is None:
            raise AssertionError(f"{relpath} --quick exited {run['rc']} in the reproduction\n--- stdout ---\n"
                                 f"{run['stdout'][-3000:]}\n--- stderr ---\n{run['stderr'][-3000:]}")
        if json_to is not None:
            Path(json_to).write_text(json.dumps(run["json"]), encoding="utf-8")
        return QuickRun(run["stdout"], run["json"], figures)

    return lookup


def every_row_agrees(relpath: str, data: dict) -> dict[str, dict]:
    """A run's claims by row id, asserting every row of the script's tables was decided and agrees
    (for a script whose rows are all our own checks of engines that must hold)."""
    from common import checker

    claims = {c["ref"]: c for c in data["claims"]}
    assert {r.id for r in checker.rows_for(relpath)} == set(claims)      # every row decided
    assert all(c["status"] == "agrees" for c in claims.values()), [c for c in claims.values()
                                                                   if c["status"] != "agrees"]
    return claims


# ---- a real browser for the report's pages ---------------------------------------------------------

def chromium_path() -> str | None:
    """The Chromium the page tests drive: $CHROMIUM, else Debian's `chromium` on PATH."""
    import shutil

    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium through Playwright (pointed at the system's browser: Playwright cannot
    download its own here). Without one the page tests are skipped, saying why, except under CI
    (CI=1, set by .ci/run), where a missing browser fails them."""
    path = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = ("no Chromium (apt-get install chromium, or set CHROMIUM)" if path is None else
               "no playwright (pip install -r requirements-dev.txt)" if sync_playwright is None else "")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the page tests need a browser and CI must run them: {missing}")
        pytest.skip(f"page tests skipped: {missing}")
    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class PageErrors(list):
    """Console errors, uncaught exceptions and failed requests of one page."""


def offline_page(browser, path: Path, width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """(page, errors): `path` opened in a fresh offline context of that size, loaded; `errors`
    collects console errors, uncaught exceptions and failed requests (any fetch from the network)."""
    context = browser.new_context(offline=True, viewport={"width": width, "height": height})
    page = context.new_page()
    errors = PageErrors()
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(Path(path).resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors


def open_mutated(browser, page_file: Path, folder: Path, before: str, after: str):  # type: ignore[no-untyped-def]
    """A page's mutation for a check that must fail on it: `page_file` with `before` (there exactly
    once) replaced by `after`, written into `folder` and opened offline: (page, errors)."""
    html = page_file.read_text(encoding="utf-8")
    assert html.count(before) == 1, before
    broken = folder / page_file.name
    broken.write_text(html.replace(before, after), encoding="utf-8")
    return offline_page(browser, broken)


@pytest.fixture
def open_page(browser, tmp_path_factory):
    """open_page(path) -> (page, errors): a file opened in a fresh page, offline (a page that
    fetches anything from the network fails the test through `errors`). A screenshot of each page
    is written to a temporary folder when the test ends, and its path printed."""
    contexts = []

    def opener(path: Path):
        page, errors = offline_page(browser, path)
        contexts.append((page.context, path))
        return page, errors

    yield opener
    shots = tmp_path_factory.mktemp("screenshots")
    for context, path in contexts:
        for page in context.pages:
            shot = shots / f"{Path(path).stem}.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        context.close()
