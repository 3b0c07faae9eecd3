"""One public name for a collective's time and one for its bytes: Algorithm.time and
Algorithm.busiest_bytes (with bytes_sent, total_bytes and round_bytes, the same bytes by position,
added up, or per round), reached as `collectives.algorithm(name).time(...)`.

A second name is any public name in code/ or practice/judging/ that hands one of them back under
another name, found by what the code does, not by what it is called: a function or method whose
return is such a call with (some of) its own arguments passed through, scaled by a count, picked
by a condition, held in a local first, or reached through a private helper; a lambda or
functools.partial doing the same; a module name bound to the bound method (plain, annotated or
in a tuple); a table (a dict, literal or comprehension, or a list) of such values or functions.

What stays (a different question, a value rather than a name): sums over several calls (a step's
or a hook's traffic: 06_comm_hooks' ring_price), records such as (calls, bytes), ratios and
differences (a share, a bandwidth term), a measure at fixed arguments (a number), a handle on the
Algorithm itself (`RING_ALLREDUCE = algorithm("ring all-reduce")`: the time is still its `.time`),
a simulator's run (lecture14.collectives.allreduce moves data; its Result is the independent count
the definition is checked against), and the functions EXEMPT names, each with why. Read
statically; no process.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASURES = {"time", "busiest_bytes", "bytes_sent", "total_bytes", "round_bytes"}
SCALINGS = (ast.Mult, ast.Div, ast.FloorDiv)  # a count of calls, halved: the same measure
# (file, public name) -> why it is not a second name. An entry the scan no longer finds fails below.
EXEMPT = {
    ("code/common/costmodel/collectives.py", "bus_factor"):
        "nccl-tests' busbw/algbw ratio: bytes per byte of N, the factor nccl-tests prints",
    ("code/common/costmodel/steps.py", "tp_step_bytes_per_device"):
        "a tensor-parallel step's 2L collectives on the activation: a step's traffic",
}


class _Module:
    """One file's top level: its functions and module names, and which of them are wrappers."""

    def __init__(self, tree: ast.Module) -> None:
        self.wrappers: set[str] = set()          # names whose value is a measure (function or callable)
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        bound = [pair for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for pair in _bindings(n)]
        grown = True
        while grown:                              # a wrapper of a wrapper is one too: to a fixpoint
            before = len(self.wrappers)
            self.wrappers |= {d.name for d in defs if self.returns_measure(d)}
            self.wrappers |= {name for name, value in bound if self.measure(value, set(), {})}
            grown = len(self.wrappers) > before

    def returns_measure(self, func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> bool:
        args = func.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                  *filter(None, [args.vararg, args.kwarg])]}
        if isinstance(func, ast.Lambda):
            return self.measure(func.body, params, {})
        local: dict[str, ast.expr] = {}
        for node in _own_nodes(func):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                local.update(_bindings(node))
        return any(self.measure(r.value, params | set(local), local) for r in _own_nodes(func)
                   if isinstance(r, ast.Return) and r.value is not None)

    def measure(self, e: ast.expr, params: set[str], local: dict[str, ast.expr],
                seen: frozenset[str] = frozenset()) -> bool:
        """`e` is a collective's time or bytes computed from `params`, or a function giving it."""
        def again(x: ast.expr) -> bool:
            return self.measure(x, params, local, seen)

        if isinstance(e, ast.Attribute):   # the bound method of an Algorithm held outside the call
            root = next((n.id for n in ast.walk(e.value) if isinstance(n, ast.Name)), "")
            return e.attr in MEASURES and not _is_time_module(e.value) and root not in params
        if isinstance(e, ast.Call):
            func = e.func
            if isinstance(func, ast.Attribute) and func.attr in MEASURES and not _is_time_module(func.value):
                return _passes(e, params)
            if isinstance(func, ast.Name) and func.id in self.wrappers:
                return _passes(e, params)
            if _name_of(func) == "partial":
                return bool(e.args) and again(e.args[0])
            return False                            # sum(), max(), another function: other computation
        if isinstance(e, ast.Name):
            if e.id in local and e.id not in seen:
                return self.measure(local[e.id], params, local, seen | {e.id})
            return e.id in self.wrappers
        if isinstance(e, ast.Lambda):
            return self.returns_measure(e) or self.measure(e.body, params, local, seen)
        if isinstance(e, ast.BinOp) and isinstance(e.op, SCALINGS):  # one side measured, the other a count
            return any(again(a) and not any(again(x) for x in ast.walk(b) if isinstance(x, ast.expr))
                       for a, b in ((e.left, e.right), (e.right, e.left)))
        if isinstance(e, ast.UnaryOp):
            return again(e.operand)
        if isinstance(e, ast.IfExp):
            return again(e.body) or again(e.orelse)
        if isinstance(e, ast.Subscript):
            return again(e.value)
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):  # a table of measures; (calls, bytes) is a record
            return bool(e.elts) and all(again(x) for x in e.elts)
        if isinstance(e, ast.Dict):
            return bool(e.values) and all(again(x) for x in e.values)
        if isinstance(e, ast.DictComp):
            return again(e.value)
        if isinstance(e, (ast.ListComp, ast.SetComp)):
            return again(e.elt)
        return False


def _is_time_module(e: ast.expr) -> bool:
    return isinstance(e, ast.Name) and e.id == "time"   # time.time(): the clock, not a collective


def _name_of(e: ast.expr) -> str:
    return e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else ""


def _passes(call: ast.Call, params: set[str]) -> bool:
    """The call takes one of the caller's arguments (or locals): a name for the function, not a number."""
    return any(isinstance(n, ast.Name) and n.id in params for n in ast.walk(call))


def _pairs(target: ast.expr, value: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) for each name an assignment binds; `a, b = x, y` pairs them."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            for t, v in zip(target.elts, value.elts):
                yield from _pairs(t, v)
        else:
            for t in target.elts:
                yield from _pairs(t, value)


def _bindings(node: ast.Assign | ast.AnnAssign) -> Iterator[tuple[str, ast.expr]]:
    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        if node.value is not None:
            yield from _pairs(target, node.value)


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The function's nodes, not those of the functions and classes defined inside it."""
    for child in ast.iter_child_nodes(func):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _own_nodes(child)


def _second_names(text: str, rel: str, exempt: dict[tuple[str, str], str] = EXEMPT) -> list[str]:
    """`rel:line: name` for each public name of the file that is a second name (module doc)."""
    tree = ast.parse(text)
    module = _Module(tree)
    found = [(d.lineno, d.name) for d in tree.body
             if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name in module.wrappers]
    found += [(n.lineno, name) for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
              for name, value in _bindings(n) if module.measure(value, set(), {})]
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef) and not c.name.startswith("_")):
        found += [(m.lineno, f"{cls.name}.{m.name}") for m in cls.body
                  if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and module.returns_measure(m)]
    return [f"{rel}:{line}: {name}" for line, name in sorted(found)
            if not name.split(".")[-1].startswith("_") and (rel, name) not in exempt]


def _scanned() -> Iterator[tuple[str, str]]:
    for path in sorted([*ROOT.glob("code/**/*.py"), *ROOT.glob("practice/judging/*.py")]):
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_one_public_name_for_a_collectives_time_and_bytes() -> None:
    found = [line for rel, text in _scanned() for line in _second_names(text, rel)]
    assert not found, ("a second public name for a collective's time or bytes (call "
                       "collectives.algorithm(name).time / .busiest_bytes instead):\n" + "\n".join(found))


def test_every_exemption_is_still_found() -> None:
    """An exemption names a function the scan would report: one removed or renamed takes its entry."""
    texts = dict(_scanned())
    for rel, name in EXEMPT:
        assert f"{name}" in {line.split(": ")[1] for line in _second_names(texts[rel], rel, {})}, (rel, name)


ALG = 'algorithm("ring all-reduce")'


def _def(head: str, *body: str) -> str:
    return f"def {head}:\n" + "".join(f"    {line}\n" for line in body)


# The reviewer's probes (issue #33's house review), each hidden from the scan before: the text and
# the names it must report. Then earlier ones: a count of calls, halved, a table of functions.
SECOND_NAMES = {
    "plain def": (_def("ring_allreduce_time(k, n, link)", f"return {ALG}.time(k, n, link)"),
                  ["ring_allreduce_time"]),
    "named seconds": (_def("ring_allreduce_seconds(k, n, link)", f"return {ALG}.time(k, n, link)"),
                      ["ring_allreduce_seconds"]),
    "named cost": (_def("allreduce_cost(k, n, link)", f"return {ALG}.time(k, n, link)"), ["allreduce_cost"]),
    "named traffic": (_def("ring_traffic(k, n)", f"return {ALG}.busiest_bytes(k, n)"), ["ring_traffic"]),
    "lambda": (f"ring_time = lambda k, n, link: {ALG}.time(k, n, link)\n", ["ring_time"]),
    "partial": (f"ring_time = functools.partial({ALG}.time)\n", ["ring_time"]),
    "two hops": (_def("_t(k, n, link)", f"return {ALG}.time(k, n, link)")
                 + _def("ring_time(k, n, link)", "return _t(k, n, link)"), ["ring_time"]),
    "5 statements": (_def("ring_time(k, n, link)", "a = 1", "b = 2", "c = 3", "d = 4",
                          f"return {ALG}.time(k, n, link)"), ["ring_time"]),
    "dict comprehension": (_def("allreduce_times(k, n, link)",
                                "return {m: algorithm(m).time(k, n, link) for m in NAMES}"),
                           ["allreduce_times"]),
    "round_bytes": (_def("ring_round_bytes(k, n)", f"return {ALG}.round_bytes(k, n)"), ["ring_round_bytes"]),
    "annotated": (f"ring_bytes: object = {ALG}.busiest_bytes\n", ["ring_bytes"]),
    "tuple": ("ring_time, ring_bytes = A.time, A.busiest_bytes\n", ["ring_bytes", "ring_time"]),
    "a count of calls": ("class CollectiveCall:\n    " + _def("time(self, k, link)",
                         "    return self.calls * self._ring().time(k, self.nbytes, link)"),
                         ["CollectiveCall.time"]),
    "halved": (_def("parameter_server_time(k, n, link, duplex=False)",
                    'both = algorithm("parameter server").time(k, n, link)',
                    "return both / 2 if duplex else both"), ["parameter_server_time"]),
    "table of functions": (_def("_ring(k, n, link)", f"return {ALG}.time(k, n, link)")
                           + "ALLREDUCE_TIMES = {'ring': _ring}\n", ["ALLREDUCE_TIMES"]),
    "factory": (_def("ring_at(k, link)", f"return lambda n: {ALG}.time(k, n, link)"), ["ring_at"]),
}


@pytest.mark.parametrize("case", SECOND_NAMES)
def test_the_scan_finds_a_second_name(case: str) -> None:
    text, names = SECOND_NAMES[case]
    assert [line.split(": ")[1] for line in _second_names(text, "code/x.py")] == names


def test_a_step_module_is_scanned_too() -> None:
    """costmodel/steps.py was exempt as a whole file (as costmodel_steps.py): now only its functions."""
    assert _second_names(SECOND_NAMES["plain def"][0], "code/common/costmodel/steps.py") == [
        "code/common/costmodel/steps.py:1: ring_allreduce_time"]


# Other questions, which stay: each is a number or a different quantity, not the measure renamed
# (the first three are shapes the reviewer asked about: 03's handles, 06_comm_hooks' ring_price,
# 04_alpha_beta's comm_share).
NOT_SECOND_NAMES = {
    "the Algorithm itself": f"RING_ALLREDUCE = {ALG}\n",
    "a sum over calls": _def("ring_price(k, calls)", f"return sum({ALG}.busiest_bytes(k, n) for n in calls)"),
    "a share": _def("comm_share(k, n, link, c)", f"comm = {ALG}.time(k, n, link)",
                    "return comm / (comm + c)"),
    "a difference": _def("bandwidth_s(k, n, link)",
                         f"return {ALG}.time(k, n, link) - {ALG}.time(k, 0, link)"),
    "a number": f"NOTES_RING_S = {ALG}.time(8, 1e9, LINK)\n" + _def("notes_ring_s()",
                                                                     f"return {ALG}.time(8, 1e9, LINK)"),
    "a (calls, bytes) record": _def("dp_traffic(k, n, layers)",
                                    f"return layers, layers * {ALG}.busiest_bytes(k, n)"),
    "a property of another object": _def("row(b)", "return {'S': b.total_bytes}"),
    "the clock": _def("now()", "return time.time()"),
    "private": _def("_ring_time(k, n, link)", f"return {ALG}.time(k, n, link)"),
}


@pytest.mark.parametrize("case", NOT_SECOND_NAMES)
def test_the_scan_leaves_other_questions(case: str) -> None:
    assert _second_names(NOT_SECOND_NAMES[case], "code/x.py") == []
