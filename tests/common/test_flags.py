"""One flag per knob: a flag that more than one command offers comes from common.flags.FLAGS, and a
knob has one name everywhere (a static reading of every add_argument, scripts and tools alike:
tests/suite/test_runtime.py checks the lecture scripts' parsers as they run)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

from common import flags

# Names a knob once had beside its FLAGS name: pipeline stages are --pp (cs336/05_parallel.py and
# 06_pipeline.py), timed repeats whose median is reported are --repeats (02_benchmark had --iters).
RETIRED = {"--stages": "--pp", "--iters": "--repeats", "--runs": "--repeats"}


def _added_options(path: Path) -> list[str]:
    """The option strings of every add_argument call in `path`, given as literal strings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [arg.value for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")]


def _commands() -> list[Path]:
    found = [p for d in ("code", "bench", "practice") for p in (ROOT / d).rglob("*.py")]
    return sorted(p for p in found if p.name != "cli.py" and "add_argument" in p.read_text(encoding="utf-8"))


def test_a_flag_offered_twice_or_shared_comes_from_flags() -> None:
    shared = {f"--{name.replace('_', '-')}" for name in flags.FLAGS}
    where: dict[str, list[str]] = {}
    for path in _commands():
        for option in _added_options(path):
            where.setdefault(option, []).append(str(path.relative_to(ROOT)))
    assert where, "the reading found no add_argument at all"
    for option, paths in where.items():
        assert option not in shared, (f"{paths} add {option} themselves: "
                                      f"make_parser(..., {option[2:]}=...) gives it")
        assert len(paths) == 1, f"{option} is added in {paths}: define it once in common.flags.FLAGS"
        assert option not in RETIRED, f"{paths} offer {option}: the knob is {RETIRED[option]}"


def test_the_reading_finds_a_second_definition(tmp_path: Path) -> None:
    script = tmp_path / "x.py"
    script.write_text('p.add_argument("--only", default="")\np.add_argument("--iters", type=int)\n')
    assert _added_options(script) == ["--only", "--iters"]
