"""The parser every script uses, and the one way a script reports bad input.

A script picks the shared flags it needs (common.flags.FLAGS: one name, one unit and one validity
rule each) and gives their defaults:

    parser = make_parser(__doc__, world_size=4, bucket_cap_mb=25.0, real=True, figs=True)

Sizes take units: "64MB" (MB = 1e6 B), "256KiB" (KiB = 1024 B), "1e6" (bytes). Bad input ends
the script with one line on stderr and exit status 2 before any work starts, never a traceback;
so do a backend this machine lacks, a world size it cannot hold, and an output path that cannot
be written. Pure Python: no torch unless a GPU backend has to be checked.

The rest of a script's frame lives by what it does: how it ends (`run_main`) in common.script_end, the
notes' setting a run is compared at (`off_setting`) in common.notes_setting, machine limits in
common.launch.machine, output paths in common.output_paths, torchrun in common.launch.torchrun.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from common.costmodel.link import NOTES_LINK, Link
from common.error_types import UsageError, clip_values
from common.flags import (
    DEFAULT_TIMEOUT_S,
    FLAGS,
    TIMEOUT_RANGE_S,
    bucket_cap,
    metavar_for,
    ranged,
    size_bytes,
)
from common.launch import (
    check_backend,
    check_course_environment,
    check_environment,
    check_world_size,
    quiet_unless_rank0,
    under_torchrun,
)
from common.model_bounds import Bound, Flags, check_bounds, check_split, check_world
from common.notes_setting import setting_defaults
from common.output_paths import check_output_dir, check_output_file, divert_stdout
from common.run_cost import Cost, check_cost

# ---- the parser -------------------------------------------------------------------------------

class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The whole docstring as description, and every default shown (with --quick's, if it has one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "(default" in text or default is False or default == argparse.SUPPRESS \
                or not action.option_strings or action.nargs == 0:
            return text
        if default is None or default == "":    # an output not written, a filter that keeps everything
            return f"{text} (default: {_NONE_MEANS.get(action.dest, 'none')})"
        shown = _shown_default(action.dest, default)
        quick = getattr(action, "quick_shown", None)
        return f"{text} (default: {shown}{f'; --quick: {quick}' if quick else ''})"


# What a flag left out means, where it has no value (None, ""): the outputs are not written
_NONE_MEANS = {"json": "not written", "save_figs": "not written", "trace": "not written", "only": "all",
               "report": "not written"}
def _shown_default(dest: str, default: Any) -> str:
    if dest.endswith("_bytes") and isinstance(default, int):
        return f"{default / 2**20:g} MiB" if "bucket" in dest else f"{default:,} B"
    return f"{default:g}" if isinstance(default, float) else str(default)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) rather than usage + error, and the
    checks that need the whole command line (machine limits, output paths) run before any work."""

    real = False  # set by make_parser: this script starts processes
    cost: Cost | None = None  # set by make_parser: what a run costs here (common.run_cost)
    quick: dict[str, Any] = {}  # set by make_parser: dest -> its default under --quick
    bounds: dict[str, Bound] = {}  # set by make_parser: dest -> how far a model's flag goes

    def add_argument(self, *names: Any, **kw: Any) -> argparse.Action:  # type: ignore[override]
        """argparse's, with a metavar that says the unit where the script gives none (metavar_for)."""
        takes_value = kw.get("action") in (None, "store") and names and str(names[0]).startswith("--")
        if takes_value and "metavar" not in kw:
            unit = metavar_for(str(names[0]), kw.get("type"))
            if unit:
                kw["metavar"] = unit
        return super().add_argument(*names, **kw)

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {clip_values(message)}\n")
        sys.exit(2)

    def format_help(self) -> str:
        defaults = argparse.Namespace(**{a.dest: a.default for a in self._actions})
        for action in self._quick_actions():  # a callable's value shown as it is with the other defaults
            value = self.quick[action.dest]
            value = value(defaults) if callable(value) else value
            action.quick_shown = value if isinstance(value, str) \
                else _shown_default(action.dest, self._typed(action, value))
        return super().format_help()

    def parse_args(self, args: Any = None,  # type: ignore[override]
                   namespace: Any = None) -> argparse.Namespace:
        # A flag --quick scales starts unset: what is still unset after parsing was not given, and
        # only those take --quick's value. An explicit flag always wins (--steps 7 --quick runs 7).
        namespace = namespace or argparse.Namespace()
        for action in self._quick_actions():
            setattr(namespace, action.dest, _NOT_GIVEN)
        parsed = super().parse_args(args, namespace)
        self._fill_defaults(parsed)
        quiet_unless_rank0()  # from the first line a script prints (its title, before any launch)
        try:
            self._check(parsed)
        except UsageError as err:
            self.error(str(err))
        parsed._notes_setting = self._setting_defaults()
        return parsed

    def _quick_actions(self) -> list[argparse.Action]:
        unknown = set(self.quick) - {a.dest for a in self._actions}
        if unknown:
            raise KeyError(f"quick= names no flag of this parser: {', '.join(sorted(unknown))}")
        return [a for a in self._actions if a.dest in self.quick]

    def _fill_defaults(self, parsed: argparse.Namespace) -> None:
        """Flags not given: --quick's value under --quick (callables last: they may read the
        others), else the default."""
        unset = [a for a in self._quick_actions() if getattr(parsed, a.dest) is _NOT_GIVEN]
        for action in sorted(unset, key=lambda a: callable(self.quick[a.dest])):
            if parsed.quick:
                value = self.quick[action.dest]
                value = self._typed(action, value(parsed) if callable(value) else value)
            else:  # as argparse gives a default: a string through the flag's type
                value = action.default
                value = action.type(value) if isinstance(value, str) and callable(action.type) else value
            setattr(parsed, action.dest, value)

    @staticmethod
    def _typed(action: argparse.Action, value: Any) -> Any:
        """A --quick value as make_parser takes a default: "4MiB", or 1.0 (MiB) for a bucket cap."""
        if isinstance(value, str) or action.type in (size_bytes, bucket_cap):
            return action.type(str(value))
        return value

    def _setting_defaults(self, also: frozenset[str] = frozenset()) -> dict[str, tuple[str, Any]]:
        """The notes' setting of this parser's flags (common.notes_setting.setting_defaults)."""
        return setting_defaults(self._actions, also)

    def _check(self, parsed: argparse.Namespace) -> None:
        """The checks that need the whole command line: the machine, the cost, the output paths."""
        check_course_environment()
        check_bounds(self.bounds, parsed, self._flags())  # a model's costs, before its devices
        self._check_machine(parsed)
        if self.cost and not under_torchrun():  # under torchrun the ranks run elsewhere
            waits = frozenset({"timeout_s"} if self.cost.waits_s else ())  # a staged wait is the timeout's
            check_cost(self.cost, parsed, self._setting_defaults(also=waits))
        if getattr(parsed, "json", None) is not None:
            check_output_file(parsed.json, "--json")
        if getattr(parsed, "save_figs", None) is not None:
            check_output_dir(parsed.save_figs, "--save-figs")
        if getattr(parsed, "trace", None) is not None:
            check_output_dir(parsed.trace, "--trace")
        divert_stdout(getattr(parsed, "json", None))

    def _check_machine(self, parsed: argparse.Namespace) -> None:
        """The ranks this run starts and its backend, against the machine (and torchrun's world)."""
        if self.real:
            check_environment()  # RANK, WORLD_SIZE… set without torchrun: a usage error, not a run
        # Under torchrun the world size is torchrun's: it replaces --world-size, so every part
        # computes with the number of ranks that really run.
        torchrun_world = int(os.environ["WORLD_SIZE"]) if under_torchrun() else None
        if torchrun_world and hasattr(parsed, "world_size") and parsed.world_size != torchrun_world:
            if os.environ.get("RANK", "0") == "0":
                print(f"(under torchrun: --world-size is torchrun's {torchrun_world}, "
                      f"not {parsed.world_size})")
            parsed.world_size = torchrun_world
        # The ranks a real run starts: --world-size, unless the script starts others (its
        # --world-size is then a model's K, bounded like a model script's).
        world = getattr(parsed, "world_size", None)
        ranks = self.cost.ranks(parsed) if self.cost and self.cost.ranks else world
        if self.real and ranks is not None:
            check_world_size(ranks)
        if world is not None and (not self.real or ranks != world):
            check_world(world, self._flags(), parsed)
        if not self.real:  # a model's TP × PP × DP (a real script's axes are its ranks)
            check_split(parsed, self._flags())
        if self.real:
            check_backend(ranks or 1, os.environ.get("COURSE_BACKEND") or "auto")

    def _flags(self) -> Flags:
        """Each dest's flag as an error names it, sizes marked (shown as 2MiB, as typed)."""
        options = [a for a in self._actions if a.option_strings]
        return Flags({a.dest: a.option_strings[-1] for a in options},
                     frozenset(a.dest for a in options if a.type in (size_bytes, bucket_cap)))

LECTURE_FOLDERS = ("lecture14", "lecture15", "cs336")   # scripts that print "vs the notes" tables


def _verdict_words(caller: str | None) -> str | None:
    """A lecture script's --help ends with every verdict word it may print, explained (as each
    "vs the notes" table explains the words it uses, under it)."""
    if not caller or os.path.basename(os.path.dirname(os.path.abspath(caller))) not in LECTURE_FOLDERS:
        return None
    from common import verdicts  # the notes' checker, only where --help shows its words
    return "\n".join(verdicts.legend_lines(set(verdicts.LEGEND), 'verdicts (under each "vs the notes" '
                                                                  "table): ", indent=""))


def make_parser(doc: str | None, *, real: bool = False, figs: bool = False,
                context: dict[str, str] | None = None, help_for: dict[str, str] | None = None,
                quick: dict[str, Any] | None = None, cost: Cost | None = None,
                bounds: dict[str, Bound] | None = None, **defaults: Any) -> OneLineParser:
    """A parser with the shared flags named in `defaults` (each with its default), plus --quick and
    --json always, --save-figs with figs=True (scripts that draw), --timeout-s with real=True.
    `context` adds where a flag is used to its help: context={"steps": "Part 2"}; `help_for`
    words --quick or --json for a command that is no lecture script (help_for={"quick": ...}).
    `quick` gives flags' defaults under --quick, by flag name (quick={"steps": 2}; a callable
    gets the other flags: quick={"timing_batch": lambda a: max(64, a.world_size)}); a flag given
    on the command line keeps its value. Flags added later with add_argument may be named too.
    `cost` (real scripts) is what a run costs here: checked before any work (common.run_cost).
    `bounds` (model scripts) is how far each flag whose cost grows goes, by flag name
    (common.model_bounds): checked before any work too.
    """
    parser = OneLineParser(description=(doc or "").strip() or None, formatter_class=_HelpFormatter,
                           epilog=_verdict_words(sys._getframe(1).f_globals.get("__file__")))
    parser.real, parser.cost = real, cost
    parser.bounds = {(FLAGS[k].dest if k in FLAGS and FLAGS[k].dest else k): v
                     for k, v in (bounds or {}).items()}
    parser.quick = {(FLAGS[k].dest if k in FLAGS and FLAGS[k].dest else k): v
                    for k, v in (quick or {}).items()}
    for name, default in defaults.items():
        _add_shared(parser, name, default, context)
    if real:
        low, high = TIMEOUT_RANGE_S
        parser.add_argument("--timeout-s", type=ranged("seconds", low, high, low_open=False),
                            default=None, metavar="S",
                            help=f"seconds a rank may wait in one collective before it fails, {low:g} to "
                                 f"{high:g} (default: {DEFAULT_TIMEOUT_S:g}, or what a part says)")
    help_for = help_for or {}
    parser.add_argument("--quick", action="store_true", help=help_for.get(
        "quick", "the same code with shorter runs where there are any (smoke tests)"))
    if figs:
        parser.add_argument("--save-figs", metavar="DIR", default=None,
                            help="write the figures (PNG) into DIR")
    parser.add_argument("--json", metavar="PATH", default=None, help=help_for.get(
        "json", "write the parts' results and the claims as JSON to PATH"))
    return parser


def _add_shared(parser: OneLineParser, name: str, default: Any, context: dict[str, str] | None) -> None:
    """Add FLAGS[name] to `parser` with `default`, and where it is used (`context`) in its help."""
    if name not in FLAGS:
        raise KeyError(f"{name} is not a shared flag: add it to common.flags.FLAGS or add_argument it")
    flag = FLAGS[name]
    where = f" ({context[name]})" if context and name in context else ""
    if flag.type in (size_bytes, bucket_cap) and default is not None:
        default = flag.type(str(default))  # "64MB", or 2.0 (MiB) for a bucket cap: bytes
    parser.add_argument(f"--{name.replace('_', '-')}", type=flag.type, default=default,
                        metavar=flag.metavar, dest=flag.dest or name, help=flag.help + where)


_NOT_GIVEN = object()  # a --quick-scaled flag's value until parsing shows it was not given

def link_from_args(args: argparse.Namespace, name: str = "") -> Link:
    """The α-β link given by --alpha-us / --beta-gbs (the notes' link where a flag is absent)."""
    alpha = getattr(args, "alpha_us", None)
    beta = getattr(args, "beta_gbs", None)
    return Link(NOTES_LINK.alpha_s if alpha is None else alpha * 1e-6,
                NOTES_LINK.beta_Bps if beta is None else beta * 1e9, name)


