"""CS336 lecture 8, pipeline parallelism (流水线并行 … stage 负载不均): GPipe and 1F1B simulated pass
by pass, the bubble tables, activation memory, interleaving and unbalanced stages. A model only.

    python code/cs336/06_pipeline.py
    python code/cs336/06_pipeline.py --stages 8 --micro-batches 32 --tb-ms 10 --p2p-ms 1

Part 1 simulates GPipe and 1F1B for --stages S and --micro-batches M (forward --tf-ms, backward
--tb-ms per stage and micro-batch, --p2p-ms per hop) and draws their timelines. Part 2 is the
notes' efficiency table M/(M + S - 1); Part 3 their bubble-time worked example, read two ways, and
the M a 5 % bubble needs; Part 4 compares GPipe with 1F1B (bubble, activations) and interleaved
1F1B (--virtual-stages v); Part 5 makes one stage --slow-factor times slower. The simulator is
cs336/pipeline.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code/, ahead of anything installed
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse
import functools
import math

from common.cli import UsageError, make_parser, nonnegative_float, positive_float, positive_int, run_main
from common.output import ASSUMPTION, EXACT, Report, fmt_time, new_figure
from cs336 import pipeline as pp

NOTES_TF_MS, NOTES_TB_MS = 10.0, 20.0
EFFICIENCY_TABLE = {(4, 4): 57, (4, 8): 73, (4, 16): 84, (8, 8): 53}   # the notes' η, %
# The notes' worked example: (S, M) -> bubble ms, effective compute ms, bubble share % as printed,
# and the decimal places it is printed to (3.0 % has one)
BUBBLE_TABLE = {(4, 4): (30, 120, 20, 0), (4, 8): (30, 240, 11, 0), (4, 16): (30, 480, 5.9, 1),
                (4, 32): (30, 960, 3.0, 1), (8, 8): (70, 240, 22.6, 1), (8, 32): (70, 960, 6.8, 1)}
NOTES_MIN_M = {4: 19, 8: 44}            # "M >= 19(S-1)/3: S = 4 needs 19, S = 8 needs 44"
COMPARE = [(4, 4), (4, 8), (4, 16), (8, 8), (8, 32)]       # Part 4's (S, M)
INTERLEAVED = [(4, 8), (4, 16), (8, 16), (8, 32)]          # M a multiple of S, as Megatron needs
MOST_INTERLEAVED = max(s * m for s, m in INTERLEAVED)      # S·M of the largest: S·M·v passes
MAX_PASSES = 2**16                       # S·M: keeps every part within about a second
MAX_STAGES = 128                         # Part 5 simulates S and S + 1 micro-batches
TOL = 1e-12


def main() -> None:
    parser = make_parser(__doc__, micro_batches=8, figs=True, context={"micro_batches": "M"})
    parser.add_argument("--stages", type=positive_int, default=4, help="pipeline stages S (default 4)")
    parser.add_argument("--tf-ms", type=positive_float, default=NOTES_TF_MS,
                        help=f"forward time per stage and micro-batch, ms (default {NOTES_TF_MS:g})")
    parser.add_argument("--tb-ms", type=positive_float, default=NOTES_TB_MS,
                        help=f"backward time per stage and micro-batch, ms (default {NOTES_TB_MS:g})")
    parser.add_argument("--p2p-ms", type=nonnegative_float, default=0.0,
                        help="send time between stages in Part 1, ms (default 0, as the notes)")
    parser.add_argument("--virtual-stages", type=positive_int, default=2,
                        help="model chunks per device for interleaved 1F1B in Part 4 (default 2)")
    parser.add_argument("--slow-factor", type=positive_float, default=2.0,
                        help="how many times slower Part 5's slow stage is (default 2)")
    args = parser.parse_args()
    if args.stages > MAX_STAGES:
        raise UsageError(f"--stages must be <= {MAX_STAGES} (a quick model), got {args.stages}")
    if args.stages * args.micro_batches > MAX_PASSES:
        raise UsageError(f"--stages × --micro-batches must be <= {MAX_PASSES:,} (a quick model), "
                         f"got {args.stages * args.micro_batches:,}")
    if args.virtual_stages < 2:
        raise UsageError("--virtual-stages must be >= 2 (v = 1 is plain 1F1B)")
    # Part 4 simulates S·M·v passes for each interleaved (S, M): it builds them all in memory.
    if MOST_INTERLEAVED * args.virtual_stages > MAX_PASSES:
        raise UsageError(f"--virtual-stages {args.virtual_stages:,}: Part 4 would simulate "
                         f"{MOST_INTERLEAVED * args.virtual_stages:,} passes (S = 8, M = 32); at most "
                         f"{MAX_PASSES // MOST_INTERLEAVED:,} virtual stages (a quick model, {MAX_PASSES:,} passes)")
    if args.slow_factor < 1:
        raise UsageError("--slow-factor must be >= 1 (it makes one stage slower)")
    rep = Report(__file__, "pipeline parallelism: schedules, bubbles, activations", args)
    part1_schedules(rep, args)       # GPipe and 1F1B, pass by pass: makespan, bubble, activations
    part2_efficiency(rep, args)      # the notes' table M/(M + S - 1), simulated and closed form
    part3_bubble_time(rep, args)     # the worked example read two ways; the M a 5 % bubble needs
    part4_gpipe_vs_1f1b(rep, args)   # same bubble, O(M) vs O(S) activations; interleaved 1F1B
    part5_unbalanced(rep, args)      # the slowest stage sets the pace
    rep.finish()


@functools.lru_cache(maxsize=None)
def run(schedule: str, s: int, m: int, tf: float | tuple[float, ...], tb: float | tuple[float, ...],
        p2p: float = 0.0, virtual: int = 2) -> pp.PipelineRun:
    """pp.run_schedule, each distinct run simulated once (parts share the notes' configurations)."""
    return pp.run_schedule(schedule, s, m, tf, tb, p2p, virtual)


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 9)  # float noise off, for tables and claims


def at_notes_times(args: argparse.Namespace) -> bool:
    return args.tf_ms == NOTES_TF_MS and args.tb_ms == NOTES_TB_MS


def part1_schedules(rep: Report, args: argparse.Namespace) -> None:
    s, m, tf, tb, p2p = args.stages, args.micro_batches, args.tf_ms / 1e3, args.tb_ms / 1e3, args.p2p_ms / 1e3
    rep.part(1, f"GPipe and 1F1B: S = {s}, M = {m}, t_f = {args.tf_ms:g} ms, t_b = {args.tb_ms:g} ms, "
                f"p2p = {args.p2p_ms:g} ms")
    rep.note("every stage runs its passes in the schedule's order, each as soon as its input is there:\n"
             "F(m) on stage s after F(m) on s-1, B(m) on s after B(m) on s+1 and F(m) on s (+ p2p time\n"
             "per hop); GPipe: all forwards, then all backwards; 1F1B: S-s-1 warm-up forwards, then\n"
             "one forward, one backward, then the remaining backwards")
    runs = {name: run(name, s, m, tf, tb, p2p) for name in ("GPipe", "1F1B")}
    closed = pp.bubble_fraction_closed_form(s, m)
    for name, sim in runs.items():
        rep.line(f"  {name}: makespan {fmt_time(sim.makespan)}, bubble {100 * sim.bubble_fraction:.2f} % of "
                 f"S × makespan (closed form {100 * closed:.2f} %{'; it leaves p2p out' if p2p else ''})")
        rows, how = pp.ascii_chart(sim)
        for row in rows:
            rep.line("  " + row)
        rep.note(how)
    shown = list(range(s)) if s <= 16 else list(range(4)) + list(range(s - 4, s))
    rep.table(["stage", "busy ms", "idle ms GPipe", "idle ms 1F1B", "peak act. GPipe", "peak act. 1F1B", "S - s"],
              [[str(d), ms(runs["GPipe"].busy[d]), ms(runs["GPipe"].idle[d]), ms(runs["1F1B"].idle[d]),
                runs["GPipe"].peak_activations[d], runs["1F1B"].peak_activations[d], s - d] for d in shown],
              name="stages")
    if len(shown) < s:
        rep.note(f"{len(shown)} of {s} stages shown (the first and last four)")
    rep.note("peak act. = most micro-batches whose forward has ended and backward has not, on that stage")
    if p2p and s > 1:
        extra = {name: ms(sim.makespan - pp.makespan_closed_form(s, m, tf, tb)) for name, sim in runs.items()}
        rep.note(f"p2p time adds {extra['GPipe']:g} ms to GPipe (2(S-1)·p2p = {ms(2 * (s - 1) * p2p):g} ms: it waits "
                 f"in the fill and the\ndrain only) and {extra['1F1B']:g} ms to 1F1B: its alternation makes "
                 "stages wait for a gradient's\nround trip in the steady phase too")
    for name, sim in runs.items():
        rep.record(name, {"makespan_ms": ms(sim.makespan), "bubble_fraction": sim.bubble_fraction,
                          "peak_activations": sim.peak_activations})
    plot_runs(rep, list(runs.values()), "schedules",
              f"S = {s} stages, M = {m} micro-batches, t_f = {ms(tf):g} ms, t_b = {ms(tb):g} ms, p2p = {ms(p2p):g} ms")


def part2_efficiency(rep: Report, args: argparse.Namespace) -> None:
    tf = args.tf_ms / 1e3
    rep.part(2, "pipeline efficiency η = M/(M + S - 1)")
    rows = []
    for (s, m), notes in EFFICIENCY_TABLE.items():
        sims = [run(name, s, m, tf, k * tf).efficiency for k in (1, 2) for name in ("GPipe", "1F1B")]
        rows.append([s, m, f"{m}/{m + s - 1}", 100 * m / (m + s - 1)] + [100 * e for e in sims] + [notes])
    rep.table(["S", "M", "fraction", "η closed %", "GPipe tb=tf", "1F1B tb=tf", "GPipe tb=2tf", "1F1B tb=2tf",
               "notes %"], rows, name="efficiency")
    rep.note("η = busy share of S × makespan, simulated at t_f = --tf-ms; the closed form assumes equal\n"
             "stages, identical micro-batches and no time outside the passes (no p2p, launches or\n"
             "optimizer step); then it holds for GPipe and 1F1B and for any t_b/t_f")
    for row in rows:
        rep.claim(f"η, S={row[0]} M={row[1]}, 1F1B simulated (t_b = 2 t_f)", row[7], row[8], "%",
                  ASSUMPTION, places=0, setting=(),
                  why="equal stages and no time outside the passes (see the note): S and M are the row's")


def part3_bubble_time(rep: Report, args: argparse.Namespace) -> None:
    tf, tb = args.tf_ms / 1e3, args.tb_ms / 1e3
    notes_here = at_notes_times(args)
    rep.part(3, f"bubble time, t_f = {args.tf_ms:g} ms, t_b = {args.tb_ms:g} ms: the notes' formula and a real schedule")
    rows = []
    for (s, m), printed in BUBBLE_TABLE.items():
        sim, gpipe = run("1F1B", s, m, tf, tb), run("GPipe", s, m, tf, tb)
        fill, work = (s - 1) * tf, m * (tf + tb)
        real_bubble = max(sim.idle)   # the same on every stage when stages are equal
        same = math.isclose(gpipe.makespan, sim.makespan, rel_tol=TOL)
        rows.append([s, m, ms(fill), ms(work), 100 * pp.notes_bubble_share(s, m, tf, tb), ms(real_bubble),
                     100 * sim.bubble_fraction, ms(sim.makespan), "yes" if same else "NO", printed])
    rep.table(["S", "M", "(S-1)t_f", "M(t_f+t_b)", "notes' share %", "real bubble", "real share %",
               "makespan", "GPipe same"], [r[:-1] for r in rows], name="bubble")
    rep.note("times in ms. The notes' formula: bubble = (S-1)·t_f, share = bubble/(M(t_f+t_b) + bubble).\n"
             "A real schedule (simulated, GPipe and 1F1B alike) idles (S-1)·(t_f+t_b) on every stage:\n"
             "the backwards fill and drain the pipeline too (the last stage finishes first, the first\n"
             "waits for its gradients to come back). So the simulated bubble is right and the notes' is\n"
             "too small; their own η table says so: η = 57 % at S = 4, M = 4 is a 43 % bubble, not 20 %")
    why = "the notes count only the forward fill (S-1)·t_f; a schedule idles (S-1)(t_f+t_b)"
    for s, m, fill, work, share, real_bubble, real_share, *_, printed in rows:
        nb, nw, ns, places = printed if notes_here else (None, None, None, printed[3])
        own = "follows from the notes' own formula, which counts the forward fill only"
        rep.claim(f"S={s} M={m}: M(t_f+t_b)", work, nw, "ms", EXACT, places=0)
        rep.claim(f"S={s} M={m}: bubble by the notes' (S-1)·t_f", fill, nb, "ms", ASSUMPTION, places=0, why=own)
        rep.claim(f"S={s} M={m}: share by the notes' formula", share, ns, "%", ASSUMPTION, places=places, why=own)
        rep.claim(f"S={s} M={m}: bubble, simulated schedule", real_bubble, nb, "ms", EXACT, places=0, erratum=True, why=why)
        rep.claim(f"S={s} M={m}: share, simulated schedule", real_share, ns, "%", EXACT, places=places,
                  erratum=True, why="a real share is (S-1)/(M+S-1), as the notes' own η table")
    five_percent(rep, args)


def five_percent(rep: Report, args: argparse.Namespace) -> None:
    tf, tb = args.tf_ms / 1e3, args.tb_ms / 1e3
    ratio_2 = math.isclose(tb, 2 * tf, rel_tol=TOL)
    shortcut_ok = all(math.isclose(pp.notes_bubble_share(s, m, tf, tb), (s - 1) / (3 * m + s - 1), rel_tol=1e-9)
                      for s, m in BUBBLE_TABLE)
    rep.line(f"  the notes' shortcut (S-1)/(3M+S-1) = their formula at every row: {'yes' if shortcut_ok else 'no'}"
             + (" (t_b = 2 t_f)" if ratio_2 else " (it assumes t_b = 2 t_f)"))
    rows, found = [], {}
    for s in (2, 4, 8, 16):
        by_notes = pp.smallest_micro_batches(s, 0.05 + TOL, lambda m, s=s: pp.notes_bubble_share(s, m, tf, tb))
        by_closed = pp.smallest_micro_batches(s, 0.05 + TOL, lambda m, s=s: pp.bubble_fraction_closed_form(s, m))
        # The simulated schedule at that M and one below: the closed form's answer checked pass by pass.
        at, below = (run("1F1B", s, k, tf, tb).bubble_fraction if k else 1.0 for k in (by_closed, by_closed - 1))
        sim_ok = at <= 0.05 + TOL and (by_closed == 1 or below > 0.05 + TOL)
        found[s] = (by_notes, by_closed)
        rows.append([s, 19 * (s - 1) / 3, by_notes, 100 * pp.notes_bubble_share(s, by_notes - 1, tf, tb)
                     if by_notes > 1 else "-", by_closed, 100 * at, 100 * below if by_closed > 1 else "-",
                     "yes" if sim_ok else "NO"])
    rep.table(["S", "19(S-1)/3", "M notes'", "at M-1 %", "M real", "real %", "at M-1 %", "simulated"],
              rows, name="five_percent")
    rep.note("smallest M with a bubble ≤ 5 %: by the notes' formula (at this t_b/t_f) and by a real\n"
             "schedule, (S-1)/(M+S-1) ≤ 5 % ⇔ M ≥ 19(S-1); 'simulated': that M and the one below,\n"
             "simulated, fall on either side of 5 %")
    for s, notes_m in NOTES_MIN_M.items():
        notes = notes_m if ratio_2 else None
        by_notes, by_real = found[s]
        rep.claim(f"S={s}: smallest M for ≤ 5 %, notes' formula", by_notes, notes, "", ASSUMPTION, places=0,
                  erratum=True, why=f"19·{s - 1}/3 = {19 * (s - 1) / 3:.2f} rounds up to {by_notes}; M = {by_notes - 1} gives "
                  f"{100 * pp.notes_bubble_share(s, by_notes - 1, tf, tb):.2f} %")
        rep.claim(f"S={s}: smallest M for ≤ 5 %, simulated schedule", by_real, notes, "", EXACT, places=0,
                  erratum=True, why="the real bubble (S-1)/(M+S-1) needs M ≥ 19(S-1)")


def part4_gpipe_vs_1f1b(rep: Report, args: argparse.Namespace) -> None:
    tf, tb, v = args.tf_ms / 1e3, args.tb_ms / 1e3, args.virtual_stages
    rep.part(4, "GPipe vs 1F1B: bubble and activation memory; interleaved 1F1B")
    configs = COMPARE + ([(args.stages, args.micro_batches)] if (args.stages, args.micro_batches) not in COMPARE
                         and args.stages * args.micro_batches <= 4096 else [])
    rows, same, closed_ok, first_le_s, bound_ok, gpipe_all = [], True, True, True, True, True
    for s, m in configs:
        g, f = (run(name, s, m, tf, tb) for name in ("GPipe", "1F1B"))
        closed = pp.bubble_fraction_closed_form(s, m)
        same &= math.isclose(g.bubble_fraction, f.bubble_fraction, rel_tol=1e-9, abs_tol=TOL)
        closed_ok &= math.isclose(f.bubble_fraction, closed, rel_tol=1e-9, abs_tol=TOL)
        first_le_s &= f.peak_activations[0] <= s
        bound_ok &= all(p <= s - d for d, p in enumerate(f.peak_activations))
        gpipe_all &= all(p == m for p in g.peak_activations)
        rows.append([s, m, 100 * g.bubble_fraction, 100 * f.bubble_fraction, 100 * closed,
                     g.peak_activations[0], f.peak_activations[0], f.peak_activations[-1]])
    rep.table(["S", "M", "bubble GPipe %", "bubble 1F1B %", "(S-1)/(M+S-1) %", "peak GPipe", "peak 1F1B s=0",
               "1F1B s=S-1"], rows, name="compare")
    rep.note("peak = activations of that many micro-batches held at once on the stage; 1F1B's stage s\n"
             "holds min(S - s, M), so only the first stage holds S (the notes' 'S per stage' is its bound)")
    rep.claim("GPipe and 1F1B: the same bubble fraction (every row)", same, True, kind=EXACT, setting=())
    rep.claim("that bubble is (S-1)/(M+S-1) (every row)", closed_ok, True, kind=ASSUMPTION, setting=())
    rep.claim("GPipe: every stage holds all M micro-batches, O(M)", gpipe_all, True, kind=EXACT, setting=())
    rep.claim("1F1B: the first stage holds at most S micro-batches", first_le_s, True, kind=EXACT, setting=())
    rep.line(f"  1F1B: stage s holds at most S - s (every row): {'yes' if bound_ok else 'NO'}")
    interleaved(rep, args, tf, tb, v)


def interleaved(rep: Report, args: argparse.Namespace, tf: float, tb: float, v: int) -> None:
    extra = (args.stages, args.micro_batches)
    configs = INTERLEAVED + ([extra] if extra not in INTERLEAVED and extra[1] % extra[0] == 0
                             and extra[0] * extra[1] * v <= 4096 else [])
    rep.line(f"  interleaved 1F1B (Megatron-LM), v = {v} model chunks per device, each 1/v of its layers:")
    rows, ratios, exact = [], {}, True
    for s, m in configs:
        f, i = run("1F1B", s, m, tf, tb), run("interleaved", s, m, tf, tb, virtual=v)
        ratios[(s, m)] = max(i.idle) / max(f.idle) if max(f.idle) > 0 else 1.0
        exact &= math.isclose(i.makespan, pp.makespan_closed_form(s, m, tf, tb, v), rel_tol=1e-9)
        rows.append([s, m, ms(max(f.idle)), ms(max(i.idle)), ratios[(s, m)], 100 * f.bubble_fraction,
                     100 * i.bubble_fraction, f.peak_activations[0], i.peak_activations[0]])
    rep.table(["S", "M", "1F1B bubble ms", "interleaved ms", "ratio", "1F1B %", "interleaved %",
               "peak 1F1B", "peak interl."], rows, name="interleaved")
    rep.line(f"  makespan = (M + (S-1)/v)(t_f+t_b) in every row: {'yes' if exact else 'NO'}")
    rep.note("the bubble time per device is divided by v; the share falls less, to (S-1)/(vM + S-1).\n"
             "Costs: v times as many sends between stages, more activations on the first device (in\n"
             "whole-stage micro-batches: chunks held / v), and M must be a multiple of S")
    rep.claim("interleaved bubble time / 1F1B's at S = 4, M = 8", ratios[(4, 8)], 0.5 if v == 2 else None,
              "", EXACT, places=2)


def part5_unbalanced(rep: Report, args: argparse.Namespace) -> None:
    s, m, tf, tb, f = args.stages, args.micro_batches, args.tf_ms / 1e3, args.tb_ms / 1e3, args.slow_factor
    slow = s // 2
    rep.part(5, f"unbalanced stages: stage {slow} of {s} is {f:g}× slower (1F1B, M = {m})")
    even = (s - 1 + f) / s   # the same total work spread evenly
    cases = {"balanced": (1.0,) * s, f"stage {slow} × {f:g}": tuple(f if d == slow else 1.0 for d in range(s)),
             "rebalanced": (even,) * s}
    rows, pace, runs = [], {}, []
    for name, scale in cases.items():
        # balanced: Part 1's arguments, so its run is reused (a tuple of equal times is the same pipeline)
        tfs, tbs = (tf, tb) if name == "balanced" else (tuple(tf * x for x in scale), tuple(tb * x for x in scale))
        sim = run("1F1B", s, m, tfs, tbs)
        runs.append(sim)
        # The pace once the pipeline is full (M >= S): what one more micro-batch adds, measured at M = S.
        pace[name] = run("1F1B", s, s + 1, tfs, tbs).makespan - run("1F1B", s, s, tfs, tbs).makespan
        per_stage = [(tf + tb) * x for x in scale]
        rows.append([name, ms(sim.makespan), ms(pace[name]), ms(max(per_stage)), ms(sum(per_stage) / s),
                     100 * sim.bubble_fraction, sim.makespan / (m * max(per_stage))])
    rep.table(["stages", "makespan ms", "pace ms", "slowest tf+tb", "mean tf+tb", "bubble %",
               "makespan/(M·slowest)"], rows, name="unbalanced")
    rep.note("pace = makespan(S+1) - makespan(S), simulated: what one more micro-batch costs once the\n"
             "pipeline is full (with one slow stage among equal ones, from M = S on; uneven stages in\n"
             "general take more micro-batches to settle to it). It is the slowest stage's t_f + t_b,\n"
             "not the mean's: the others wait for it. Rebalanced: the same total work cut evenly runs at\n"
             "the mean. The makespan is at least M × the slowest stage's time (last column ≥ 1).\n"
             "No p2p time in this part")
    rep.claim("pace = the slowest stage's t_f + t_b", math.isclose(pace[f"stage {slow} × {f:g}"], (tf + tb) * f,
              rel_tol=1e-9), True, kind=EXACT, setting=())
    plot_runs(rep, runs[:2], "unbalanced", f"S = {s} stages, M = {m} micro-batches, t_f = {ms(tf):g} ms, "
              f"t_b = {ms(tb):g} ms per balanced stage, no p2p", [f"1F1B, {name}" for name in cases])


def plot_runs(rep: Report, runs: list[pp.PipelineRun], name: str, setting: str,
              titles: list[str] | None = None) -> None:
    if rep.figure_dir() is None:
        return
    height = 1.2 + min(0.35 * runs[0].stages, 6.0)   # per schedule; many stages share the rows' height
    fig, axes = new_figure(len(runs), 1, figsize=(10, height * len(runs)), squeeze=False)
    for i, (ax, sim) in enumerate(zip(axes[:, 0], runs)):
        title = f"{titles[i]}: makespan {fmt_time(sim.makespan)}, bubble {100 * sim.bubble_fraction:.1f} %" if titles else ""
        pp.draw_gantt(ax, sim, title)
    fig.suptitle(setting)
    fig.tight_layout()
    rep.save_figure(fig, name)


if __name__ == "__main__":
    run_main(main)
