"""The judge's words: values in one line, expected and got cut where they differ, errors with the
student's line, and the hint that fits what went wrong."""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any

TEXT_WIDTH = 88     # expected / got / inputs are cut to this many characters
ELLIPSIS = "…"
# What a rank that waits for ever, or a collective nobody else calls, looks like in a message.
DEADLOCK_SIGNS = ("stopped responding", "a collective it did not call", "timed out", "Timed out", "timeout")


def show(value: Any, digits: int = 6) -> str:
    """A value in one line; floats to `digits` significant digits; a str is shown as it is."""
    if isinstance(value, str):
        return " ".join(value.split())

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.{digits}g}"
        if isinstance(v, (list, tuple)):
            inner = ", ".join(fmt(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {fmt(x)}" for k, x in v.items()) + "}"
        if hasattr(v, "shape") and hasattr(v, "dtype") and hasattr(v, "tolist"):
            return f"tensor {fmt(v.tolist())} ({str(v.dtype).removeprefix('torch.')})"
        return repr(v)
    return " ".join(fmt(value).split())


def cut(text: str, width: int = TEXT_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 1] + ELLIPSIS


def cut_pair(expected: str, got: str, width: int = TEXT_WIDTH) -> tuple[str, str]:
    """Both texts cut to `width` around their first difference, so the cut never hides it."""
    if len(expected) <= width and len(got) <= width:
        return expected, got
    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    room = width - 2                          # an ellipsis may stand at either end
    start = 0 if first < room * 2 // 3 else first - room // 3

    def window(text: str) -> str:
        piece = text[start:start + room]
        return (ELLIPSIS if start else "") + piece + (ELLIPSIS if start + room < len(text) else "")
    return window(expected), window(got)


def render_pair(expected: Any, got: Any) -> tuple[str, str]:
    """Expected and got as two lines that look different when the values are (more digits if needed)."""
    e, g = show(expected), show(got)
    if e == g and expected != got:
        e, g = show(expected, 17), show(got, 17)
    return cut_pair(e, g)


def kind(value: Any) -> str:
    """What came back, for wrong-type messages: 'None', 'a str: …', 'a list of 3 items: …'."""
    if value is None:
        return "None"
    name = getattr(value, "type_name", type(value).__name__)   # an Opaque says what it stood for
    if isinstance(value, (list, tuple)):
        return f"a {name} of {len(value)} item{'' if len(value) == 1 else 's'}: {cut(show(value), 60)}"
    return f"a {name}: {cut(repr(value) if isinstance(value, str) else show(value), 60)}"


def _student_frame(path: Path, err: BaseException | None, details: str) -> str:
    """' (solution.py:12 in f)': the student's innermost line in a traceback, or ''."""
    if err is not None:
        frames = [f for f in traceback.extract_tb(err.__traceback__)
                  if Path(f.filename).resolve() == path.resolve()]
        if frames:
            return f" ({path.name}:{frames[-1].lineno} in {frames[-1].name})"
    mine = [m for m in re.findall(r'File "([^"]*)", line (\d+), in (\S+)', details)
            if Path(m[0]).name == path.name]
    return f" ({path.name}:{mine[-1][1]} in {mine[-1][2]})" if mine else ""


def error_line(err: BaseException, path: Path) -> str:
    """'ValueError: bad (solution.py:12 in f)': the error and the student's line where it happened."""
    text = " ".join(str(err).split())
    where = _student_frame(path, err, "")
    return f"{type(err).__name__}: {text}{where}" if text else f"{type(err).__name__}{where}"


NOT_WRITTEN = "not written yet: "
ASKED_FOR_INPUT = "waits for input"     # in the one line of a solution that called breakpoint() or input()
HINT_INPUT = ("remove breakpoint(), input() and pdb before judging: the judge gives no input (to debug, "
              "call your function from a script of your own)")


def _own_raise(err: BaseException, path: Path, details: str) -> bool:
    """Whether the solution's file raised `err` itself (its innermost frame is the student's line):
    a NotImplementedError from torch (an operation it lacks) is an error, not a stub."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and not details:
        return Path(tb.tb_frame.f_code.co_filename).resolve() == path.resolve()
    files = re.findall(r'File "([^"]*)", line \d+', details)
    return bool(files) and Path(files[-1]).name == path.name


def describe_failure(err: BaseException, path: Path) -> str:
    """A case's exception (raised in the solution's process) as the one line the report shows."""
    if isinstance(err, NotImplementedError) and _own_raise(err, path, ""):
        return NOT_WRITTEN + (" ".join(str(err).split()) or "NotImplementedError")
    if type(err).__name__ == "AskedForInput":
        return f"the solution {ASKED_FOR_INPUT}: it {err}"
    if type(err).__name__ == "RankError":
        text, details = str(err), getattr(err, "details", "") or ""
        if "NotImplementedError:" in text and _own_raise(err, path, details):
            text = re.sub(r"\s*\(then rank[^)]*failed too\)", "", text.split("NotImplementedError:", 1)[1])
            return NOT_WRITTEN + text.strip()
        if "AskedForInput:" in text:
            rank, what = text.split(" failed:", 1)[0], text.split("AskedForInput:", 1)[1].strip()
            return f"the solution {ASKED_FOR_INPUT} on {rank}: it {re.sub(r' [(]then rank.*', '', what)}"
        said = getattr(err, "said", ())     # the failed rank's own last words (gloo's reason)
        words = f"; rank {err.rank} wrote: " + " / ".join(said) if said else ""
        return text + _student_frame(path, None, details) + words
    if isinstance(err, SystemExit):
        return f"the solution called sys.exit({err.code!r}): a function must return, not end the process"
    return f"the solution raised {error_line(err, path)}"


def choose_hint(message: str, case_hint: str, deadlock_hint: str, error_hints: list[tuple[str, str]]) -> str:
    """The hint for a failure: the deadlock one when ranks waited for ever, one keyed by the error's
    words when the problem has one, else the case's own."""
    if ASKED_FOR_INPUT in message:
        return HINT_INPUT
    if any(sign in message for sign in DEADLOCK_SIGNS):
        return deadlock_hint
    for words, hint in error_hints:
        if words in message:
            return hint
    return case_hint
