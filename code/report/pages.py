"""The reproduction as pages: report/index.html (self-contained: figures embedded, no fetch, opens
from disk) and report/report.md (figures beside it in report/figures/), from what each script
wrote with --json and --save-figs. Both come from Jinja2 templates in templates/; this module
only gathers and orders what the scripts computed; it computes no number of its own except
counts."""

from __future__ import annotations

import base64
import os
import platform
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from common import errata, verdicts
from common.files import make_output_dir, write_bytes, write_text
from common.output import fmt_num

TEMPLATES = Path(__file__).resolve().parent / "templates"
# The order a reader wants: what needs attention first (every word of common/verdicts.VERDICTS).
ORDER = ("error in the notes", "notes inconsistent", "differs", "fails", "not recorded",
         "not compared: other machine", "not compared: other setting", "not compared: not measured",
         "fitted to the notes", "matches, assuming", "matches as they write", "matches, timed here",
         "seen as the notes say", "matches", "holds", "not compared: no figure")
DISAGREEING = ("error in the notes", "notes inconsistent", "differs", "fails", "not recorded")


def tone(word: str) -> str:
    """The colour class of a verdict word: agree, disagree, or neither (not compared, fitted)."""
    return "agree" if word in verdicts.AGREEING else "disagree" if word in DISAGREEING else "neither"


def _environment(autoescape: bool) -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined,
                      autoescape=select_autoescape(["html", "j2"]) if autoescape else False,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = _cell
    env.filters["md"] = _md_cell
    return env


def _cell(value: Any) -> str:
    """A table cell or a claim's value as the terminal shows it."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return fmt_num(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return fmt_num(value) if isinstance(value, int) else str(value)


def _md_cell(value: Any) -> str:
    return _cell(value).replace("|", "\\|").replace("\n", " ")


def _value(value: Any, unit: str) -> str:
    return "-" if value is None else f"{_cell(value)} {unit}".strip()


def anchor(*parts: str) -> str:
    """An id for the page: the script's name, and after it a part or claim, in letters, digits and -."""
    return "--".join("".join(ch if ch.isalnum() or ch == "_" else "-" for ch in p) for p in parts if p)


def _claim_view(claim: dict[str, Any], script: str, claim_id: str) -> dict[str, Any]:
    return dict(claim, script=script, ours_text=_value(claim["ours"], claim["unit"]),
                notes_text=_value(claim["notes"], claim["unit"]), id=claim_id,
                part_id=anchor(script, claim["part"]),
                short=[isinstance(v, (int, float)) or len(_value(v, claim["unit"])) <= 24
                       for v in (claim["ours"], claim["notes"])],
                verdict=errata.label(claim), tone=tone(errata.label(claim)))


# A printed line with a bar's characters, or framed in | … |, is a drawing (a bar, a timeline): it
# keeps its columns and scrolls in its own box on a narrow screen instead of wrapping.
DRAWING = re.compile(r"[█▏▎▍▌▋▊▉░▒▓│─]|\|[^|]{8,}\|\s*$")


def _prose(items: list[dict[str, str]]) -> list[dict[str, Any]]:
    """A part's prose as blocks: each note its paragraphs; consecutive printed lines one block
    ("lines", wrapped on the page, or "drawing", kept as printed)."""
    blocks: list[dict[str, Any]] = []
    for item in items:
        if item["kind"] == "note":
            blocks.append(dict(kind="note", paragraphs=item["text"].split("\n\n")))
            continue
        for line in item["text"].split("\n"):
            kind = "drawing" if DRAWING.search(line) else "lines"
            if blocks and blocks[-1]["kind"] == kind:
                blocks[-1]["text"] += "\n" + line
            else:
                blocks.append(dict(kind=kind, text=line))
    return blocks


def _caption(name: str, part_title: str, count: int) -> str:
    """A table's caption: its name in --json, in words; an unnamed one ("table2") says its part."""
    if name.startswith("table") and name[5:].isdigit():
        return f"{part_title or 'table'}" + (f" ({name[5:]} of {count})" if count > 1 else "")
    return name.replace("_", " ")


def _part_view(script: str, key: str, part: dict[str, Any], data: dict[str, Any], figures: dict[str, bytes],
               claims: list[dict[str, Any]]) -> dict[str, Any]:
    title = part.get("title", "")
    named = part.get("tables", {})
    tables = [dict(name=name, caption=_caption(name, title, len(named)), **table)
              for name, table in named.items()]
    captions = data.get("captions", {})
    shown = [dict(name=name, caption=captions.get(name) or name,
                  data=base64.b64encode(figures[name]).decode("ascii"))
             for name in part.get("figures", []) if name in figures]
    return dict(key=key, title=title, id=anchor(script, key), tables=tables, figures=shown, claims=claims,
                prose=_prose(data.get("prose", {}).get(key, [])),
                heading=f"{key}: {title}" if key != "intro" else "", )


def _script_view(run: dict[str, Any], data: dict[str, Any] | None, figures: dict[str, bytes],
                 doc: str) -> dict[str, Any]:
    """One script's section: its parts in order, each with prose, tables, figures and claims."""
    script, parts = run["script"], []
    if data is not None:
        claims_by_part: dict[str, list[dict[str, Any]]] = {}
        ids: Counter[str] = Counter()
        for i, claim in enumerate(data["claims"]):
            claim_id = anchor(script, claim.get("ref") or f"claim-{i + 1}")
            ids[claim_id] += 1
            claim_id += f"-{ids[claim_id]}" if ids[claim_id] > 1 else ""   # a row decided twice
            claims_by_part.setdefault(claim["part"], []).append(_claim_view(claim, script, claim_id))
        for key, part in data["parts"].items():
            parts.append(_part_view(script, key, part, data, figures, claims_by_part.get(key, [])))
    return dict(name=script, anchor=anchor(script), doc=doc, rc=run["rc"], wall_s=run["wall_s"],
                forked=run.get("forked", False),
                stdout=run["stdout"], stderr=run["stderr"], parts=parts,
                verdicts=sorted({c["verdict"] for p in parts for c in p["claims"]}))


def write_report(directory: Path, runs: list[dict[str, Any]], data: dict[str, dict[str, Any]],
                 figure_dir: Path, docs: dict[str, str], total_s: float, quick: bool,
                 timeline: str | None) -> list[Path]:
    """Write index.html and report.md (and figures/) into `directory`; return the pages written.
    `data`: each script's --json by script name; `docs`: the first line of each script's
    docstring (the notes' section it reproduces); `timeline`: the timeline page's file name."""
    make_output_dir(str(directory))
    figures = {p.name: p.read_bytes() for p in sorted(figure_dir.glob("*.png"))}
    if figures:
        make_output_dir(str(directory / "figures"))
        for name, blob in figures.items():
            write_bytes(str(directory / "figures" / name), blob)
    sections = [_script_view(r, data.get(r["script"]), figures, docs.get(r["script"], "")) for r in runs]
    claims = [c for s in sections for p in s["parts"] for c in p["claims"]]
    counts = Counter(c["verdict"] for c in claims)
    context = dict(
        title="Distributed training notes: the reproduction",
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{platform.node() or 'this machine'}, Python {platform.python_version()}, "
                f"{os.cpu_count()} cores",
        quick=quick, total_s=total_s, sections=sections, claims=claims,
        counts=[(w, counts[w], tone(w), verdicts.count_sentence([w] * counts[w])) for w in _ordered(counts)],
        count_sentence=verdicts.count_sentence([c["verdict"] for c in claims], ORDER),
        differs=[c for c in claims if c["status"] == "differs" and not c.get("erratum")],
        errata=[c for c in claims if c.get("erratum")],
        errata_groups=errata.group(claims), errata_sentence=errata.count_sentence(errata.group(claims)),
        readings=errata.readings(claims),
        failed=[r["script"] for r in runs if r["rc"] != 0],
        filters=_filters(counts, sum(1 for c in claims if c.get("erratum"))),
        meanings=[(w, verdicts.LEGEND[w], tone(w)) for w in _ordered(counts)],
        timeline=timeline)
    written = []
    for template, name, escape in (("index.html.j2", "index.html", True),
                                   ("report.md.j2", "report.md", False)):
        text = _environment(escape).get_template(template).render(**context)
        path = directory / name
        write_text(str(path), text)
        written.append(path)
    return written


def _ordered(counts: Counter[str]) -> list[str]:
    """The verdict words of a run, in ORDER."""
    return [w for w in ORDER if counts[w]] + sorted(w for w in counts if w not in ORDER)


def _filters(counts: Counter[str], erratum_rows: int) -> list[tuple[str, str, int]]:
    """The claim filters: (key, label, claims it shows): every claim, the notes' errata (both kinds),
    each verdict word."""
    notes = [("erratum", "every erratum", erratum_rows)] if erratum_rows else []
    each = [(s, s, counts[s]) for s in _ordered(counts)]
    return [("all", "every claim", sum(counts.values()))] + notes + each
