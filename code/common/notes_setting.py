"""The notes' setting: the flag values a script's defaults reproduce, and how a run left them.

A claim compares a run with the notes only where the run is at the notes' setting; `off_setting`
is that one test ("--alpha-us 5 (notes' setting: 10)" when it is not). The parser of
`common.cli` records each flag's default as it parses (`setting_defaults`), so a script needs
nothing more than its flags' defaults.
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable

__all__ = ["NOT_A_SETTING", "off_setting", "setting_defaults"]

# Flags that change how a run is shown or bounded, not what it computes. --quick shortens runs:
# a claim names "quick" in its setting when --quick changes what it compares.
NOT_A_SETTING = frozenset({"json", "save_figs", "timeout_s", "quick", "trace"})


def off_setting(args: argparse.Namespace, setting: Any = None) -> list[str]:
    """How this run left the notes' setting (the script's defaults), in the flags `setting` names
    (dests, plus "quick" for --quick; None: every flag but NOT_A_SETTING), as readable items such
    as "--alpha-us 5 (notes' setting: 10)". Empty: at the notes' setting. The one test of "may we
    compare with the notes?", for claims (common.output.Report) and for text that names the notes' values."""
    defaults = getattr(args, "_notes_setting", None)
    if defaults is None:
        return []  # not parsed by make_parser's parser (a test's Namespace): nothing to compare with
    names = [d for d in defaults if d not in NOT_A_SETTING] if setting is None else list(setting)
    off = []
    for name in names:
        if name == "quick":
            if getattr(args, "quick", False):
                off.append("--quick (a shortened run)")
            continue
        if name not in defaults:
            raise KeyError(f"{name!r} is not a flag of this script")
        flag, default = defaults[name]
        value = getattr(args, name)
        if value != default:
            off.append(f"{flag} {_shown(name, value)} (notes' setting: {_shown(name, default)})")
    return off


def _shown(dest: str, value: Any) -> str:
    if dest.endswith("_bytes") and isinstance(value, (int, float)):
        return f"{value / 2**20:g} MiB"
    return f"{value:g}" if isinstance(value, float) else str(value)




def setting_defaults(actions: Iterable[argparse.Action],
                     also: frozenset[str] = frozenset()) -> dict[str, tuple[str, Any]]:
    """dest -> (flag, default value as the flag's type gives it) of a parser's `actions`: the
    notes' setting (and the flags named in `also`, though no setting)."""
    found = {}
    for action in actions:
        if not action.option_strings or action.dest in (NOT_A_SETTING - also) | {"help"}:
            continue
        default = action.default
        if isinstance(default, str) and callable(action.type):
            default = action.type(default)
        found[action.dest] = (action.option_strings[0], default)
    return found
