"""common/row_tables.py: the notes' tables as written, their parameter lists expanded (docs/rows.md),
and every checked row found by grep: the value it names is written, as the row writes it, in the
script that records it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common import checker, row_tables

CODE = Path(__file__).resolve().parents[2] / "code"


def _sources(script: str) -> str:
    """The row's script and the modules of its own folder it imports (`from cs336.engine_probes
    import …`, `from lecture14 import async_sgd`): where a value may be recorded."""
    folder, _ = script.split("/")
    text = (CODE / script).read_text(encoding="utf-8")
    siblings = set(re.findall(rf"^from {folder}\.(\w+) import", text, re.M))
    for names in re.findall(rf"^from {folder} import (.+)$", text, re.M):   # from lecture14 import a, b as c
        siblings |= {name.split(" as ")[0].strip() for name in names.split(",")}
    modules = [(CODE / folder / f"{name}.py").read_text(encoding="utf-8") for name in siblings]
    return "\n".join([text, *modules])


def _written(name: str, source: str) -> bool:
    """`name` written in `source` as a string ("eta_S{S}_M{M}" inside f"…" counts) or a keyword
    (a helper's keyword, name=…)."""
    return re.search(rf"""(["']){re.escape(name)}\1|\b{re.escape(name)}\s*=""", source) is not None


def test_every_checked_row_names_a_value_its_script_writes() -> None:
    """grep VALUE finds both the row and the line that records it: a row's `value` and `same_as`, as
    the table writes them (in a block with a parameter list, the template: "eta_S{S}_M{M}", which the
    script records as f"eta_S{S}_M{M}"), appear literally in its script or a module of the script's
    folder that it imports. No name is built any other way (no `**{…}`, no f"{name}_bytes")."""
    missing = []
    for table in row_tables.TABLES:
        for block in row_tables.read_table(table).get("row", []):
            for row in [dict(block, **t) for t in block.get("template", [])] or [block]:
                if row.get("unchecked"):
                    continue
                source = _sources(row["script"])
                for name in (row["value"], row.get("same_as", "")):
                    if name and not _written(name, source):
                        missing.append(f"{table}: {row['id']}: {name} not in {row['script']}")
    assert not missing, f"{len(missing)} rows name a value their script never writes:\n" + "\n".join(missing)


def test_a_parameter_list_gives_one_row_per_entry_and_template_each_loaded_once() -> None:
    """Each block with a parameter list gives, per entry of `each`, one row per template, with every
    parameter of the entry filled in its id and value, and the checker loads exactly those rows:
    an id is never made twice, and none is dropped. (This replaced a snapshot of the rows as they
    were written by hand before the lists, which had checked the move and then only froze the text.)"""
    loaded = [r.id for r in checker.all_rows()]
    assert len(loaded) == len(set(loaded))
    made = 0
    for table in row_tables.TABLES:
        for block in row_tables.read_table(table)["row"]:
            if "each" not in block:
                continue
            rows = row_tables.expand(block, table)
            assert len(rows) == len(block["each"]) * max(1, len(block.get("template", []))), block["id"]
            for row, entry in zip(rows[::max(1, len(block.get("template", [])))], block["each"]):
                for name in entry:
                    assert "{" + name not in row["id"] + str(row.get("value", "")), (row["id"], name)
            assert set(r["id"] for r in rows) <= set(loaded), block["id"]
            made += len(rows)
    assert made > 50            # the lists are there: a scan that saw none would pass with nothing


def test_a_template_fills_its_parameters_and_leaves_the_recorded_values_names() -> None:
    block = {"each": [{"S": 4, "share": 3.0}, {"S": 8, "share": 22.6}], "id": "X-S{S}", "notes": "{share}",
             "statement": "S = {S}: {share} %", "why": "ours {bubble_S{S}:.1f} ({S})"}
    rows = row_tables.expand(block)
    assert [(r["id"], r["notes"], r["statement"]) for r in rows] == [("X-S4", 3.0, "S = 4: 3 %"),
                                                                     ("X-S8", 22.6, "S = 8: 22.6 %")]
    assert rows[0]["why"] == "ours {bubble_S4:.1f} (4)"


def test_a_template_parameter_no_entry_gives_is_refused() -> None:
    with pytest.raises(ValueError, match="in no entry"):
        row_tables.expand({"each": [{"S": 4}], "id": "X-S{S}-M{M}"}, "t.toml")


def test_a_script_reads_a_blocks_parameters_by_the_id_it_writes() -> None:
    """parameter_list: the entries of the one block whose id is written so; the rows it expands to
    record values under names built from these same entries (01's shape_{key})."""
    entries = row_tables.parameter_list("cs336/notes.toml", "CS-coll-shape-{name}")
    block = {"each": entries, "id": "CS-coll-shape-{name}", "value": "shape_{key}"}
    rows = {row["id"]: row["value"] for row in row_tables.expand(block)}
    assert rows["CS-coll-shape-all-gather"] == "shape_all_gather" and len(rows) == 7
    checked = {row.id: row.value for row in checker.rows_for("cs336/01_collectives.py")}
    assert {ref: checked[ref] for ref in rows} == rows
    for missing in ("CS-coll-shape-all-gather", "CS-coll-volume-broadcast", "CS-no-such-{name}"):
        with pytest.raises(KeyError, match="parameter list"):   # a row, a block without `each`, none
            row_tables.parameter_list("cs336/notes.toml", missing)
