"""The reproduction as pages: report/index.html (self-contained: figures embedded, no fetch, opens
from disk) and report/report.md (figures beside it in report/figures/), from what each script
wrote with --json and --save-figs. Both come from Jinja2 templates in templates/; this module
only gathers and orders what the scripts computed; it computes no number of its own except
counts."""

from __future__ import annotations

import ast
import base64
import io
import os
import platform
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from common import verdicts
from common.output_files import make_output_dir, write_bytes, write_text
from common.units import fmt_num
from reproduction import errata

TEMPLATES = Path(__file__).resolve().parent / "templates"
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


# A rule whose decision only restates the two values the row already shows ("exact: 161 = 161",
# "equal: True is True", "rounds to 0 decimal places: 57 rounds to 57 …; the notes print 19"): the
# row says the rule, not the decision. A decision that adds a fact (an interval, a reason) stays.
RESTATING = re.compile(r"^(equal|exact|rounds to|between|below|above)\b")


def _how(claim: dict[str, Any]) -> str:
    """How a row was decided, each fact once: the rule, and the decision where it says more."""
    rule, decision = claim.get("rule") or "", claim.get("decision") or ""
    if rule == "not compared":
        return decision
    if rule in ("equal", "exact"):
        return ""          # the verdict word and the one value say it
    if RESTATING.match(rule) or not decision:
        return rule
    return f"{rule}: {decision}"


def _claim_view(claim: dict[str, Any], script: str, claim_id: str, topic: str = "") -> dict[str, Any]:
    ours, notes = _value(claim["ours"], claim["unit"]), _value(claim["notes"], claim["unit"])
    return dict(claim, script=script, ours_text=ours, notes_text=notes, id=claim_id,
                part_id=anchor(script, claim["part"]), topic=topic or script,
                short=[isinstance(v, (int, float)) or len(_value(v, claim["unit"])) <= 24
                       for v in (claim["ours"], claim["notes"])],
                same=ours == notes, how=_how(claim),
                agree=errata.label(claim) in verdicts.AGREEING, why=verdicts.readable(claim.get("why") or ""),
                verdict=errata.label(claim), tone=tone(errata.label(claim)))


# The notes' structure: lecture 14, lecture 15, the handbook's chapter, CS336 lecture 8 (the seeds'
# README), each script under the section its docstring's first line names.
GROUPS = {"L14": "Lecture 14 · Distributed Training I",
          "L15": "Lecture 15 · Distributed Training II (PyTorch DDP)",
          "Handbook": "Handbook · 数据并行与 DDP", "CS336": "CS336 lecture 8 · parallelism"}
CODE = TEMPLATES.parents[1]


def _topic(name: str, doc: str) -> dict[str, Any]:
    """Where a script sits in the notes: its group, section (§2), a label ("L15 §2 · buckets") and the
    key that orders the report as the notes are ordered."""
    folder, _, file = name.partition("/")
    stem = file.removesuffix(".py")
    number = re.match(r"(\d+)_", stem)
    words = stem[number.end():] if number else stem
    group = ("Handbook" if doc.startswith("Handbook") else
             {"lecture14": "L14", "lecture15": "L15", "cs336": "CS336"}.get(folder, folder))
    found = re.search(r"§(\d+(?:\.\d+)?)", doc) if group in ("L14", "L15") else None
    section = f"§{found.group(1)}" if found else ""
    rank = list(GROUPS).index(group) if group in GROUPS else len(GROUPS)
    key = (rank, float(found.group(1)) if found else 99.0, int(number.group(1)) if number else 99, stem)
    return dict(group=group, group_title=GROUPS.get(group, group), section=section, order=key,
                label=" ".join(filter(None, (group, section))) + " · " + words.replace("_", " "))


def _whole_doc(name: str, doc: str) -> str:
    """The docstring's first paragraph: `docs` holds its first line, which may stop mid-sentence."""
    if not doc or doc.rstrip().endswith("."):
        return doc
    try:
        text = ast.get_docstring(ast.parse((CODE / name).read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return doc
    first = " ".join(text.split("\n\n")[0].split())
    return first if first.startswith(" ".join(doc.split())) else doc


def _compressed(blob: bytes) -> bytes:
    """A figure for the page: a palette PNG (256 colours, optimised), a third of matplotlib's size
    with the same pixels to the eye; the original where that fails or is not smaller."""
    try:
        from PIL import Image
    except ImportError:
        return blob
    try:
        image = Image.open(io.BytesIO(blob))
        image.load()
        if image.mode in ("RGBA", "LA", "P"):
            image = image.convert("RGBA")
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            image = Image.alpha_composite(white, image)
        palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                                 dither=Image.Dither.NONE)
        out = io.BytesIO()
        palette.save(out, "PNG", optimize=True)
    except (OSError, ValueError):
        return blob
    return out.getvalue() if len(out.getvalue()) < len(blob) else blob


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
    """A part: its prose, tables and figures, the rows that need a reader (`shown`) and the ones that
    agree with the notes (`agreeing`, folded on the page under `agree_label`)."""
    title = part.get("title", "")
    named = part.get("tables", {})
    tables = [dict(name=name, caption=_caption(name, title, len(named)), **table)
              for name, table in named.items()]
    captions = data.get("captions", {})
    shown = [dict(name=name, caption=captions.get(name) or name,
                  data=base64.b64encode(figures[name]).decode("ascii"))
             for name in part.get("figures", []) if name in figures]
    agreeing = [c for c in claims if c["agree"]]
    sections = list(dict.fromkeys(c["section"] for c in claims if c.get("section", "").startswith("§")))
    prose = _prose(data.get("prose", {}).get(key, []))
    return dict(key=key, title=title, id=anchor(script, key), tables=tables, figures=shown, claims=claims,
                prose=[b for b in prose if b["kind"] == "note"],
                printed=[b for b in prose if b["kind"] != "note"],
                shown=[c for c in claims if not c["agree"]], agreeing=agreeing,
                agree_label=_agree_label(agreeing),
                sections=sections, number=key.removeprefix("Part ") if key.startswith("Part ") else key,
                heading=f"{key}: {title}" if key != "intro" else "", )


def _agree_label(agreeing: list[dict[str, Any]]) -> str:
    """"31 statements match", or with several verdict words "31 statements agree" (each row says its own)."""
    n, words = len(agreeing), Counter(c["verdict"] for c in agreeing)
    noun = "statement" if n == 1 else "statements"
    if len(words) == 1:
        word = verdicts.BY_WORD.get(next(iter(words)))
        return f"{n} {noun} {(word.one if n == 1 else word.many) if word else next(iter(words))}"
    return f"{n} {noun} agree"


def _script_view(run: dict[str, Any], data: dict[str, Any] | None, figures: dict[str, bytes],
                 doc: str) -> dict[str, Any]:
    """One script's section: its parts in order, each with prose, tables, figures and claims."""
    script, parts = run["script"], []
    topic = _topic(script, doc)
    if data is not None:
        claims_by_part: dict[str, list[dict[str, Any]]] = {}
        ids: Counter[str] = Counter()
        for i, claim in enumerate(data["claims"]):
            claim_id = anchor(script, claim.get("ref") or f"claim-{i + 1}")
            ids[claim_id] += 1
            claim_id += f"-{ids[claim_id]}" if ids[claim_id] > 1 else ""   # a row decided twice
            claims_by_part.setdefault(claim["part"], []).append(
                _claim_view(claim, script, claim_id, topic["label"]))
        for key, part in data["parts"].items():
            parts.append(_part_view(script, key, part, data, figures, claims_by_part.get(key, [])))
    intro = next((p["title"] for p in parts if p["key"] == "intro" and p["title"]), "")
    return dict(topic, name=script, anchor=anchor(script), doc=_whole_doc(script, doc), title=intro,
                rc=run["rc"], wall_s=run["wall_s"],
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
    embedded = {name: _compressed(blob) for name, blob in figures.items()}
    sections = sorted((_script_view(r, data.get(r["script"]), embedded, docs.get(r["script"], ""))
                       for r in runs), key=lambda s: s["order"])
    groups: list[dict[str, Any]] = []
    for s in sections:
        if not groups or groups[-1]["key"] != s["group"]:
            groups.append(dict(key=s["group"], title=s["group_title"], sections=[]))
        groups[-1]["sections"].append(s)
    claims = [c for s in sections for p in s["parts"] for c in p["claims"]]
    counts = Counter(c["verdict"] for c in claims)
    context = dict(
        title="Distributed training notes: the reproduction",
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{platform.node() or 'this machine'}, Python {platform.python_version()}, "
                f"{os.cpu_count()} cores",
        quick=quick, total_s=total_s, sections=sections, groups=groups, claims=claims,
        agreeing=sum(1 for c in claims if c["agree"]),
        measured=[c for c in claims if c["verdict"] in TIMED],
        uncompared=[(w, counts[w], verdicts.count_sentence([w] * counts[w])) for w in _ordered(counts)
                    if w.startswith("not compared") and w != "not compared: other machine"],
        **_tally(counts),
        claims_sentence=verdicts.claims_sentence([c["verdict"] for c in claims]),
        errata_kinds=errata.count_sentence(errata.group(claims), rows_too=False),
        differs=[c for c in claims if c["status"] == "differs" and not c.get("erratum")],
        errata=[c for c in claims if c.get("erratum")],
        errata_groups=errata.group(claims), errata_sentence=errata.count_sentence(errata.group(claims)),
        readings=errata.readings(claims),
        failed=[r["script"] for r in runs if r["rc"] != 0],
        filters=_filters(counts, sum(1 for c in claims if c.get("erratum")),
                         sum(1 for c in claims if not c["agree"])),
        meanings=[(w, verdicts.LEGEND[w], tone(w)) for w in _ordered(counts)], tone=tone,
        timeline=timeline)
    written = []
    for template, name, escape in (("index.html.j2", "index.html", True),
                                   ("report.md.j2", "report.md", False)):
        text = _environment(escape).get_template(template).render(**context)
        path = directory / name
        write_text(str(path), text)
        written.append(path)
    return written


TIMED = ("matches, timed here", "not compared: other machine")


def _tally(counts: Counter[str]) -> dict[str, list[tuple[str, int, str]]]:
    """The findings' counts, each (word, count, as shown), each word once on the page: the errata's
    words, the other words that disagree, the agreeing words (but the timed one), what was timed here
    against the notes' machine, and what was not compared ("not compared: other setting" shown as
    "other setting" after its line's "Not compared:")."""
    words = _ordered(counts)

    def said(w: str) -> str:
        return verdicts.count_label(w, counts[w])
    return dict(
        wrong=[(w, counts[w], said(w)) for w in words if w in ("error in the notes", "notes inconsistent")],
        other_wrong=[(w, counts[w], said(w)) for w in words if w in DISAGREEING
                     and w not in ("error in the notes", "notes inconsistent")],
        agree_words=[(w, counts[w], said(w)) for w in words if w in verdicts.AGREEING and w not in TIMED],
        measured_counts=[(w, counts[w], w) for w in words if w in TIMED],
        uncompared_counts=[(w, counts[w], w.removeprefix("not compared: ")) for w in words
                           if w not in DISAGREEING and w not in verdicts.AGREEING and w not in TIMED])


def _ordered(counts: Counter[str]) -> list[str]:
    """The verdict words of a run, in verdicts.FINDINGS_ORDER (what needs attention first)."""
    order = verdicts.FINDINGS_ORDER
    return [w for w in order if counts[w]] + sorted(w for w in counts if w not in order)


def _filters(counts: Counter[str], erratum_rows: int, unfolded: int) -> list[tuple[str, str, int]]:
    """The claim filters: (key, label, claims it shows): the page as it opens (the agreeing rows
    folded), every claim, the notes' errata (both kinds), each verdict word."""
    notes = [("erratum", "every erratum", erratum_rows)] if erratum_rows else []
    each = [(s, s, counts[s]) for s in _ordered(counts)]
    return ([("folded", "all but the agreeing", unfolded), ("all", "every claim", sum(counts.values()))]
            + notes + each)
