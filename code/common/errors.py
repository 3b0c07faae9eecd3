"""The two kinds of failure a command reports in one line (common.cli.run_main prints them):
bad input (`UsageError`: exit status 2, before any work) and a failure at run time whose message
is already that line (`RunFailure`: exit status 1, e.g. a rank that failed, a file that could not
be written). Here, below every other module of common/, so any of them can raise them."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: reported as one line on stderr, exit status 2."""


class RunFailure(RuntimeError):
    """A failure at run time, its message already the one line to print (exit status 1)."""
