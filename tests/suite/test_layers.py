"""The house's picture, held by a scan of every import in code/ (function-level and relative imports,
importlib's of a literal name, and a name asked of common.launch's face counted as an import of
the module that holds it, as at run time): each room imports only rooms on lower floors, no two
modules import each other through any chain, no pure simulator reaches the checker, and every
module of common/ is reached at run time from a script (a module that runs as a program, in a
lecture or the report): common/ holds the scripts' runtime, nothing that only the reproduction or
the tests use. Each rule is shown failing on a made-up graph that breaks it. Process-free. (Not
seen: a module loaded from a computed name or path, as cs336/07 loads 05 by its file.)"""

from __future__ import annotations

import ast
from functools import cache

from code_modules import code_modules

# A room's floor: it may import rooms on lower floors only (reproduction/ is the reproduction's own
# machinery: common below it, the report's pages and reproduce.py above).
FLOORS = {"common": 0, "lecture14": 1, "reproduction": 1, "cs336": 2, "lecture15": 3, "report": 4,
          "reproduce": 5}
# Where the scripts are: what a user runs (and the pages reproduce.py writes).
SCRIPT_ROOMS = ("lecture14", "lecture15", "cs336", "report")


def _face(package: str) -> dict[str, str]:
    """A package face's table (name -> the module of the package holding it), as its _FACE says."""
    for node in ast.parse(code_modules()[package].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_FACE" for t in node.targets):
            return {k.value: f"{package}.{v.value}" for k, v in zip(node.value.keys, node.value.values)}
    return {}


def _target(module: str, name: str) -> str:
    if f"{module}.{name}" in code_modules():
        return f"{module}.{name}"
    return _face(module).get(name, module)


def _absolute(importer: str, node: ast.ImportFrom) -> str | None:
    """The module `from ... import` names, a relative one resolved against the importer's package."""
    if node.level == 0:
        return node.module
    package = importer if code_modules()[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _imports(importer: str, tree: ast.AST) -> set[str]:
    """The modules of code/ that the statements under `tree` import: import statements (relative
    ones resolved), and importlib.import_module / __import__ of a literal name."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (module := _absolute(importer, node)) in code_modules():
            found.update(_target(module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in code_modules())
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and node.args[0].value in code_modules()):
            found.add(node.args[0].value)
    return found


def _type_checking_only(tree: ast.Module) -> list[ast.AST]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test)]


@cache
def edges(at_run_time: bool = False) -> dict[str, frozenset[str]]:
    """Every module of code/ -> the modules of code/ it imports (`at_run_time`: leaving out what
    only a type checker reads, under `if TYPE_CHECKING:`)."""
    out = {}
    for name, path in code_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = _imports(name, tree)
        if at_run_time:
            for block in _type_checking_only(tree):
                found -= _imports(name, ast.Module(body=block.body, type_ignores=[]))
        out[name] = frozenset(found - {name})
    return out


def room(module: str) -> str:
    return module.split(".")[0]


def arrows_up(graph: dict[str, frozenset[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if room(a) != room(b) and FLOORS[room(b)] >= FLOORS[room(a)])


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    found += [sorted(part)] if len(part) > 1 else []
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


@cache
def scripts() -> frozenset[str]:
    """What a user runs: the modules of the script rooms that run as a program (`__main__`)."""
    return frozenset(m for m, path in code_modules().items()
                     if room(m) in SCRIPT_ROOMS and "__main__" in path.read_text(encoding="utf-8"))


def reached(graph: dict[str, frozenset[str]], *starts: str) -> set[str]:
    """The modules importing `starts` runs (importing a.b.c runs the packages a and a.b first)."""
    seen, todo = set(), list(starts)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            packages = [module.rsplit(".", k)[0] for k in range(1, module.count(".") + 1)]
            todo += [*graph.get(module, ()), *packages]
    return seen


def unreached(graph: dict[str, frozenset[str]]) -> list[str]:
    """The modules of common/ no script reaches through its imports."""
    seen = reached(graph, *(m for m in graph if m in scripts()))
    return sorted(m for m in graph if room(m) == "common" and m not in seen)


def test_every_room_is_on_a_floor() -> None:
    assert {room(m) for m in code_modules()} == set(FLOORS)


def test_no_arrow_goes_up() -> None:
    assert arrows_up(edges()) == []


def test_no_cycle_between_modules() -> None:
    assert cycles(edges()) == []
    common = {m: t for m, t in edges().items() if room(m) == "common"}
    assert len(common) > 30 and cycles(common) == []


def test_every_common_module_serves_a_script() -> None:
    assert len(scripts()) > 25 and "lecture15.02_buckets" in scripts()
    assert "lecture15.ddp_sim" not in scripts()          # a module scripts import is no start of its own
    assert unreached(edges(at_run_time=True)) == []


# The pure simulators: a model's numbers with calibration targets passed in, never read from the notes.
PURE = ("lecture15.ddp_sim", "cs336.pipeline", "lecture14.collectives", "common.costmodel.steps")


def test_a_pure_simulator_reaches_no_checker() -> None:
    assert {s: "common.checker" in reached(edges(), s) for s in PURE} == dict.fromkeys(PURE, False)
    # the check sees a reach through a function-level import (as ddp_sim's figure once went via output)
    graph = dict(edges(), **{"lecture15.ddp_sim": edges()["lecture15.ddp_sim"] | {"common.output"}})
    assert "common.checker" in reached(graph, "lecture15.ddp_sim")


def test_the_face_counts_as_an_import_of_the_module_holding_the_name() -> None:
    # lecture 15's 01 says `from common.launch import launch`
    assert "common.launch.launcher" in edges()["lecture15.01_ddp_basics"]


def test_each_rule_fails_on_a_graph_that_breaks_it() -> None:
    graph = dict(edges())
    graph["common.units"] = graph["common.units"] | {"lecture15.ddp_sim"}             # an arrow up
    graph["lecture14.collectives"] = graph["lecture14.collectives"] | {"cs336.pipeline"}
    assert arrows_up(graph) == ["common.units -> lecture15.ddp_sim",
                                "lecture14.collectives -> cs336.pipeline"]
    looped = dict(graph, **{"common.units": frozenset({"common.checker"})})          # checker imports units
    assert any({"common.checker", "common.units"} <= set(part) for part in cycles(looped))
    graph["common.orphan"] = frozenset()
    assert unreached(graph) == ["common.orphan"]


def test_imports_written_other_ways_are_seen() -> None:
    """A relative import, importlib's and __import__ of a literal name are imports too; an import
    only a type checker reads is left out of what runs."""
    def seen(text: str, importer: str = "common.units") -> set[str]:
        return _imports(importer, ast.parse(text))

    assert seen("from .checker import decide\nfrom . import text\n") == {"common.checker", "common.text"}
    assert seen("from ..output import Report\n", "common.costmodel.steps") == {"common.output"}
    assert seen("import importlib\nm = importlib.import_module('lecture15.ddp_sim')\n") == {
        "lecture15.ddp_sim"}
    assert seen("ddp = __import__('lecture15.ddp_sim')\n") == {"lecture15.ddp_sim"}
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from common import checker\n")
    assert [_imports("x", ast.Module(body=b.body, type_ignores=[])) for b in _type_checking_only(tree)] == [
        {"common.checker"}]
