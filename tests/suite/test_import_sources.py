"""Every name is imported from the module that defines it: no module re-exports a name it imports.

A re-export layer (`from common.output import fmt_bytes` where common.units defines it) gives one
thing two addresses, and the next reader cannot tell which is the real one. Read statically: every
`from M import x` and every `m.x` (m a module of ours) in code/, tests/, bench/ and practice/, and
every `__all__`, must name something M defines itself (a def, a class, an assignment) or one of its
submodules. Nor does it give a name of ours a second public name: no `from M import x as y` (a
module may be renamed, `import numpy as np`-style, and a name made private, `as _x`), and in code/
and practice/judging/ no module-level `y = m.x` or `y = x` bound to what another module of ours
defines (`ring_time = algorithm("ring all-reduce").time` too: the chain's root is ours). A value
computed from it (`1 * MiB`, `algorithm("ring all-reduce")`) is a new thing, not a name for the old
one. Process-free: a few seconds.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("common", "lecture14", "lecture15", "cs336", "report", "reproduction", "judging")
# The launcher is one package whose face is the point (issue #33, item 1): scripts import `launch`,
# RankError and the rest from common.launch only, and its __init__ lends each name its _FACE lists.
FACES = {"common.launch"}


def _path(module: str) -> Path | None:
    parts = module.split(".")
    base = ROOT.joinpath("practice" if parts[0] == "judging" else "code", *parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _defined(module: str) -> frozenset[str]:
    """The names `module` binds itself at its top level (or inside a top-level if/try)."""
    names: set[str] = set()
    tree = ast.parse(_path(module).read_text(encoding="utf-8"))
    for top in tree.body:
        for node in ast.walk(top) if isinstance(top, (ast.If, ast.Try)) else [top]:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return frozenset(names)


def _ours(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in FIRST_PARTY and _path(module) is not None


@cache
def _face(module: str) -> frozenset[str]:
    """The names a face lends: the keys of its `_FACE` table (name -> the module that holds it)."""
    for node in ast.parse(_path(module).read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_FACE" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return frozenset(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    return frozenset()


def _defines(module: str, name: str) -> bool:
    return (name in _defined(module) or _path(f"{module}.{name}") is not None
            or (module in FACES and name in _face(module)))


def _sources() -> list[Path]:
    return sorted(p for d in ("code", "tests", "bench", "practice") for p in (ROOT / d).rglob("*.py"))


def _borrowed(text: str, rel: str, own: str | None) -> list[str]:
    """`rel:line: module.name` for each name the file (module `own`, if ours) takes from a module
    that does not define it."""
    tree = ast.parse(text)
    found, modules, ours = [], {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            for alias in node.names:
                ours.add(alias.asname or alias.name)
                if _path(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    continue
                if not _defines(node.module, alias.name):
                    found.append(f"{rel}:{node.lineno}: {node.module}.{alias.name}")
                if alias.asname not in (None, alias.name) and not alias.asname.startswith("_"):
                    found.append(f"{rel}:{node.lineno}: {node.module}.{alias.name} renamed {alias.asname}")
        elif isinstance(node, ast.Import):
            modules.update({a.asname: a.name for a in node.names if a.asname and _ours(a.name)})
            ours.update(a.name.split(".")[0] for a in node.names if not a.asname and _ours(a.name))
        elif (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
              and _ours(own)):
            found += [f"{rel}:{node.lineno}: __all__ names {e.value}" for e in getattr(node.value, "elts", [])
                      if isinstance(e, ast.Constant) and not _defines(own, e.value)]
    for node in ast.walk(tree):  # m.x, m a module of ours; m.x = ... (a test patching it) is no import
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and isinstance(node.ctx, ast.Load)):
            module = modules[node.value.id]
            if not _defines(module, node.attr) and node.attr not in _patched(tree, node.value.id):
                found.append(f"{rel}:{node.lineno}: {module}.{node.attr}")
    return found + (_aliases(tree, rel, ours | set(modules)) if own else [])


def _aliases(tree: ast.Module, rel: str, ours: set[str]) -> list[str]:
    """`rel:line: y = m.x` for each public module-level name bound to a name (or an attribute chain
    rooted at one) another module of ours holds."""
    found = []
    for node in tree.body:
        if not (isinstance(node, (ast.Assign, ast.AnnAssign))
                and isinstance(node.value, (ast.Name, ast.Attribute))):
            continue
        root = node.value
        while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
            root = root.func if isinstance(root, ast.Call) else root.value
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(root, ast.Name) and root.id in ours:
            found += [f"{rel}:{node.lineno}: {n.id} = {ast.unparse(node.value)}" for t in targets
                      for n in ast.walk(t) if isinstance(n, ast.Name) and not n.id.startswith("_")]
    return found


def _module_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT).with_suffix("").parts
    if rel[0] == "code":
        rel = rel[1:]
    elif rel[:2] == ("practice", "judging"):
        rel = rel[1:]
    else:
        return None
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def _patched(tree: ast.AST, alias: str) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == alias and not isinstance(n.ctx, ast.Load)}


def test_every_name_is_imported_from_where_it_is_defined() -> None:
    found = [line for path in _sources()
             for line in _borrowed(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix(),
                                   _module_of(path))]
    assert not found, ("names taken from a module that does not define them, or given a second public "
                       "name:\n" + "\n".join(found))


def test_the_scan_finds_a_re_export() -> None:
    text = "from common.output import Report, fmt_bytes\nfrom common import output\noutput.wrap('a')\n"
    assert [line.split(": ")[1] for line in _borrowed(text, "x.py", None)] == ["common.output.fmt_bytes",
                                                                              "common.output.wrap"]
    assert _borrowed("__all__ = ['MB', 'simulate_ddp']\n", "ddp_sim.py", "lecture15.ddp_sim") == [
        "ddp_sim.py:1: __all__ names MB"]


SECOND_NAMES = {  # the house review's probes, and the shapes beside them
    "a rename": ("from common.costmodel.collectives import split_sizes as piece_sizes\n",
                 "common.costmodel.collectives.split_sizes renamed piece_sizes"),
    "a bound method": ("from common.costmodel.collectives import algorithm\n"
                       "ring_time = algorithm('ring all-reduce').time\n",
                       "ring_time = algorithm('ring all-reduce').time"),
    "a module's name": ("from common import units\nMEBI: int = units.MiB\n", "MEBI = units.MiB"),
    "a name": ("from common.units import MiB\nMEBI = MiB\n", "MEBI = MiB"),
    "a dotted import": ("import common.units\nMEBI = common.units.MiB\n", "MEBI = common.units.MiB"),
}


@pytest.mark.parametrize("case", SECOND_NAMES)
def test_the_scan_finds_a_second_name(case: str) -> None:
    text, name = SECOND_NAMES[case]
    found = _borrowed(text, "code/x.py", "x")
    assert [line.split(": ", 1)[1] for line in found] == [name]


@pytest.mark.parametrize("text", [
    "import numpy as np\nfrom matplotlib import pyplot as plt\n",   # modules, not names of ours
    "from common.costmodel import collectives as cdef\nimport common.units as u\n",
    "from common.units import MiB as _MiB\n_ONE = _MiB\n",           # private: no second public name
    "from common.units import MiB\nFIRST_BUCKET_BYTES = 1 * MiB\n",  # a value of its own
    "from common.costmodel.collectives import algorithm\nRING = algorithm('ring all-reduce')\n",
])
def test_the_scan_leaves_module_aliases_private_names_and_values(text: str) -> None:
    assert _borrowed(text, "code/x.py", "x") == []


def test_a_test_may_hold_a_name_of_ours_under_its_own() -> None:
    """Outside code/ (a test's, a benchmark's module) a binding is a local convenience, not an API."""
    assert _borrowed("from common.units import MiB\nMEBI = MiB\n", "test_x.py", None) == []
