"""The notes' tables as written: each TOML file read, and each row block that carries a parameter
list (`each`) expanded into its rows, in the table's order. The schema: docs/rows.md;
common/checker.py turns these rows into checked `Row`s and decides them.

    [[row]]                                   # one block: a row for each entry of `each`
    each = [{S = 4, M = 4, share = 20}, {S = 8, M = 8, share = 22.6}]
    id = "CS-bubble-S{S}-M{M}-share"          # {S}: the entry's S, written into every text field
    notes = "{share}"                         # a field that is one parameter alone takes its value as is
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (requirements.txt)
    import tomli as tomllib

CODE = Path(__file__).resolve().parents[1]
# Checks of our own, not statements of the notes: PyTorch's engines beside ours. Their rows'
# "notes" field is what we expect, and the printed tables say so ("expected", not "notes").
OWN_TABLES = ("lecture14/engines.toml", "lecture15/engines.toml", "cs336/engines.toml")
TABLES = ("lecture14/notes.toml", "lecture15/notes.toml", "lecture15/handbook.toml", "cs336/notes.toml",
          *OWN_TABLES)

# What a byte figure is (a row's `bytes`, required where its unit is one of BYTE_UNITS). Traffic is
# one of three things that differ on gloo, so a row saying which names it in its `what` as well.
BYTE_KINDS = {
    "size": "a size: of a tensor, of state held, of a cap; no traffic",
    "counted": "what the process group was handed, call by call (dtype × elements)",
    "on the wire here": "what gloo ran here (a reduce-scatter runs as an all-reduce of the whole input)",
    "ring model": "the cost model's price (the ring's bytes for the collective named)",
}
TRAFFIC_WORDS = ("counted", "on the wire here", "ring model")
BYTE_UNITS = ("B", "KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "TiB")


PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")   # {S} in a template; {S:.2f} is no parameter


@lru_cache(maxsize=None)
def read_table(relpath: str) -> dict[str, Any]:
    """One table (code/<relpath>) as TOML gives it: blocks not yet expanded."""
    with open(CODE / relpath, "rb") as fh:
        return tomllib.load(fh)


def table_rows(relpath: str) -> list[dict[str, Any]]:
    """The rows of one table as written, every block expanded in place."""
    return [row for block in read_table(relpath).get("row", []) for row in expand(block, relpath)]


def parameter_list(relpath: str, block_id: str) -> list[dict[str, Any]]:
    """The `each` of the block whose id is written `block_id` ("CS-coll-shape-{name}"): a script that
    records a value named from a parameter takes it from here, so the name is the row's, built the
    same way, never a copy of the parameter worked out again."""
    blocks = [block for block in read_table(relpath).get("row", []) if block.get("id") == block_id]
    if len(blocks) != 1 or "each" not in blocks[0]:
        raise KeyError(f"{relpath}: no one row block {block_id!r} with a parameter list")
    return list(blocks[0]["each"])


def expand(block: dict[str, Any], relpath: str = "") -> list[dict[str, Any]]:
    """A `[[row]]` as its rows: itself when it has no `each`; else, for each entry of `each` in order,
    each of its templates (`[[row.template]]`, or the block itself when it has none) with the block's
    other fields beneath the template's, and every `{P}` of a parameter P of the entry filled in."""
    if "each" not in block:
        if "template" in block:
            raise ValueError(f"{relpath}: row block {block.get('id')}: templates without `each`")
        return [block]
    shared = {key: value for key, value in block.items() if key not in ("each", "template")}
    templates = [dict(shared, **template) for template in block.get("template", [])] or [shared]
    rows = []
    for entry in block["each"]:
        for template in templates:
            row = {key: fill(value, entry) for key, value in template.items()}
            if PARAMETER.search(str(row.get("id", ""))):
                raise ValueError(f"{relpath}: row {row.get('id')}: a parameter of its id is in no entry")
            rows.append(row)
    return rows


def fill(value: Any, parameters: dict[str, Any]) -> Any:
    """A template's field with the entry's parameters: "{P}" alone is P's value as is (a number stays a
    number); in longer text each {P} is written as text (`written`); other fields as they are."""
    if not isinstance(value, str):
        return value
    alone = PARAMETER.fullmatch(value)
    if alone and alone[1] in parameters:
        return parameters[alone[1]]
    return PARAMETER.sub(lambda m: written(parameters[m[1]]) if m[1] in parameters else m[0], value)


def written(parameter: Any) -> str:
    """A parameter as text: a float as :g writes it (3.0 as "3", 22.6 as "22.6"), anything else as str."""
    return f"{parameter:g}" if isinstance(parameter, float) else str(parameter)


def check_bytes(unit: str, kind: str, what: str, unchecked: str, where: str) -> None:
    """A byte figure (a row's `unit` one of BYTE_UNITS) says what it is (`bytes`, one of BYTE_KINDS);
    traffic says it in the words printed beside it (its `what`)."""
    if kind and kind not in BYTE_KINDS:
        raise ValueError(f"{where}: bytes {kind!r} is none of {', '.join(BYTE_KINDS)}")
    if unit in BYTE_UNITS and not unchecked and not kind:
        raise ValueError(f"{where}: a figure in {unit} says what it is: bytes = one of "
                         f"{', '.join(BYTE_KINDS)}")
    if kind in TRAFFIC_WORDS and kind not in what:
        raise ValueError(f"{where}: traffic that is {kind!r} says so in its `what`")
