"""Lecture 14 §2.2, §6 (集合操作必须一致): finding a mismatched collective, PyTorch's way and the launcher's.

    python code/lecture14/06_debug_collectives.py [--world-size 4] [--timeout-s 1]

Every rank must make the same collective calls in the same order. Here rank 0 calls all_reduce while
the others call all_gather on the same tensor. Part 1: plain gloo has no idea; every rank waits
until its timeout (kept short here: 1 s) and the launcher can only say which rank's wait ran out
first. Part 2: with TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps the process group and compares
every collective's fingerprint (op, shapes, dtypes) across ranks before it runs: the mismatch is
named, op by op, in a fraction of a second; what that check costs is counted there too, from
the profiler's gloo spans: every collective gets two all-gathers and a monitored barrier more.
Part 3 puts the two side by side.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of any installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import os
import re
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist

from common.cli import make_parser
from common.error_types import RunFailure, UsageError
from common.launch import capture_stderr, launch, launch_expecting_failure, under_torchrun
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main

MISMATCH_TIMEOUT_S = 1.0   # a healthy collective here takes milliseconds; the plain run waits this long
ELEMENTS = 4               # the tensor every rank hands to its collective
# reproduce.py passes --quick to every script; here it changes nothing, and says so: the one wait, Part
# 1's timeout, is the lesson (--timeout-s sets it)
QUICK_HELP = "accepted, and the run is the same: its one wait, Part 1's timeout, is the lesson (--timeout-s)"
OPS = ("ALLREDUCE", "ALLGATHER")   # how torch's fingerprints name the two calls
# How gloo gives up: the first rank whose wait runs out, or a rank whose peer gave up first and closed
# their connection (which one the launcher hears of first depends on the machine's load).
GLOO_GAVE_UP = ("Timed out", "Connection closed by peer", "timeout caused pair closure")
HEALTHY_CALLS = 2   # collectives healthy_calls makes
# torch's fingerprint in DETAIL's error, one per rank it names
FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
                         r"OpType=(\w+), TensorShape=(\[[^\]]*\]), TensorDtypes=(\w+)")
# CPU time here (measured at W = 4 on 2 loaded cores: 3.5 s, about import torch's): start-up and two
# launches of W ranks, gloo connecting every pair; Part 1 waits for its timeout, then the launcher asks
# the ranks where they are. Memory: W small processes.
COST = Cost([Term("1", 3.5, lambda a: 1), Term("W²", 0.03, lambda a: a.world_size**2)],
            memory=lambda a: (a.world_size + 1) * 200 * 2**20,
            waits_s=lambda a: 2 * (a.timeout_s or MISMATCH_TIMEOUT_S) + 1)


def main() -> None:
    parser = make_parser(__doc__, world_size=4, real=True, cost=COST, help_for={"quick": QUICK_HELP})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be at least 2: a mismatch needs two ranks")
    rep = Report(__file__, "a mismatched collective: plain gloo's timeout against "
                           "TORCH_DISTRIBUTED_DEBUG=DETAIL", args)
    if under_torchrun():   # one group for the whole run: a staged failure would end it
        rep.line("  not run under torchrun: the mismatched collective would break torchrun's one group")
        rep.finish()
        return
    timeout = args.timeout_s or MISMATCH_TIMEOUT_S
    rep.part(1, "plain gloo: rank 0 calls all_reduce, the others all_gather; nobody notices")
    plain = part1_plain(rep, args, timeout)    # all_reduce against all_gather: a timeout, no names
    rep.part(2, "TORCH_DISTRIBUTED_DEBUG=DETAIL: the fingerprints compared before the call")
    detail = part2_detail(rep, args)           # the same under DETAIL: both ops named at once
    rep.part(3, "side by side: what each way tells you about the same bug")
    part3_side_by_side(rep, plain, detail)     # what each tells the reader
    rep.finish()


# ---- rank code ------------------------------------------------------------------------------------
def healthy_calls(group: Any, world_size: int) -> None:
    """The lesson's two collectives, matched on every rank: what DETAIL's cost is counted on."""
    tensor = torch.ones(ELEMENTS)
    dist.all_reduce(tensor, group=group)
    dist.all_gather([torch.empty(ELEMENTS) for _ in range(world_size)], tensor, group=group)


def gloo_ops(group: Any, world_size: int) -> dict[str, int]:
    """The gloo operations healthy_calls runs on `group`, this rank's, counted from the profiler's
    'gloo:*' spans (gloo's own, on its threads: a helper group's too). torch.autograd.profiler's
    profile, the one torch.profiler builds on: the latter's first use imports torch._dynamo (1.4 s)."""
    with capture_stderr():                  # the profiler's start/stop lines from C++, not for the reader
        with torch.autograd.profiler.profile() as prof:
            healthy_calls(group, world_size)
    return dict(Counter(e.name.removeprefix("gloo:") for e in prof.function_events
                        if e.name.startswith("gloo:")))


def group_at(level: Any) -> Any:
    """A new group of every rank made at debug level `level` (read when a group is made): OFF gives
    plain gloo, DETAIL gloo wrapped in ProcessGroupWrapper. Its own group, so the default group's
    calls (the mismatch's sequence number) are untouched."""
    before = dist.get_debug_level()
    dist.set_debug_level(level)
    try:
        return dist.new_group(backend="gloo")
    finally:
        dist.set_debug_level(before)


def mismatched_call(rank: int, world_size: int) -> None:
    """The bug: rank 0 all-reduces (say, a metric) where every other rank all-gathers."""
    tensor = torch.full((ELEMENTS,), float(rank))
    if rank == 0:
        dist.all_reduce(tensor)
    else:
        dist.all_gather([torch.empty(ELEMENTS) for _ in range(world_size)], tensor)


def plain_worker(rank: int, world_size: int) -> None:
    mismatched_call(rank, world_size)   # raises after the timeout: the launcher reports it


def detail_worker(rank: int, world_size: int) -> dict[str, Any]:
    """The same call under DETAIL, timed on the rank from the call to torch's error; the clock is
    the machine's monotonic one, which every rank reads alike, so the parent can also time the
    error from the moment the last rank arrived. First, matched calls on a plain group and on a
    DETAIL one, their gloo operations counted: what DETAIL costs."""
    groups = {"plain": group_at(dist.DebugLevel.OFF), "detail": group_at(dist.DebugLevel.DETAIL)}
    ops = {name: gloo_ops(group, world_size) for name, group in groups.items()}
    start, error = time.monotonic(), ""
    try:
        mismatched_call(rank, world_size)
    except RuntimeError as err:
        error = str(err)
    end = time.monotonic()
    return {"seconds": end - start, "error": error, "called_at": start, "erred_at": end, "ops": ops}


@contextmanager
def debug_detail() -> Iterator[None]:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL for the groups made inside (the ranks forked meanwhile inherit
    the level; spawned ones read the variable), then the level this process had."""
    before_env, before = os.environ.get("TORCH_DISTRIBUTED_DEBUG"), dist.get_debug_level()
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        with warnings.catch_warnings():
            # The wrapped group is not gloo's own type, so the launcher's later change of its timeout
            # is refused with a warning (forked ranks inherit this filter); the group keeps the
            # timeout it was made with, and the parent's deadline still holds.
            warnings.filterwarnings("ignore", message="Set timeout is now only supported")
            yield
    finally:
        if before_env is None:
            os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
        else:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = before_env
        dist.set_debug_level(before)


# ---- the parts ------------------------------------------------------------------------------------
def names_both(text: str) -> bool:
    return all(op in text for op in OPS)


def part1_plain(rep: Report, args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    seconds, report = launch_expecting_failure(plain_worker, args.world_size, timeout_s=timeout)
    if report is None:
        raise RunFailure("Part 1 staged a mismatched collective (all_reduce against all_gather), "
                         "but it completed")
    line = str(report)
    gave_up = any(words in line for words in GLOO_GAVE_UP) and seconds >= timeout
    # A group that compares fingerprints after all (TORCH_DISTRIBUTED_DEBUG=DETAIL in the environment
    # of a torch that reads it) names the ops at once: what this part observes, so its rows say so.
    if not gave_up and names_both(line):
        line = f"{line.split(': ')[0]}: {short_fingerprints(line)}"
    elif not gave_up:                           # anything else: a real fault
        raise RunFailure(f"Part 1 staged a mismatched collective, but the run failed otherwise after "
                         f"{seconds:.2f} s: {line}")
    rep.line(f"  after {seconds:.2f} s (timeout {timeout:g} s) the launcher reports:")
    rep.line(f"    {line}")
    rep.note("gloo matches messages by position, not by meaning: each rank waits for data the other kind of "
             "collective never sends, until its timeout. The rank the launcher heard from first is named "
             "(its wait ran out, or its peer's did and closed their connection); neither the operations nor "
             "the rank that made the wrong call are." if gave_up else
             "this group was no plain gloo: it compared the ranks' fingerprints and named the ops before "
             "any timeout (is TORCH_DISTRIBUTED_DEBUG set?); the rows below say so.")
    rep.value("plain_seconds", seconds)
    rep.value("plain_waited_timeout", gave_up)
    rep.value("plain_names_ops", names_both(line))
    rep.value("plain_line", line)
    rep.value("timeout_s", timeout)
    return {"seconds": seconds, "line": line}


def part2_detail(rep: Report, args: argparse.Namespace) -> dict[str, Any]:
    with debug_detail():
        ranks = launch(detail_worker, args.world_size, timeout_s=args.timeout_s or 30.0)
    # From the last rank's call to the last error: a rank that arrives early waits for the others
    # (on loaded cores they start late), which is no cost of DETAIL's check.
    slowest = max(r["erred_at"] for r in ranks) - max(r["called_at"] for r in ranks)
    rep.note("DETAIL wraps the process group (ProcessGroupWrapper): before each collective every rank "
             "sends its fingerprint (sequence number, op, shapes, dtypes) through a helper gloo group and "
             "compares; a difference raises on every rank at once, naming the ops.")
    rep.table(["rank", "error after", "what its error says"],
              [[rank, f"{r['seconds'] * 1e3:.0f} ms", short_fingerprints(r["error"]) or "no error"]
               for rank, r in enumerate(ranks)], name="detail_errors")
    # torch's behaviour, not our code's: a row (EN-L14-mismatch-detail-names) judges it, not a check
    named = all(names_both(r["error"]) for r in ranks)
    rep.value("detail_names_ops", named)
    rep.value("detail_error", short_fingerprints(ranks[0]["error"]))
    rep.value("detail_seconds", slowest, timed=True)
    rep.compare_with_notes()  # the two rows of the table above; the cost's rows follow its own table
    added = detail_cost(rep, [r["ops"] for r in ranks])
    return {"seconds": slowest, "line": short_fingerprints(ranks[0]["error"]), "added": added}


def wrapper_ops(rank: int, world_size: int) -> dict[str, int]:
    """Ours, from ProcessGroupWrapper's runCollectiveChecks (torch 2.13): per collective, on its
    helper gloo group, a monitored barrier (rank 0 receives from each other rank, then answers
    each; the others send once and receive once), then the fingerprint's all-gathers: its size,
    then itself."""
    messages = world_size - 1 if rank == 0 else 1
    return {"all_gather": 2, "send": messages, "recv": messages}


def extra_per_call(ops: dict[str, dict[str, int]]) -> dict[str, float]:
    """One rank's gloo operations with DETAIL less those without, per collective called."""
    names = set(ops["plain"]) | set(ops["detail"])
    extra = {n: (ops["detail"].get(n, 0) - ops["plain"].get(n, 0)) / HEALTHY_CALLS for n in sorted(names)}
    return {n: v for n, v in extra.items() if v}


def ops_text(ops: dict[str, float]) -> str:
    return " + ".join(f"{v:g} {n}" for n, v in sorted(ops.items())) or "none"


def by_rank(texts: list[str]) -> str:
    """One text per rank, ranks that say the same grouped: 'rank 0: a; ranks 1, 2: b'."""
    groups: dict[str, list[int]] = {}
    for rank, text in enumerate(texts):
        groups.setdefault(text, []).append(rank)
    return "; ".join(f"rank{'s' if len(on) > 1 else ''} {', '.join(map(str, on))}: {text}"
                     for text, on in groups.items())


def detail_cost(rep: Report, ops: list[dict[str, dict[str, int]]]) -> float:
    """DETAIL's cost per collective, counted on every rank, beside what ProcessGroupWrapper does."""
    world = len(ops)
    extra = [extra_per_call(o) for o in ops]
    ours = [wrapper_ops(rank, world) for rank in range(world)]
    rep.note(f"counted from the profiler's gloo spans around {HEALTHY_CALLS} matched collectives (one "
             "all_reduce, one all_gather) on a group made with the debug level off and on one made under "
             "DETAIL: the difference is the helper group's work. Expected: ProcessGroupWrapper's "
             "runCollectiveChecks in torch's source, a monitored barrier, then an all-gather of the "
             "fingerprint's size and one of the fingerprint.")
    rep.table(["rank", "gloo ops: plain → DETAIL", "added per collective, counted",
               "expected from torch's source"],
              [[rank, f"{sum(o['plain'].values())} → {sum(o['detail'].values())}", ops_text(e),
                ops_text(want)] for rank, (o, e, want) in enumerate(zip(ops, extra, ours))],
              name="detail_cost")
    gathers = max(e.get("all_gather", 0) for e in extra)
    barriers = max((e.get("send", 0) for e in extra[1:]), default=0)   # one send per barrier off rank 0
    added = gathers + barriers
    rep.line(f"  DETAIL's cost, counted: {added:g} operations more per collective (expected: "
             f"{rep.notes_text('EN-L14-detail-extra-ops')}), on every rank: {gathers:g} all-gathers and "
             f"{barriers:g} monitored barrier{'s' if barriers != 1 else ''} (rank 0 receives from and "
             f"answers every other rank, {2 * (world - 1)} messages; every other rank 2): a debugging "
             "switch, not a setting for training")
    # counted against our reading of ProcessGroupWrapper, rank by rank: torch's code beside ours, a
    # row (EN-L14-detail-extra-ops-per-rank) that says which differs, not a check that ends the run
    rep.value("detail_extra_ops", added)
    rep.value("detail_extra_text", f"{gathers:g} all-gathers and {barriers:g} monitored barrier"
                                 f"{'s' if barriers != 1 else ''}")
    rep.value("detail_extra_counted", by_rank([ops_text(e) for e in extra]))
    rep.value("detail_extra_ours", by_rank([ops_text(want) for want in ours]))
    rep.compare_with_notes(in_table=True)
    return added


def short_fingerprints(error: str) -> str:
    """torch's message, its fingerprints without the tensor options it repeats: 'rank 0: ALLREDUCE
    of [4] Float (call 0); rank 1: ALLGATHER of [4] Float (call 0)'; any other error as it is."""
    found = FINGERPRINT.findall(error)
    if not found:
        return error.splitlines()[0] if error else ""
    return "; ".join(f"rank {r}: {op} of {shape} {dtype} (call {seq})" for r, seq, op, shape, dtype in found)


def part3_side_by_side(rep: Report, plain: dict[str, Any], detail: dict[str, Any]) -> None:
    rep.table(["", "plain gloo + the launcher", "TORCH_DISTRIBUTED_DEBUG=DETAIL"],
              [["error after", f"{plain['seconds']:.2f} s (timeout, then launcher)",
                f"{detail['seconds'] * 1e3:.0f} ms (after the last rank called)"],
               ["names the two ops", "yes" if names_both(plain["line"]) else "no",
                "yes" if names_both(detail["line"]) else "no"],
               ["names the culprit", "no: the first rank to give up",
                "rank 0 vs rank 1, not which is wrong"],
               ["costs each collective", "nothing", f"{detail['added']:g} gloo operations more (counted)"]],
              name="side_by_side")
    rep.note("neither knows which call was meant: DETAIL shows that rank 0 differs from rank 1, and the "
             "reader decides. The launcher's own blame helps where a rank is not in a collective at all (a "
             "skipped call: 02_primitives.py Part 4 names the rank that finished while the others waited). "
             "Under NCCL the default timeout is minutes, which is why the switch matters there most.")


if __name__ == "__main__":
    run_main(main)
