"""Problem 120's cases: nccl-tests' arithmetic, a benchmark row from one rank's buffers and every
rank's measured times.

The student's bandwidth_row(collective, world_size, in_bytes, out_bytes, times_s) runs in the
solution's process on rows the judge builds: sizes by code/cs336/busbw.py's `buffers` (what a
rank allocates for a total size S), times made up to separate the readings (slowest rank or one
rank, median or mean), and in one case times measured on real gloo ranks. Expected values are
busbw.py's: Timing.from_ranks (the median over iterations of the slowest rank), algbw, busbw and,
to name it when a solution makes it, chunk_slip_busbw, the lecture's own benchmark code's slip.
"""

from __future__ import annotations

import math
import statistics
import time
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from cs336 import busbw as bw
from judging.engine import Case
from judging.messages import kind
from judging.ranks import run_ranks
from judging.sandbox import Fail, function

FUNCTIONS = ("bandwidth_row",)
GB = 1e9              # nccl-tests' GB, and busbw.py's
TOL = 1e-9            # relative: the arithmetic is exact up to the order of a few float operations
ELEM = 4              # float32, as the lecture's benchmark
KEYS = ("size_bytes", "time_s", "algbw_GBps", "busbw_GBps")
HINT_SIZE = ("README hint 1: S is the collective's total: reduce-scatter's input and all-gather's output "
             "(all n chunks), all-reduce's and broadcast's buffer")
HINT_SLIP = ("README hint 1: the lecture's slip: reduce-scatter's output is one rank's chunk, S/n; "
             "nccl-tests' S is the whole input, n chunks (busbw n times too low otherwise)")
HINT_TIME = ("README hint 2: a collective is done when its slowest rank is: the slowest rank's time in each "
             "iteration, then the median over the iterations")
HINT_GB = "README hint 3: GB/s here is 10⁹ bytes per second, as nccl-tests prints it; 2³⁰ is a GiB"
HINT_FACTOR = ("README hint 3: busbw = algbw × the ring's share per rank: all-reduce 2(n − 1)/n, "
               "reduce-scatter and all-gather (n − 1)/n, broadcast 1; 0 for every collective on one rank")
HINT_DEADLOCK = "the judge's own benchmark ranks timed out: the machine is too busy? try --case-limit-s 20"
REAL_SIZES = (4 << 10, 64 << 10)     # bytes asked for, on real ranks: small, so the case takes ~1 s
REAL_ITERS, REAL_WARMUP = 5, 1


def row(collective: str, n: int, requested: int, times: list[list[float]]) -> dict[str, Any]:
    """One row as the judge hands it out: busbw.buffers' sizes for the total asked for, and the times."""
    b = bw.buffers(collective, n, requested, ELEM)
    return {"collective": collective, "world_size": n, "in_bytes": b.in_bytes, "out_bytes": b.out_bytes,
            "times_s": times, "requested": requested}


def made_up_times(n: int, seconds: float, iters: int = 5) -> list[list[float]]:
    """Per rank and iteration: the slowest rank changes from one iteration to the next, and one
    iteration is an outlier, so the slowest rank's median, one rank's and a mean all differ."""
    return [[seconds * (1 + 0.1 * ((r + i) % n) + (3.0 if i == iters - 1 and r == n - 1 else 0.0))
             for i in range(iters)] for r in range(n)]


# ---- in the solution's process ------------------------------------------------------------------------
def collect(solution: ModuleType, inputs: dict[str, Any]) -> list[Any]:
    fn = function(solution, "bandwidth_row")
    return [fn(r["collective"], r["world_size"], r["in_bytes"], r["out_bytes"],
               [list(t) for t in r["times_s"]]) for r in inputs["rows"]]


def _call(collective: str, out: torch.Tensor, inp: torch.Tensor) -> None:
    if collective == "all-reduce":
        dist.all_reduce(out)
    elif collective == "broadcast":
        dist.broadcast(out, src=0)
    elif collective == "reduce-scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    else:
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)


def bench_worker(rank: int, world: int, collectives: list[str]) -> list[dict[str, Any]]:
    """Each collective at each size: a barrier, then the call, timed on this rank, per iteration."""
    times = []
    for collective in collectives:
        for requested in REAL_SIZES:
            b = bw.buffers(collective, world, requested, ELEM)
            inp, out = torch.ones(b.in_elems), torch.zeros(b.out_elems)
            if collective in ("all-reduce", "broadcast"):
                out = inp
            mine = []
            for i in range(REAL_WARMUP + REAL_ITERS):
                dist.barrier()
                began = time.perf_counter()
                _call(collective, out, inp)
                if i >= REAL_WARMUP:
                    mine.append(time.perf_counter() - began)
            times.append(mine)
    return times


def collect_measured(solution: ModuleType, inputs: dict[str, Any]) -> dict[str, Any]:
    """Times from real ranks, then the student's arithmetic on them (here, in the solution's process)."""
    fn = function(solution, "bandwidth_row")
    n, collectives = inputs["world_size"], inputs["collectives"]
    per_rank = run_ranks(bench_worker, n, collectives)
    rows = [row(c, n, s, [per_rank[r][i] for r in range(n)])
            for i, (c, s) in enumerate((c, s) for c in collectives for s in REAL_SIZES)]
    return {"rows": rows, "got": [fn(r["collective"], n, r["in_bytes"], r["out_bytes"],
                                     [list(t) for t in r["times_s"]]) for r in rows]}


# ---- in the judge's process ---------------------------------------------------------------------------
def expected_row(r: dict[str, Any]) -> dict[str, float]:
    """busbw.py's reading of one row: S the total, the slowest rank's median time, GB/s of 1e9 B."""
    collective, n = r["collective"], r["world_size"]
    size = bw.buffers(collective, n, r["requested"], ELEM).total_bytes
    seconds = bw.Timing.from_ranks(r["times_s"]).median
    return {"size_bytes": size, "time_s": seconds, "algbw_GBps": bw.algbw(size, seconds) / GB,
            "busbw_GBps": bw.busbw(collective, n, size, seconds) / GB}


def _close(got: Any, want: float) -> bool:
    return (isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got)
            and abs(got - want) <= TOL * max(abs(want), 1e-300))


def _why(key: str, got: float, want: dict[str, float], r: dict[str, Any]) -> tuple[str, str]:
    """(what the wrong value looks like, the hint) for the first field that differs."""
    if key == "size_bytes":
        slip = r["collective"] == "reduce-scatter" and _close(got, r["out_bytes"]) and r["world_size"] > 1
        return (": one rank's output chunk, S/n" if slip else ""), HINT_SLIP if slip else HINT_SIZE
    if key == "time_s":
        slowest = [max(per_rank) for per_rank in zip(*r["times_s"])]
        if _close(got, statistics.mean(slowest)):
            return ": the mean over the iterations (one slow iteration pulls it)", HINT_TIME
        if len(slowest) % 2 == 0 and _close(got, sorted(slowest)[len(slowest) // 2]):
            return (": the upper middle value (with an even number of iterations the median is the mean of "
                    "the two middle ones)"), HINT_TIME
        ranks = [i for i, t in enumerate(r["times_s"]) if _close(got, statistics.median(t))]
        return (f": rank {ranks[0]}'s own median" if ranks else ""), HINT_TIME
    if _close(got * 2**30, want[key] * GB):
        return ": divided by 2³⁰ (GiB/s)", HINT_GB
    slipped = bw.chunk_slip_busbw(r["collective"], r["world_size"], want["size_bytes"], want["time_s"]) / GB
    if key == "busbw_GBps" and r["collective"] in ("reduce-scatter", "all-gather") and _close(got, slipped):
        return ": the lecture's chunk-size reading", HINT_SLIP
    return "", HINT_FACTOR if key == "busbw_GBps" else HINT_SIZE


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() and abs(value) >= 1e4 else f"{value:.10g}"


def check_row(r: dict[str, Any], got: Any) -> None:
    shown = {k: r[k] for k in ("collective", "world_size", "in_bytes", "out_bytes")}
    if not (isinstance(got, dict) and set(KEYS) <= set(got)):
        raise Fail(f"a dict with {', '.join(KEYS)}", kind(got), HINT_SIZE, shown)
    want = expected_row(r)
    ranks = f"{r['world_size']} rank{'s' if r['world_size'] > 1 else ''}"
    for key in KEYS:                   # in the order a reading is made: S, t, then the bandwidths
        value = got[key]
        if _close(value, want[key]):
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Fail(f"{key}: a number", kind(value), HINT_SIZE, shown)
        words, hint = _why(key, value, want, r)
        raise Fail(f"{r['collective']}, {ranks}: {key} = {_number(want[key])}",
                   f"{key} = {_number(value)}{words}", hint, shown)


def check(inputs: dict[str, Any], data: Any) -> None:
    if not isinstance(data, list) or len(data) != len(inputs["rows"]):
        raise Fail(f"{len(inputs['rows'])} rows", kind(data), HINT_SIZE)
    for r, got in zip(inputs["rows"], data):
        check_row(r, got)


def check_measured(inputs: dict[str, Any], data: Any) -> None:
    for r, got in zip(data["rows"], data["got"]):
        check_row(r, got)


def rows_case(name: str, rows: list[dict[str, Any]], hint: str) -> Case:
    return Case(name, {"rows": rows}, collect, check, hint)


CASES = [
    rows_case("the lecture's benchmark: reduce-scatter on 4 ranks, 1 GiB in (float32), 256 MiB out",
              [row("reduce-scatter", 4, 1 << 30, made_up_times(4, 0.05))], HINT_SLIP),
    rows_case("every collective on 2, 4 and 8 ranks at 64 MiB: S, algbw, busbw",
              [row(c, n, 64 << 20, made_up_times(n, 0.01 * n)) for c in bw.COLLECTIVES for n in (2, 4, 8)],
              HINT_FACTOR),
    rows_case("one rank: nothing crosses a link, busbw 0 for every collective",
              [row(c, 1, 1 << 20, made_up_times(1, 1e-4)) for c in bw.COLLECTIVES], HINT_FACTOR),
    rows_case("the time: a different slowest rank in each iteration, one slow iteration (3 ranks, then an "
              "even count of iterations on 2)",
              [row("all-reduce", 3, 10**6, made_up_times(3, 2e-3, 7)),
               # 4 iterations, the slowest 3, 4, 5, 9 ms: the median is 4.5 ms, the mean of the middle two
               row("all-gather", 2, 10**6, [[1e-3, 4e-3, 2e-3, 9e-3], [3e-3, 1e-3, 5e-3, 2e-3]])], HINT_TIME),
    Case("measured on 3 real gloo ranks: all-reduce, reduce-scatter, all-gather, 4 KiB and 64 KiB",
         {"world_size": 3, "collectives": ["all-reduce", "reduce-scatter", "all-gather"]}, collect_measured,
         check_measured, HINT_SIZE, quick=False, ranks=True),
]
