"""The reproduction as pages: report/index.html (self-contained: figures embedded, no fetch, opens
from disk) and report/report.md (figures beside it in report/figures/), from what each script
wrote with --json and --save-figs. Both come from Jinja2 templates in templates/; this module
only gathers and orders what the scripts computed; it computes no number of its own except
counts."""

from __future__ import annotations

import base64
import os
import platform
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from common.files import make_output_dir, write_bytes, write_text
from common.output import fmt_num

TEMPLATES = Path(__file__).resolve().parent / "templates"
# The order a reader wants: what needs attention first.
STATUS_ORDER = ("differs", "other machine", "other setting", "not measured", "agrees", "ours only")
FILTERS = (("all", "every claim"), ("differs", "differs"), ("erratum", "errors in the notes"),
           ("other machine", "other machine"))


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


def _claim_view(claim: dict[str, Any], script: str) -> dict[str, Any]:
    return dict(claim, script=script, ours_text=_value(claim["ours"], claim["unit"]),
                notes_text=_value(claim["notes"], claim["unit"]),
                label="differs: an error in the notes" if claim.get("erratum") else claim["status"])


def _script_view(run: dict[str, Any], data: dict[str, Any] | None, figures: dict[str, bytes],
                 doc: str) -> dict[str, Any]:
    """One script's section: its parts in order, each with tables, figures and claims."""
    parts = []
    if data is not None:
        claims_by_part: dict[str, list[dict[str, Any]]] = {}
        for claim in data["claims"]:
            claims_by_part.setdefault(claim["part"], []).append(_claim_view(claim, run["script"]))
        for key, part in data["parts"].items():
            tables = [dict(name=name, **table) for name, table in part.get("tables", {}).items()]
            shown = [dict(name=name, data=base64.b64encode(figures[name]).decode("ascii"))
                     for name in part.get("figures", []) if name in figures]
            parts.append(dict(key=key, title=part.get("title", ""), tables=tables, figures=shown,
                              claims=claims_by_part.get(key, [])))
    return dict(name=run["script"], anchor=run["script"].replace("/", "-").replace(".", "-"), doc=doc,
                rc=run["rc"], wall_s=run["wall_s"], stdout=run["stdout"], stderr=run["stderr"], parts=parts)


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
    counts = Counter(c["status"] for c in claims)
    context = dict(
        title="Distributed training notes: the reproduction",
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{platform.node() or 'this machine'}, Python {platform.python_version()}, "
                f"{os.cpu_count()} cores",
        quick=quick, total_s=total_s, sections=sections, claims=claims,
        counts=[(s, counts[s]) for s in STATUS_ORDER if counts[s]] + sorted(
            (s, n) for s, n in counts.items() if s not in STATUS_ORDER),
        differs=[c for c in claims if c["status"] == "differs"],
        errata=[c for c in claims if c.get("erratum")],
        failed=[r["script"] for r in runs if r["rc"] != 0],
        filters=FILTERS, timeline=timeline)
    written = []
    for template, name, escape in (("index.html.j2", "index.html", True), ("report.md.j2", "report.md", False)):
        text = _environment(escape).get_template(template).render(**context)
        path = directory / name
        write_text(str(path), text)
        written.append(path)
    return written


ERRATA_INTRO = """Slips the suite finds in the notes: each row is a claim marked as an error in the notes,
with what the notes print, what the stated model gives, and why. `python code/reproduce.py
--errata` prints this section from a fresh run; a test keeps it in step with the claims."""


def errata_markdown(claims: list[dict[str, Any]]) -> str:
    """The README's errata section, from a reproduction's claims (each with its "script")."""
    rows = [f"| `{c['script']}` | {_md_cell(c['what'])} | {_md_cell(_value(c['notes'], c['unit']))} | "
            f"{_md_cell(_value(c['ours'], c['unit']))} | {_md_cell(' '.join(c['why'].split()))} |"
            for c in claims if c.get("erratum")]
    return "\n".join(["## Errors in the notes", "", ERRATA_INTRO, "",
                      "| script | what | the notes print | the model gives | why |",
                      "| --- | --- | --- | --- | --- |", *rows]) + "\n"
