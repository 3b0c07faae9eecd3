"""CS336 lecture 8 (带宽基准的意义 … 带宽数字背后的真正问题): a collective bandwidth benchmark the
way nccl-tests reports it (algbw, busbw, a correctness column), and how to read its numbers.

    python code/cs336/02_benchmark.py                                   # 1 KiB … 4 MiB, 5 timed calls each
    python code/cs336/02_benchmark.py --max-bytes 16MiB --repeats 8    # the full sweep (a few seconds more)
    python code/cs336/02_benchmark.py --world-size 3 --min-bytes 4KiB --max-bytes 64MiB --step-factor 4
    torchrun --standalone --nproc-per-node=4 code/cs336/02_benchmark.py --save-figs figs

One launch times the four collectives at every size, a memory copy and one ring step (a link's
bandwidth); the ranks return their times and this process prints. NCCL where every rank has a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import functools
import time
from typing import Any

import torch
import torch.distributed as dist

from common.cli import make_parser
from common.costmodel.link import fit_line_relative, ring_alpha_beta_from_line
from common.error_types import UsageError
from common.figures import new_figure
from common.flags import nonnegative_int, positive_float, size_bytes
from common.launch import launch, rank_device
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from common.units import fmt_bytes, fmt_time
from cs336 import busbw as bw
from cs336.busbw import COLLECTIVES, Buffers

ROOT = 0                    # broadcast's source rank
COPY_BYTES = 64 * 2**20     # memory-copy buffer: far larger than the caches
QUICK = {"repeats": 3}  # --quick's defaults: fewer timed calls (the same sizes)
WHAT_S = {"all-reduce": "every rank's buffer", "broadcast": "the root's buffer",
          "reduce-scatter": "one rank's input, n chunks of S/n (its output)",
          "all-gather": "one rank's output, n chunks of S/n (its input)"}
SLIPS = ("reduce-scatter", "all-gather")  # where S is n chunks and a chunk is easily taken for S
# torch 2.13 renamed the tensor forms; older releases only have the old names.
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def main() -> None:
    # --repeats, as every script that reports a median of timed runs calls them (it was --iters here)
    parser = make_parser(__doc__, world_size=4, repeats=5, real=True, figs=True, quick=QUICK, cost=COST,
                         context={"repeats": "timed calls per size"})
    parser.add_argument("--min-bytes", type=size_bytes, default="1KiB", help="smallest size S")
    # The default sweep stops at 4 MiB with 5 timed calls: the full one (16 MiB, 8 calls) took 4.5x
    # import torch here against 2.4x (issue 18) for one more size; --max-bytes 16MiB --repeats 8 runs it.
    parser.add_argument("--max-bytes", type=size_bytes, default="4MiB", help="largest size S")
    parser.add_argument("--step-factor", type=positive_float, default=4.0, help="size ratio, > 1")
    parser.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed calls per size")
    args = parser.parse_args()
    try:
        args.sizes = bw.size_sweep(args.min_bytes, args.max_bytes, args.step_factor)
    except ValueError as err:
        raise UsageError(f"--min-bytes {args.min_bytes:,} B, --max-bytes {args.max_bytes:,} B, "
                         f"--step-factor {args.step_factor:g}: {err}") from None
    rep = Report(__file__, "collective bandwidth the nccl-tests way, and how to read it", args)
    results = launch(bench_worker, args.world_size, args.sizes, args.warmup, args.repeats, backend="auto",
                     timeout_s=args.timeout_s)
    n = len(results)  # torchrun's world size if it runs us
    rep.part(1, f"the sweep: {len(COLLECTIVES)} collectives × {len(args.sizes)} sizes on {n} "
                f"{results[0]['backend']} rank{'s' * (n > 1)} ({results[0]['device']})")
    m = part1_benchmark(rep, args, results)  # 带宽基准的意义: the sweep, algbw/busbw/ok, memory-copy rate
    rep.part(2, "the α-β estimate, and startup cost: small sizes never reach the peak")
    part2_latency(rep, m)           # 通信复杂度怎么估: startup cost from small sizes, the half-peak size
    rep.part(3, "reading the number: busbw, the lecture code's chunk size, the ring's volume")
    part3_reading(rep, m)           # 怎么读一个 all-reduce 的数字: busbw, the code's chunk size, ring volume
    rep.part(4, "behind a low number: the hardware's copy rate, the implementation, the slowest rank")
    part4_behind(rep, m)            # 带宽数字背后的真正问题: share of memory copy, the slowest rank
    save_figure(rep, m)
    rep.finish()


def sweep(args: argparse.Namespace) -> list[int]:
    """The sizes the flags ask for (none when they ask for no valid sweep: main says why)."""
    try:
        return bw.size_sweep(args.min_bytes, args.max_bytes, args.step_factor)
    except ValueError:
        return []


def calls(args: argparse.Namespace) -> int:
    """Collective calls per rank: each of the four, at every size, checked, warmed up and timed."""
    return 4 * (1 + args.warmup + args.repeats) * len(sweep(args))


# CPU time here (bench/bench_costs.py, W = 2 … 32): start-up, then every call of every rank: a fixed
# cost and a cost per byte, both growing with the W ranks that share 2 cores. Memory: each rank's
# buffers for the largest S (input, output, the expected result, a copy: S each at most) and the
# memory-copy test's two 64 MiB buffers.
COST = Cost([Term("1", 2.6, lambda a: 1), Term("W²", 0.042, lambda a: a.world_size**2),
             Term("W·calls", 0.0011, lambda a: a.world_size * calls(a)),
             Term("W·calls·S/MiB", 0.0033,
                  lambda a: a.world_size * calls(a) * sum(sweep(a)) / max(1, len(sweep(a))) / 2**20)],
            memory=lambda a: a.world_size * (4 * a.max_bytes + 2 * COPY_BYTES))


# ---- rank code ---------------------------------------------------------------------------------

def pattern(count: int, device: torch.device) -> torch.Tensor:
    """1, 2, …, 8, 1, 2, …: small integers, so sums over ranks are exact in float32."""
    return (torch.arange(count, device=device) % 8 + 1).to(torch.float32)


def expected_output(b: Buffers, rank: int, device: torch.device) -> torch.Tensor:
    """What the collective must leave on `rank` when rank q's input is pattern × (q + 1)."""
    everyone = b.n * (b.n + 1) / 2  # Σ (q + 1)
    if b.collective == "all-reduce":
        return pattern(b.total_elems, device) * everyone
    if b.collective == "reduce-scatter":
        return (pattern(b.total_elems, device) * everyone)[rank * b.out_elems:(rank + 1) * b.out_elems]
    if b.collective == "all-gather":
        return torch.cat([pattern(b.in_elems, device) * (q + 1) for q in range(b.n)])
    return pattern(b.total_elems, device) * (ROOT + 1)


CALLS = {  # (input, output) -> one call; torch has no out-of-place all-reduce or broadcast
    "all-reduce": lambda inp, out: dist.all_reduce(out),
    "reduce-scatter": lambda inp, out: REDUCE_SCATTER(out, inp),
    "all-gather": lambda inp, out: ALL_GATHER(out, inp),
    "broadcast": lambda inp, out: dist.broadcast(out, src=ROOT),
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # NCCL calls return at once; the work is on the GPU


def timed(fn: Any, iters: int, device: torch.device, barrier: bool = True) -> list[float]:
    """This rank's time of each call; a barrier first, so every rank starts the call together."""
    times = []
    for _ in range(iters):
        if barrier:
            dist.barrier()
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def bench_worker(rank: int, world_size: int, sizes: list[int], warmup: int, iters: int) -> dict:
    device = rank_device()
    copy_s = None
    if rank == ROOT:  # alone: the others wait at the barrier below, in a blocking receive
        src = torch.ones(COPY_BYTES // 4, device=device)
        dst = src.clone()  # the first touch of the pages is not timed
        copy_s = timed(lambda: dst.copy_(src), max(iters, 5), device, barrier=False)
    dist.barrier()
    runs: dict[str, list[dict]] = {c: [] for c in COLLECTIVES}
    for collective in COLLECTIVES:
        for requested in sizes:
            b = bw.buffers(collective, world_size, requested)
            given = pattern(b.in_elems, device) * (rank + 1)
            inp = given.clone()
            out = given.clone() if b.in_elems == b.out_elems else torch.empty(b.out_elems, device=device)
            call = functools.partial(CALLS[collective], inp, out)
            call()  # the check, out of place: all-reduce and broadcast work on a copy of inp
            sync(device)
            ok = torch.equal(out, expected_output(b, rank, device)) and torch.equal(inp, given)
            for _ in range(warmup):
                call()
            runs[collective].append({"ok": ok, "times": timed(call, iters, device)})
    shift = None
    if world_size > 1:  # one ring step: send S/n right while receiving S/n from the left
        send = pattern(max(1, sizes[-1] // (4 * world_size)), device)
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, recv, (rank - 1) % world_size)]
        step = lambda: [work.wait() for work in dist.batch_isend_irecv(ops)]  # noqa: E731
        for _ in range(warmup + 1):
            step()
        shift = {"bytes": send.numel() * 4, "times": timed(step, 2 * iters, device)}  # one size: cheap
    return {"backend": dist.get_backend(), "device": str(device), "copy_s": copy_s, "runs": runs,
            "shift": shift}


# ---- the parent --------------------------------------------------------------------------------

def part1_benchmark(rep: Report, args: argparse.Namespace, results: list[dict]) -> dict:
    n = len(results)  # torchrun's world size if it runs us
    rep.note(f"float32; per size 1 checked call, {args.warmup} warm-up, {args.repeats} timed, each after a "
             "barrier. A call's time is its slowest rank's, t the median over calls (nccl-tests times a "
             "batch and averages the ranks). GB = 1e9 B. S is nccl-tests' size: the whole result. busbw "
             "prices a call at the ring model's bytes (what a rank sends in NCCL's ring, S × the factor) "
             "over the measured t: a rate of the model's bytes, not of bytes counted on the wire here.")
    m: dict[str, Any] = {"n": n, "sizes": args.sizes, "rows": {}, "backend": results[0]["backend"]}
    for collective in COLLECTIVES:
        m["rows"][collective] = _collective_table(rep, collective, args.sizes, results)
    if any(row["rounding"] for rows in m["rows"].values() for row in rows):
        rep.note(f"* S rounded to whole float32 elements (per rank for reduce-scatter and all-gather, so a\n"
                 f"multiple of n × 4 = {4 * n} B, down as nccl-tests does, up where that leaves nothing).")
    if n == 1:
        rep.note("one rank: no byte crosses a link, so bus bandwidth is undefined; shown as 0")
    _copy_and_link(rep, results, m)
    rep.value("all_correct", all(r["ok"] for rows in m["rows"].values() for r in rows))
    return m


def _collective_table(rep: Report, collective: str, sizes: list[int], results: list[dict]) -> list[dict]:
    """One collective's rows of the sweep: printed, recorded, returned."""
    n, rows, table = len(results), [], []
    for i, requested in enumerate(sizes):
        row = bw.result_row(collective, n, requested,
                            [r["runs"][collective][i]["times"] for r in results],
                            all(r["runs"][collective][i]["ok"] for r in results))
        rows.append(row)
        chunk = [fmt_bytes(row["S"] // n, True)] if collective in SLIPS else []
        table.append([fmt_bytes(row["S"], True) + "*" * bool(row["rounding"])] + chunk + [
            fmt_time(row["t"]), f"{fmt_time(row['p10'])} … {fmt_time(row['p90'])}", row["algbw"] / 1e9,
            row["busbw"] / 1e9] + [row["slip"] / 1e9] * bool(chunk) + ["yes" if row["ok"] else "NO"])
    ran = (" (gloo runs it here as an all-reduce of the whole input, which the ring model prices at twice "
           "this)" if collective == "reduce-scatter" and results[0]["backend"] == "gloo" else "")
    rep.line(f"\n  {collective}: S = {WHAT_S[collective]}; busbw = algbw × "
             f"{bw.bus_factor(collective, n):.4g}, the ring model's share{ran}")
    slip = collective in SLIPS  # the slip: S/n taken for S (Part 3)
    rep.table(["S"] + ["S/n"] * slip + ["t (p50)", "p10 … p90", "algbw GB/s", "busbw GB/s"]
              + ["lecture code's GB/s"] * slip + ["ok"], table, name=collective)
    rep.value(collective, rows, compared=False)
    return rows


def _copy_and_link(rep: Report, results: list[dict], m: dict) -> None:
    """The two reference speeds: a memory copy on one rank, and one ring step between ranks."""
    n = len(results)
    m["copy"] = COPY_BYTES / bw.percentile(results[0]["copy_s"], 50)
    shift = [r["shift"] for r in results]
    link_s = bw.Timing.from_ranks([s["times"] for s in shift]).median if n > 1 else None
    m["link"] = shift[0]["bytes"] / link_s if link_s else None
    rep.line(f"\n  memory copy on rank {ROOT} (copy_ of {fmt_bytes(COPY_BYTES, True)} on "
             f"{results[0]['device']}, {'1 thread, ' * (results[0]['device'] == 'cpu')}median): "
             f"{m['copy'] / 1e9:.3g} GB/s copied (read and written: twice that moves)")
    if m["link"]:
        rep.line(f"  one ring step (each rank sends {fmt_bytes(shift[0]['bytes'], True)} right, receives "
                 f"from the left): {m['link'] / 1e9:.3g} GB/s per link")
    rep.value("copy_Bps", m["copy"], compared=False)
    rep.value("link_Bps", m["link"], compared=False)


def part2_latency(rep: Report, m: dict) -> None:
    sizes, n = m["sizes"], m["n"]
    if len(sizes) < 2:
        rep.note("one size only: nothing to fit here (give --max-bytes above --min-bytes)")
        rep.value("startup_share_smallest", None, timed=True)
        return
    rows, fits = [], {}
    for collective, data in m["rows"].items():
        s_half = bw.half_peak_size([r["S"] for r in data], [r["algbw"] for r in data])
        small = [r for r in data if r["S"] <= s_half]
        small = small if len(small) >= 2 else data[:2]
        fits[collective] = a, _ = fit_line_relative([r["S"] for r in small], [r["t"] for r in small])
        peak = max(r["algbw"] for r in data)
        # what the bytes at the peak rate don't explain
        startup_share = 1 - data[0]["S"] / peak / data[0]["t"]
        # A fit can put a < 0 when noise beats the startup cost: that is no measurement of it.
        rows.append([collective, max(r["busbw"] for r in data) / 1e9, fmt_bytes(s_half, True),
                     fmt_time(a) if a > 0 else "< 0: noise", fmt_bytes(a * peak, True) if a > 0 else "-",
                     startup_share])
    rep.table(["collective", "peak busbw GB/s", "S at half peak", "fitted a", "a × peak algbw",
               "startup share, smallest"], rows, name="latency")
    rep.note("t = a + b·S fitted up to the half-peak size: a is a call that carries nothing; algbw is half "
             "its peak at S = a·B. Startup share: 1 − S/(peak algbw · t) at S = "
             f"{fmt_bytes(sizes[0], True)}.")
    if n > 1:
        alpha, _ = ring_alpha_beta_from_line(n, *fits["all-reduce"])
        if alpha > 0:
            rep.line(f"  all-reduce read as a ring of 2(n−1) = {2 * (n - 1)} steps: α ≈ a / {2 * (n - 1)} = "
                     f"{fmt_time(alpha)} per step")
    # one rank: no link, no startup
    rep.value("startup_share_smallest", rows[0][-1] if n > 1 else None, timed=True)


def part3_reading(rep: Report, m: dict) -> None:
    n = m["n"]
    last = {c: rows[-1] for c, rows in m["rows"].items()}
    if n == 1:
        rep.note("one rank: S/n is S, every factor is 0 and there is no link: nothing to read here")
        rep.value("lecture_rs_over_busbw", None)
        rep.value("lecture_rs_reading", "nothing to compare on one rank")
        rep.value("ar_time_link_ratio", None)
        rep.value("ar_time_reading", "nothing: one rank has no link", timed=True)
        return
    rs, ag = last["reduce-scatter"], last["all-gather"]
    ways = [["S (total) × (n−1)/n / t: nccl-tests' busbw", rs["busbw"] / 1e9, ag["busbw"] / 1e9],
            ["S/n (one rank's chunk) × (n−1)/n / t: the lecture code's", rs["slip"] / 1e9, ag["slip"] / 1e9],
            ["one rank's input / t, no factor", rs["S"] / rs["t"] / 1e9, ag["S"] / n / ag["t"] / 1e9]]
    rep.line(f"  reduce-scatter and all-gather at S = {fmt_bytes(rs['S'], True)} on {n} ranks, three ways "
             "(GB/s):")
    rep.table(["bytes divided by t", "reduce-scatter", "all-gather"], ways, name="slip")
    rep.note("nccl-tests counts S as the whole result, all n chunks; reduce-scatter's output tensor (one\n"
             "rank's chunk, S/n) taken for S reads n times too low. One rank's input over t, no factor, is\n"
             "algbw for reduce-scatter (n/(n−1) × busbw) and algbw/n for all-gather.")
    ratio = rs["slip"] / rs["busbw"]
    rep.value("lecture_rs_over_busbw", ratio)
    rep.value("lecture_rs_reading", f"{ratio:.4g} of it here on {n} ranks")
    rows = [[c, r["busbw"] / 1e9, r["busbw"] / m["link"], r["t"] * m["link"] / r["S"], bw.bus_factor(c, n)]
            for c, r in last.items()]
    rep.line(f"\n  the same largest size against one ring step's per-link bandwidth ({m['link'] / 1e9:.3g} "
             "GB/s):")
    rep.table(["collective", "busbw GB/s", "busbw / link", "t × link / S", "ring bytes per rank / S"],
              rows, name="ring_volume")
    rep.note("busbw × t is what each rank sends in a ring: if busbw ≈ the link's, t × link / S is the ring's "
             "share (all-reduce: 2(p−1)/p); more: the call costs more than its traffic.")
    ar = last["all-reduce"]
    volume, ring = ar["t"] * m["link"] / ar["S"], bw.bus_factor("all-reduce", n)
    rep.value("ar_time_link_ratio", volume)
    rep.value("ar_time_reading", f"{volume:.3g}, against the ring's {ring:.3g}", timed=True)


def part4_behind(rep: Report, m: dict) -> None:
    last = {c: rows[-1] for c, rows in m["rows"].items()}
    t_ar, size = last["all-reduce"]["t"], fmt_bytes(last["all-reduce"]["S"], True)
    rows = [[c, r["busbw"] / 1e9, r["busbw"] / m["copy"], r["t"] / t_ar, r["t"] / r["t_fastest"]]
            for c, r in last.items()]
    rep.line(f"  at the largest size ({size}); memory copy {m['copy'] / 1e9:.3g} GB/s:")
    rep.table(["collective", "busbw GB/s", "busbw / memory copy", "t / t(all-reduce)", "slowest / fastest "
                                                                                       "rank"],
              rows, name="behind")
    rep.value("ar_busbw_over_copy", rows[0][2] if m["n"] > 1 else None, timed=True)
    rep.note("the notes' causes of a low number: a small tensor (Part 2); the wrong path (loopback TCP: "
             "against a memory copy); a late rank (slowest / fastest); no overlap (not measured). gloo's "
             "reduce-scatter runs a whole all-reduce (ProcessGroupGloo): about 1, where a ring takes 0.5.")


def save_figure(rep: Report, m: dict) -> None:
    if not rep.figure_dir():
        return
    fig, axes = new_figure(2, 2, figsize=(10, 7), sharex=True)
    for ax, (collective, rows) in zip(axes.flat, m["rows"].items()):
        for key, style in (("busbw", "o-"), ("algbw", ".--")):
            ax.loglog([r["S"] for r in rows], [r[key] / 1e9 for r in rows], style, label=key)
        for value, label in ((m["link"], "one ring step (link)"), (m["copy"], "memory copy")):
            if value:  # reference lines: what a link and what a memory copy reach
                ax.axhline(value / 1e9, color="grey", lw=0.8, ls=":")
                ax.annotate(label, (rows[0]["S"], value / 1e9), fontsize=7, va="bottom")
        ax.set(title=f"{collective}, {m['n']} ranks", ylabel="GB/s")
        ax.legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("S (bytes, nccl-tests' total size)")
    fig.suptitle(f"nccl-tests-style sweep on {m['backend']}, {m['n']} ranks on this machine: slowest rank "
                 "per call, median of the iterations")
    fig.tight_layout()
    rep.save_figure(fig, "busbw")


if __name__ == "__main__":
    run_main(main)
