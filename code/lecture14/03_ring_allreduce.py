"""Lecture 14 §3.1–3.3 (用环来实现): ring all-reduce round by round, its traffic against the other
algorithms, and the pipelined ring broadcast. A model only: the simulator in collectives.py, no torch.

    python code/lecture14/03_ring_allreduce.py
    python code/lecture14/03_ring_allreduce.py --world-size 5 --size 1MB --alpha-us 20

Part 1 prints the symbolic ring all-reduce on --world-size workers (default 4, the notes' a0..d3).
Part 2 measures bytes and rounds of ring, tree, naive and parameter server from the simulation (at
--traffic-size per device, default 256 KiB) beside the closed forms, and the float32 difference
between ring-order summation and np.sum. Part 3 broadcasts --size bytes round a ring of
--world-size devices (default 8) tick by tick, and finds the best number of segments S under α.
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import math

import numpy as np

from common.cli import link_from_args, make_parser
from common.costmodel.collectives import algorithm
from common.costmodel.link import Link
from common.error_types import UsageError
from common.flags import size_bytes
from common.model_bounds import Bound
from common.output import Report
from common.script_end import run_main
from common.text import bar
from common.units import fmt_bytes, fmt_num, fmt_time
from lecture14 import collectives as col
from lecture14 import figures, ring_views
from lecture14.costmodel import best_broadcast_segments, best_integer_segments, continuous_best_segments
from lecture14.network import Result
from lecture14.symbolic import Sym, format_chunks, symbolic_inputs

NOTES_K = {1: 4, 3: 8}  # the notes' device counts: 4 workers in Part 1, 8 devices in Part 3
NOTES_ALPHA_US, NOTES_BETA_GBS, NOTES_SIZE = 5.0, 25.0, 64 * 10**6  # Part 3's link and N (64 MB)
FAR_SEGMENTS = 2**16  # S ≫ K: the broadcast time over N/β there shows the limit
MAX_TICK_TABLE_K = 12  # Part 3's table has a column per link: 11 fit in 100 columns
MAX_SIMULATED_MESSAGES = 2**19  # (K-1)·S messages per broadcast; more: closed form only
# What grows (common.model_bounds), measured here: Part 1 counts the ring's 2K(K−1) messages on K
# workers holding K numbers each (about 2 s of CPU and 0.6 GB at K = 2,048, four times that at 4,096);
# Part 2 simulates up to 64 devices holding N bytes each, message by message, four algorithms: about
# 400 B of memory and 1.5 µs of CPU per byte of N (1 MiB: 0.36 GB, 1.5 s). Both at once: about 3.3 s.
MAX_TRAFFIC_BYTES = 2**20
BOUNDS = {"world_size": Bound(2048, "Part 1 counts each of the ring's 2K(K−1) messages, K numbers a "
                                    "worker (about 0.5 µs per K² here)"),
          "traffic_size": Bound(MAX_TRAFFIC_BYTES, "Part 2 simulates 64 devices holding that much each "
                                                   "(about 400 B of memory and 1.5 µs per byte here)")}
FP_K, FP_SEED = 64, 0
BAR_WIDTH = 25  # Part 3's bars: the segments table stays within the page

# Part 2's all-reduce algorithms (common.costmodel.collectives' names), each with its simulation; the table
# names each without " all-reduce" ("ring", "tree", "naive", "parameter server").
ALGORITHMS = {name: (simulate, algorithm(name)) for name, simulate in (
    ("ring all-reduce", col.ring_allreduce), ("tree all-reduce", col.tree_allreduce),
    ("naive all-reduce", col.naive_allreduce), ("parameter server", col.parameter_server))}
BROADCAST = algorithm("pipelined ring broadcast")  # Part 3's


def main() -> None:
    parser = make_parser(__doc__, alpha_us=NOTES_ALPHA_US, beta_gbs=NOTES_BETA_GBS, size=NOTES_SIZE,
                         world_size=None,
                         figs=True, context={"world_size": "Part 1's workers and Part 3's devices; default: "
                                             "the notes' 4 and 8", "size": "Part 3's broadcast"},
                         bounds=BOUNDS)
    parser.add_argument("--traffic-size", type=size_bytes, default=256 * 1024,
                        help="bytes per device in Part 2, float32 elements (default: 256KiB)")
    args = parser.parse_args()
    if args.world_size is not None and args.world_size < 2:
        raise UsageError("--world-size must be >= 2 (Part 3 broadcasts from one device to the others)")
    rep = Report(__file__, "ring all-reduce, its traffic, pipelined ring broadcast", args)
    k1, k3 = world_size(args, 1), world_size(args, 3)
    rep.part(1, f"ring all-reduce on {k1} workers, "
             + ("symbolically" if k1 <= ring_views.MAX_PRINTED_K else "counted"))
    part1_symbolic_ring(rep, args)     # every round of the ring, in the notes' a0+b0 notation
    rep.part(2, f"traffic and rounds per all-reduce, {fmt_bytes(traffic_bytes(args), binary=True)} "
             "per device")
    part2_traffic(rep, args)           # bytes and rounds measured from the simulation; float32 order
    rep.part(3, f"pipelined ring broadcast: K = {k3}, N = {fmt_bytes(args.size)}, "
             f"{link_from_args(args).describe()}")
    part3_pipelined_broadcast(rep, args)  # tick-by-tick broadcast = (K-2+S)(α + N/(Sβ)); best S
    rep.finish()


def world_size(args: argparse.Namespace, part: int) -> int:
    return NOTES_K[part] if args.world_size is None else args.world_size


def traffic_bytes(args: argparse.Namespace) -> int:
    """Part 2's bytes per device: --traffic-size rounded down to whole float32 (at least one)."""
    return 4 * max(1, args.traffic_size // 4)


def part1_symbolic_ring(rep: Report, args: argparse.Namespace) -> None:
    k = world_size(args, 1)
    symbolic = k <= ring_views.MAX_PRINTED_K
    rep.note("worker r holds one element per chunk: <letter r>0 .. <letter r>{K-1}; rounds count i from 0:\n"
             "reduce-scatter round i: worker r sends chunk (r - i) mod K to r + 1, which adds it;\n"
             "all-gather round i: worker r sends chunk (r + 1 - i) mod K to r + 1, which overwrites.")
    if symbolic:
        res = col.ring_allreduce(symbolic_inputs(k), history=True)
        ring_views.show_rounds(rep, res, k, lambda buf: format_chunks(buf, res.bounds))
        total = Sym([(w, j) for w in range(k) for j in range(k)])
        done = all(sum(buf, Sym()) == total and all(len(v.terms) == k for v in buf)
                   for buf in res.outputs)
    else:
        res, done = ring_views.many_workers(rep, k)
    rep.line(f"  {res.n_rounds} rounds = 2(K - 1); each worker ends with every chunk summed over all {k}, "
             f"each term once: {'yes' if done else 'NO'}")
    rep.value("rounds", res.n_rounds, compared=False)
    rep.value("each_term_once", bool(done), compared=False)
    # The notes' MPI loops (slides 47–48): reduce-scatter round i sends chunk (r − i) mod K and receives
    # (r − i − 1) mod K; all-gather round i sends (r − i + 1) mod K. Checked on every simulated message.
    mpi = all(np.array_equal(rnd.dst, (rnd.src + 1) % k) and np.array_equal(
        rnd.chunk, (rnd.src - rnd.index + (rnd.phase != "reduce-scatter")) % k) and (
        rnd.phase != "reduce-scatter" or np.array_equal(rnd.chunk, (rnd.dst - rnd.index - 1) % k))
              for rnd in res.rounds)
    rep.value("ring_k", k)
    rep.value("ring_messages", sum(len(r.src) for r in res.rounds))
    rep.value("mpi_chunk_indices", mpi)
    rep.value("owner_chunk_complete", owner_chunk_complete(res, k, symbolic))
    rep.compare_with_notes()  # these rows hold at any K; the next two are the notes' K = 4 buffers
    # The notes' buffers after reduce-scatter are for K = 4: shown at that K whatever --world-size says.
    notes_k = NOTES_K[1]
    at4 = res if k == notes_k and symbolic else col.ring_allreduce(symbolic_inputs(notes_k), history=True)
    rs_end = next(r for r in reversed(at4.rounds) if r.phase == "reduce-scatter").state
    rep.value("rs_state_worker0", "  ".join(format_chunks(rs_end[0], at4.bounds)))
    rep.value("rs_state_worker1", "  ".join(format_chunks(rs_end[1], at4.bounds)[:3]))


def owner_chunk_complete(res: Result, k: int, symbolic: bool) -> bool | None:
    """After reduce-scatter, does worker r hold chunk (r + 1) mod K summed over all K workers?
    Read from the kept rounds: symbols, or counts of workers (K > 16 keeps no rounds: None)."""
    rs_end = [r for r in res.rounds if r.phase == "reduce-scatter"][-1].state
    if rs_end is None:
        return None
    if symbolic:
        return all(rs_end[r][(r + 1) % k] == Sym([(w, (r + 1) % k) for w in range(k)]) for r in range(k))
    return all(rs_end[r][(r + 1) % k] == k for r in range(k))


def part2_traffic(rep: Report, args: argparse.Namespace) -> None:
    nbytes = traffic_bytes(args)
    elems = nbytes // 4
    ks = [2, 8, 64] if args.quick else [2, 4, 8, 16, 32, 64]  # 64 stays: the notes' ≈ 2N
    rep.note(f"N = {elems:,} float32 = {nbytes:,} B per device"
             + ("" if nbytes == args.traffic_size else " (--traffic-size rounded down to whole float32)")
             + "; rounds and bytes counted message by message in the simulation, held to our cost\n"
             "model's closed forms (last column); parameter server: K workers + 1 server, whose link is\n"
             "the busiest; a device receives as much as it sends")
    rows, ring_ratio, all_match = traffic_rows(ks, elems)
    rep.table(["K", "algorithm", "rounds", "busiest sends", "busiest / N", "total sent", "= closed forms"],
              rows, name="traffic")
    rep.line(f"  ring: every device sends 2(K-1)/K·N, from {fmt_num(min(ring_ratio.values()))}·N to "
             f"{fmt_num(max(ring_ratio.values()))}·N: bounded by 2N whatever K; the others' busiest "
             "device grows with K (naive, server) or log2 K (tree)")
    if any(elems % k for k in ks):
        rep.note("where K does not divide N, ring chunks differ by one element: the busiest device sends\n"
                 "a little more than 2(K-1)/K·N (tests check the exact chunk-size sum); the line above\n"
                 "still requires those rows' rounds and total bytes to equal the closed forms")
    rep.value("ring_bytes_over_n", ring_ratio, compared=False)
    rep.value("traffic_ks", ", ".join(map(str, ks)))
    rep.value("traffic_closed_forms", all_match)
    rep.value("ring_sent_over_n_at_64", ring_ratio[max(ks)])
    fp_order_difference(rep, elems)


def traffic_rows(ks: list[int], elems: int) -> tuple[list[list], dict[int, float], bool]:
    """Part 2's rows: every algorithm simulated on K devices of `elems` float32 each, against the
    closed forms; also the ring's busiest/N by K and whether every row agrees."""
    nbytes = 4 * elems
    rng = np.random.default_rng(FP_SEED)
    rows, ring_ratio, all_match = [], {}, True
    for k in ks:
        inputs = [rng.standard_normal(elems).astype(np.float32) for _ in range(k)]
        for full_name, (simulate, alg) in ALGORITHMS.items():
            name = full_name.removesuffix(" all-reduce")
            res = simulate(inputs)
            busiest, total = alg.busiest_bytes(k, nbytes), alg.total_bytes(k, nbytes)
            rounds_and_total = res.n_rounds == alg.rounds(k) and res.total_sent == total
            match = rounds_and_total and res.busiest_sent == busiest
            # The busiest device's closed form assumes chunks of N/K; rounds and total hold regardless.
            uneven = name == "ring" and elems % k != 0
            all_match &= match or (uneven and rounds_and_total)
            # The closed forms' own figures are shown only where they differ from the simulation's.
            closed = f"{alg.rounds(k)} rounds, busiest {fmt_bytes(busiest)}, total {fmt_bytes(total)}"
            rows.append([str(k), name, res.n_rounds, fmt_bytes(res.busiest_sent), res.busiest_sent / nbytes,
                         fmt_bytes(res.total_sent), "yes" if match else (
                             f"no: N/K not whole (busiest {fmt_bytes(busiest)})" if uneven
                             else f"NO: {closed}")])
            if name == "ring":
                ring_ratio[k] = res.busiest_sent / nbytes
    return rows, ring_ratio, all_match


def fp_order_difference(rep: Report, elems: int) -> None:
    """Ring-order float32 sums against np.sum of the same K = 64 buffers."""
    rng = np.random.default_rng(FP_SEED)
    inputs = [rng.standard_normal(elems).astype(np.float32) for _ in range(FP_K)]
    ring = col.ring_allreduce(inputs).outputs[0].astype(np.float64)
    stacked = np.stack(inputs)
    numpy_sum = np.sum(stacked, axis=0).astype(np.float64)  # float32 accumulation, numpy's order
    exact = np.sum(stacked.astype(np.float64), axis=0)      # reference: float64 of the same data
    diff = np.abs(ring - numpy_sum)
    # float32 spacing (one unit in the last place) at the largest sum: the scale of one rounding
    spacing = float(np.spacing(np.float32(np.abs(exact).max())))
    rep.line(f"  float32 order: K = {FP_K}, each device {elems:,} standard-normal float32 values (seed "
             f"{FP_SEED})")
    rep.table(["quantity", "value"], [
        ["max |ring - np.sum| over all elements", float(diff.max())],
        ["mean |ring - np.sum|", float(diff.mean())],
        ["elements where they differ", f"{100 * np.mean(diff > 0):.1f} %"],
        ["max |ring - float64 sum|", float(np.abs(ring - exact).max())],
        ["max |np.sum - float64 sum|", float(np.abs(numpy_sum - exact).max())],
        ["largest |sum| (float64)", float(np.abs(exact).max())],
        ["float32 spacing at the largest |sum|", spacing],
        ["max |ring - np.sum| / that spacing", float(diff.max()) / spacing],
    ], name="fp_order")
    rep.note("neither order is 'the right one': both are float32 roundings of the same sum, off by a\n"
             "few float32 spacings at the scale of the sums; a relative difference per element is not\n"
             "meaningful here (sums close to 0 make it arbitrarily large), so the measure is the max\n"
             "absolute difference")
    rep.value("fp_elements", elems)
    rep.value("fp_max_diff", float(diff.max()))


def part3_pipelined_broadcast(rep: Report, args: argparse.Namespace) -> None:
    k, n, link = world_size(args, 3), args.size, link_from_args(args)
    demo_ticks(rep, k)
    best_pow2 = best_broadcast_segments(k, n, link)
    top = min(20, max(12, best_pow2.bit_length() + 2))
    sim_times, sim_ok = segments_table(rep, k, n, link, top)
    rep.line(f"  tick simulation equals the closed form (ticks exactly, time to rounding): "
             f"{'yes' if sim_ok else 'NO'}")
    s_cont = continuous_best_segments(k, n, link)
    t_best, t_one = BROADCAST.time(k, n, link, best_pow2), BROADCAST.time(k, n, link, 1)
    rep.line(f"  best power of two S = {best_pow2}: {fmt_time(t_best)}; unsplit: {fmt_time(t_one)}; "
             f"S >> K without α: N/β = {fmt_time(n / link.beta_Bps)}")
    if link.alpha_s > 0 and k > 2:
        best_int = best_integer_segments(k, n, link)
        rep.line(f"  continuous optimum S* = sqrt((K-2)·N/(α·β)) = {fmt_num(s_cont)}; best integer S = "
                 f"{best_int}: {fmt_time(BROADCAST.time(k, n, link, best_int))}")
    else:
        rep.note("α = 0 or K = 2: no interior optimum (more segments never hurt when K > 2 and α = 0;\n"
                 "with K = 2 there is one link and nothing to overlap, so S = 1 is best whenever α > 0)")
    rep.value("ticks_k", k)
    rep.value("ticks_top_s", 2**top)
    rep.value("tick_simulation_ok", sim_ok)
    notes_setting_values(rep, (k, n, link))
    if rep.figure_dir():
        rep.save_figure(figures.broadcast_segments(k, n, link, sim_times, best_pow2), "broadcast_segments")


def segments_table(rep: Report, k: int, n: int, link: Link, top: int) -> tuple[dict[int, float], bool]:
    """Part 3's table, S = 1, 2, 4 … 2**top: the tick simulation (where it stays small) against the
    closed form. Returns the simulated times by S and whether ticks and times all agree."""
    rows, sim_times, ticks_ok, time_ok = [], {}, True, True
    ticks = BROADCAST.rounds  # K-2+S, from common.costmodel.collectives
    scale = max(BROADCAST.time(k, n, link, 2**i) for i in range(top + 1))  # bars never clip
    for s in (2**i for i in range(top + 1)):
        formula = BROADCAST.time(k, n, link, s)
        if (k - 1) * s <= MAX_SIMULATED_MESSAGES:
            res = col.pipelined_ring_broadcast(n, k, s)
            sim_times[s] = res.time(link)
            ticks_ok &= res.n_rounds == ticks(k, s)
            # Segments differ by one byte when S does not divide N: the tick takes the larger one.
            time_ok &= math.isclose(sim_times[s], formula, rel_tol=1e-9 if n % s == 0 else 1e-3)
            rows.append([s, res.n_rounds, ticks(k, s), fmt_time(sim_times[s]), fmt_time(formula),
                         bar(formula, scale, BAR_WIDTH)])
        else:
            rows.append([s, "-", ticks(k, s), "-", fmt_time(formula), bar(formula, scale, BAR_WIDTH)])
    rep.table(["S", "ticks simulated", "ticks, K-2+S", "time simulated", "time, closed form", "time (bar)"],
              rows, name="segments")
    return sim_times, ticks_ok and time_ok


def notes_setting_values(rep: Report, run: tuple[int, int, Link]) -> None:
    """The notes' statements are at K = 8, 64 MB, α = 5 µs, β = 25 GB/s: computed there whatever the
    flags (the table above follows them), so they stay checked; said so when this run is elsewhere."""
    k, n, link = NOTES_K[3], NOTES_SIZE, Link(NOTES_ALPHA_US * 1e-6, NOTES_BETA_GBS * 1e9)
    if run != (k, n, link):
        rep.line(f"  vs the notes: recomputed at their setting, K = {k}, N = {fmt_bytes(n)}, "
                 f"{link.describe()}")
    best = best_broadcast_segments(k, n, link)
    no_alpha = Link(0.0, link.beta_Bps)
    rep.value("limit_over_n_b", BROADCAST.time(k, n, no_alpha, FAR_SEGMENTS) / (n / link.beta_Bps))
    rep.value("best_s", best)
    rep.value("best_s_ms", BROADCAST.time(k, n, link, best) * 1e3)
    rep.value("best_integer_s", best_integer_segments(k, n, link))
    rep.value("best_integer_s_ms", BROADCAST.time(k, n, link, best_integer_segments(k, n, link)) * 1e3)
    rep.value("best_s_ticks", BROADCAST.rounds(k, best))
    rep.value("best_s_tick_us", (link.alpha_s + n / best / link.beta_Bps) * 1e6)
    rep.value("unsplit_ms", BROADCAST.time(k, n, link, 1) * 1e3)
    rep.value("unsplit_ticks", k - 1)
    rep.value("unsplit_tick_ms", (link.alpha_s + n / link.beta_Bps) * 1e3)
    rep.value("unsplit_no_alpha_ms", BROADCAST.time(k, n, no_alpha, 1) * 1e3)


def demo_ticks(rep: Report, k: int, segments: int = 4) -> None:
    """Which segment each link carries in each tick, for a small S: the pipeline filling and draining."""
    res = col.pipelined_ring_broadcast(np.arange(segments, dtype=np.float32), k, segments)
    if k <= MAX_TICK_TABLE_K:
        links = [f"{p}→{p + 1}" for p in range(k - 1)]
        rows = []
        for rnd in res.rounds:
            carried = {t.src: str(t.chunk) for t in rnd.transfers}
            rows.append([str(rnd.index)] + [carried.get(p, "") for p in range(k - 1)])
        rep.line(f"  S = {segments} segments (0..{segments - 1}), the segment each link carries per tick:")
        rep.table(["tick"] + links, rows, name="ticks")
    else:
        rep.note(f"K = {k} > {MAX_TICK_TABLE_K}: the tick-by-tick table (a column per link) is shown for "
                 f"K <= {MAX_TICK_TABLE_K} only;\nS = {segments} segments moved for real, counted below")
    ok = all(np.array_equal(out, np.arange(segments)) for out in res.outputs)
    rep.line(f"  {res.n_rounds} ticks = K - 2 + S = {k - 2 + segments}; every device holds the data: "
             f"{'yes' if ok else 'NO'}")
    rep.value("demo_ticks", {"segments": segments, "ticks": res.n_rounds, "every_device_holds": bool(ok)},
              compared=False)   # for --json


if __name__ == "__main__":
    run_main(main)
