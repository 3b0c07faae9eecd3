"""The instructor's one command and the benchmark: they find every script and report what ran."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, python, run_script

from reproduction import lanes
from reproduction.prestarted import PRELOAD
from reproduction.suite import CODE, LECTURES, SHORTENS, scripts


def test_suite_lists_every_numbered_script_and_no_module() -> None:
    names = [s.name for s in scripts()]
    for lecture in ("lecture14", "lecture15"):
        assert [n for n in names if re.match(rf"{lecture}/0[1-5]_", n)] == sorted(
            n for n in names if re.match(rf"{lecture}/0[1-5]_", n))
        assert len([n for n in names if re.match(rf"{lecture}/0[1-5]_", n)]) == 5
    modules = {"collectives.py", "ddp_sim.py", "data_parallel.py", "my_ddp.py", "models.py", "__init__.py"}
    assert not any(n.split("/")[1] in modules for n in names)
    real = {s.name for s in scripts() if s.real}
    assert "lecture15/02_buckets.py" in real and "lecture15/03_overlap.py" not in real


def test_every_file_that_sees_quick_belongs_to_a_shortened_script() -> None:
    # The tests run the full reproduction for shortened scripts only (conftest.full_reproduction):
    # a module that reads --quick but is no script's own nor imported by one would escape it.
    covered = {source for s in scripts() if s.shortened for source in s.sources}
    for lecture in LECTURES:
        for path in (CODE / lecture).glob("*.py"):
            text = path.read_text(encoding="utf-8")
            if re.search(SHORTENS, text):
                assert text in covered, f"{path.name} reads --quick, and no shortened script imports it"
    shortened = {s.name for s in scripts() if s.shortened}
    assert {"lecture15/02_buckets.py", "lecture14/05_data_parallel.py"} <= shortened   # quick=, args.quick
    assert "cs336/09_zero.py" not in shortened


def test_reproduce_collects_every_claim(tmp_path) -> None:
    out_json = tmp_path / "claims.json"
    proc = run_script("reproduce.py", "--quick", "--only", "14/exercises,15/exercises",   # either text
                      "--json", str(out_json), "--no-report")   # not over the checkout's report/
    # the reproduction's printed summary (what is tested): each script named, the total of claims counted
    assert "lecture14/exercises.py" in proc.stdout and "lecture15/exercises.py" in proc.stdout
    data = json.loads(out_json.read_text())
    per_script = {c["script"] for c in data["claims"]}
    assert per_script == {"lecture14/exercises.py", "lecture15/exercises.py"}
    total = int(re.search(r"; (\d+) claims \(", proc.stdout).group(1))
    assert total == len(data["claims"]) > 20


def test_scripts_still_fork_where_matplotlibs_import_always_speaks(tmp_path) -> None:
    # The reproduction's interpreter imports matplotlib for the pages only if that import is quiet:
    # here it warns at every import (its config folder is a file), which would make every script
    # start fresh, the ones that never draw too. Drawn, the warning is the script's own, as fresh.
    (tmp_path / "not_a_folder").write_text("", encoding="utf-8")
    out = tmp_path / "run.json"
    proc = python(ROOT / "code" / "reproduce.py", "--quick", "--only", "lecture14/03", "--json", out,
                  "--report", tmp_path / "report", env={"MPLCONFIGDIR": str(tmp_path / "not_a_folder")},
                  timeout=300)
    assert proc.returncode == 0, proc.stderr
    [run] = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert run["forked"] and list((tmp_path / "report" / "figures").glob("*.png")), run


@pytest.mark.parametrize("speaks", ["once", "always"])
def test_an_interpreter_whose_matplotlib_spoke_is_replaced_by_one_without(tmp_path, monkeypatch,
                                                                          speaks: str) -> None:
    # matplotlib's first import on a new machine may say it builds its font cache; with a config
    # folder it cannot use, every import warns. Either way that interpreter forks nothing, and a
    # lane's runs would all start fresh: the lane starts one that imports numpy alone.
    (tmp_path / "speaks.py").write_text(
        f"import os\nif {speaks == 'always'} or not os.path.exists({str(tmp_path / 'built')!r}):\n"
        f"    print('building a cache'); open({str(tmp_path / 'built')!r}, 'w').close()\n", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(lanes, "MATPLOTLIB", ("speaks",))
    interpreter = lanes.Interpreter(("numpy",), drawing=True)
    try:
        first = interpreter._runners[0]
        assert interpreter.runner().usable and not first.usable
    finally:
        interpreter.close()


def test_the_interpreter_imports_torch_only_for_scripts_that_start_ranks() -> None:
    # A reproduction of model-only scripts (`--only lecture14/01`) does not wait for torch's import.
    model_only = [s for s in scripts() if not s.real]
    real = [s for s in scripts() if s.real]
    assert model_only and real
    assert lanes.preload(model_only) == ("numpy",)
    assert lanes.preload(model_only + real[:1]) == PRELOAD


def test_bench_prints_a_row_per_script() -> None:
    proc = run_script("../bench/bench_scripts.py", "--quick", "--only", "lecture14/01")
    row = [ln for ln in proc.stdout.splitlines()
           if ln.strip().startswith("lecture14/01_scale.py") and "target" not in ln]
    assert row and ("meets" in row[-1] or "SLOWER" in row[-1])
    # a model-only script with --world-size is timed again at the largest world size, as its own row
    big = [ln for ln in row if "--world-size 1024" in ln and "model only" in ln]
    assert big and ("meets" in big[0] or "SLOWER" in big[0])



def test_ci_runs_the_readmes_test_command() -> None:
    """CI runs what the README tells a student to run (the bench's --with-suite times the same)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    command = next(ln for ln in readme if ln.startswith("python3 -m pip install -r requirements-dev.txt && "))
    command = command.split(" && ", 1)[1]
    assert command.startswith("python3 -m pytest ")
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert command in ci, f"CI does not run the README's test command {command!r}"


def test_the_readme_starts_with_the_student_and_links_every_doc() -> None:
    """At most 150 lines, the student's first command within the first 40, every page of docs/
    reachable from it (and each page back to it)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, len(lines)
    first = next(i for i, ln in enumerate(lines) if ln.startswith("python code/"))
    assert first < 40, first
    text = "\n".join(lines)
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in text, f"README links no docs/{page.name}"
        if page.name != "errata.md":     # generated
            assert "(../README.md)" in page.read_text(encoding="utf-8"), page.name
