"""The two kinds of failure a command reports in one line (common.script_end.run_main prints them):
bad input (`UsageError`: exit status 2, before any work) and a failure at run time whose message
is already that line (`RunFailure`: exit status 1, e.g. a rank that failed, a file that could not
be written). Here, below every other module of common/, so any of them can raise them."""

from __future__ import annotations

import re

MAX_LINE = 400    # an error line, whatever it quotes
SHOWN_CHARS = 60  # of a value quoted in an error: a 100 KB argument is not echoed back whole


class UsageError(ValueError):
    """Bad input from the user: reported as one line on stderr, exit status 2."""


class RunFailure(RuntimeError):
    """A failure at run time, its message already the one line to print (exit status 1)."""


def clip_values(message: str) -> str:
    """`message` with every quoted value, and every unbroken run of text, longer than SHOWN_CHARS
    cut to its first SHOWN_CHARS characters, "…" and its length: 'aaaa…' (100,000 characters)."""
    def cut(text: str) -> str:
        return f"{text[:SHOWN_CHARS]}…"

    message = message.replace("\r", "\\r").replace("\n", "\\n")   # one line, whatever a value held

    for quote in "'\"":
        # a quote that opens a value follows no letter (a possessive's does: "the rank's")
        message = re.sub(f"(?<!\\w){quote}([^{quote}]{{{SHOWN_CHARS + 1},}}){quote}(?!\\w)",
                         lambda m, q=quote: f"{q}{cut(m.group(1))}{q} ({len(m.group(1)):,} characters)",
                         message)
    message = re.sub(f"(?<!\\S)([^\\s'\"]{{{SHOWN_CHARS + 21},}})",
                     lambda m: f"{cut(m.group(1))} ({len(m.group(1)):,} characters)", message)
    # what no rule above cut (a value with quotes and spaces in it): the line itself, cut
    return message if len(message) <= MAX_LINE else f"{message[:MAX_LINE]}… ({len(message):,} characters)"
