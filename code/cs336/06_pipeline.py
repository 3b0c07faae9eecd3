"""CS336 lecture 8, pipeline parallelism (流水线并行 … stage 负载不均): GPipe and 1F1B simulated pass
by pass, the bubble tables, activation memory, interleaving and unbalanced stages. A model only.

    python code/cs336/06_pipeline.py
    python code/cs336/06_pipeline.py --pp 8 --micro-batches 32 --tb-ms 10 --p2p-ms 1

Part 1 simulates GPipe and 1F1B for --pp S and --micro-batches M (forward --tf-ms, backward
--tb-ms per stage and micro-batch, --p2p-ms per hop) and draws their timelines. Part 2 is the
notes' efficiency table M/(M + S - 1); Part 3 their bubble-time worked example, read two ways, and
the M a 5 % bubble needs; Part 4 compares GPipe with 1F1B (bubble, activations) and interleaved
1F1B (--virtual-stages v); Part 5 makes one stage --slow-factor times slower. The simulator is
cs336/pipeline.py.
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
import math

from common.cli import make_parser
from common.error_types import UsageError
from common.figures import new_figure
from common.flags import nonnegative_float, positive_float, positive_int, time_ms
from common.model_bounds import Bound
from common.output import Report
from common.script_end import run_main
from common.units import fmt_time, ms
from cs336 import pipeline as pp

NOTES_TF_MS, NOTES_TB_MS = 10.0, 20.0    # the worked example's t_f and t_b (the defaults)
EFFICIENCY = [(4, 4), (4, 8), (4, 16), (8, 8)]                      # the notes' η table, (S, M)
BUBBLE = [(4, 4), (4, 8), (4, 16), (4, 32), (8, 8), (8, 32)]        # their worked example, (S, M)
COMPARE = [(4, 4), (4, 8), (4, 16), (8, 8), (8, 32)]       # Part 4's (S, M)
INTERLEAVED = [(4, 8), (4, 16), (8, 16), (8, 32)]          # M a multiple of S, as Megatron needs
MOST_INTERLEAVED = max(s * m for s, m in INTERLEAVED)      # S·M of the largest: S·M·v passes
# What grows (common.model_bounds), measured here: the S·M passes Parts 1, 4 and 5 simulate (about
# 1.5 s of CPU at 2^16), and with --save-figs the passes drawn, each a bar (about 3 s at 4,096 on 128
# stages); Part 5 runs S + 1 micro-batches on S stages; Part 4's interleaved runs S·M·v passes.
MAX_PASSES = 2**16
MAX_DRAWN_PASSES = 2**12
MAX_STAGES = 128
BOUNDS = {
    "pp": Bound(MAX_STAGES, "Part 5 simulates S + 1 micro-batches on S stages, three pipelines"),
    "micro_batches": Bound(lambda a: (MAX_DRAWN_PASSES if a.save_figs else MAX_PASSES) // a.pp,
                           f"Parts 1, 4 and 5 simulate S·M passes, at most {MAX_PASSES:,} (about 20 µs "
                           f"each here), and --save-figs draws each, at most {MAX_DRAWN_PASSES:,} (about "
                           "0.3 ms each)", given=("pp",)),
    # Part 4 simulates S·M·v passes for each interleaved (S, M), up to S = 8, M = 32
    "virtual_stages": Bound(MAX_PASSES // MOST_INTERLEAVED,
                            f"Part 4 simulates S·M·v passes for S = 8, M = 32, at most {MAX_PASSES:,}"),
}
TOL = 1e-12
FIVE_PERCENT = 0.05 + TOL                # "within 5 %", float noise on the boundary counted in
# a cell's verdict beside our figure, in the tables that set ours beside the notes'

def main() -> None:
    parser = make_parser(__doc__, pp=4, micro_batches=8, figs=True,
                         context={"pp": "S, Parts 1, 4 and 5", "micro_batches": "M, Parts 1, 4 and 5"},
                         bounds=BOUNDS)
    parser.add_argument("--tf-ms", type=time_ms, default=NOTES_TF_MS,
                        help=f"forward time per stage and micro-batch, ms (default {NOTES_TF_MS:g})")
    parser.add_argument("--tb-ms", type=time_ms, default=NOTES_TB_MS,
                        help=f"backward time per stage and micro-batch, ms (default {NOTES_TB_MS:g})")
    parser.add_argument("--p2p-ms", type=nonnegative_float, default=0.0,
                        help="send time between stages in Part 1, ms (default 0, as the notes)")
    parser.add_argument("--virtual-stages", type=positive_int, default=2,
                        help="model chunks per device for interleaved 1F1B in Part 4 (default 2)")
    parser.add_argument("--slow-factor", type=positive_float, default=2.0,
                        help="how many times slower Part 5's slow stage is (default 2)")
    args = parser.parse_args()
    check_args(args)
    rep = Report(__file__, "pipeline parallelism: schedules, bubbles, activations", args)
    rep.part(1, f"GPipe and 1F1B: S = {args.pp}, M = {args.micro_batches}, t_f = {args.tf_ms:g} ms, "
                f"t_b = {args.tb_ms:g} ms, p2p = {args.p2p_ms:g} ms")
    part1_schedules(rep, args)       # GPipe and 1F1B, pass by pass: makespan, bubble, activations
    rep.part(2, "pipeline efficiency η = M/(M + S - 1)")
    part2_efficiency(rep, args)      # the notes' table M/(M + S - 1), simulated and closed form
    rep.part(3, f"the notes' bubble table, t_f = {args.tf_ms:g} ms, t_b = {args.tb_ms:g} ms: their formula "
                "and a real schedule")
    part3_bubble_time(rep, args)     # the worked example read two ways; the M a 5 % bubble needs
    rep.part(4, "GPipe vs 1F1B: bubble and activation memory; interleaved 1F1B")
    part4_gpipe_vs_1f1b(rep, args)   # same bubble, O(M) vs O(S) activations; interleaved 1F1B
    rep.part(5, f"unbalanced stages: stage {args.pp // 2} of {args.pp} is {args.slow_factor:g}× slower "
                f"(1F1B, M = {args.micro_batches})")
    part5_unbalanced(rep, args)      # the slowest stage sets the pace
    rep.finish()


def check_args(args: argparse.Namespace) -> None:
    """What the flags' types do not say (their sizes are BOUNDS'), refused before any work."""
    if args.virtual_stages < 2:
        raise UsageError("--virtual-stages must be >= 2 (v = 1 is plain 1F1B)")
    if args.slow_factor < 1:
        raise UsageError("--slow-factor must be >= 1 (it makes one stage slower)")


@functools.lru_cache(maxsize=None)
def run(schedule: str, s: int, m: int, tf: float | tuple[float, ...], tb: float | tuple[float, ...],
        p2p: float = 0.0, virtual: int = 2) -> pp.PipelineRun:
    """pp.run_schedule, each distinct run simulated once (parts share the notes' configurations)."""
    return pp.run_schedule(schedule, s, m, tf, tb, p2p, virtual)


def part1_schedules(rep: Report, args: argparse.Namespace) -> None:
    s, m, tf, tb, p2p = args.pp, args.micro_batches, args.tf_ms / 1e3, args.tb_ms / 1e3, args.p2p_ms / 1e3
    rep.note("each stage runs its passes in the schedule's order as soon as their inputs are there: F(m) "
             "on s after F(m) on s-1, B(m) after B(m) on s+1 and F(m) (+ p2p a hop); GPipe: all forwards, "
             "then all backwards; 1F1B: S-s-1 warm-up forwards, then one forward, one backward, ...")
    runs = {name: run(name, s, m, tf, tb, p2p) for name in ("GPipe", "1F1B")}
    closed = pp.bubble_fraction_closed_form(s, m)
    hows = [pp.ascii_chart(sim)[1] for sim in runs.values()]
    for (name, sim), how in zip(runs.items(), hows):
        rep.line(f"  {name}: makespan {fmt_time(sim.makespan)}, bubble {100 * sim.bubble_fraction:.2f} % of "
                 f"S × makespan (closed form {100 * closed:.2f} %{'; it leaves p2p out' if p2p else ''})")
        for row in pp.ascii_chart(sim)[0]:
            rep.line("  " + row)
        if how != hows[-1] or name == "1F1B":     # how to read a chart: once if both read alike
            rep.note(how)
    stage_table(rep, runs, s)
    if p2p and s > 1:
        extra = {name: ms(sim.makespan - pp.makespan_closed_form(s, m, tf, tb)) for name, sim in runs.items()}
        rep.note(f"p2p time adds {extra['GPipe']:g} ms to GPipe (2(S-1)·p2p = {ms(2 * (s - 1) * p2p):g} ms: "
                 f"it waits in the fill and the\ndrain only) and {extra['1F1B']:g} ms to 1F1B: its "
                 "alternation makes stages wait for a gradient's\nround trip in the steady phase too")
    for name, sim in runs.items():
        rep.value(name, {"makespan_ms": ms(sim.makespan), "bubble_fraction": sim.bubble_fraction,
                          "peak_activations": sim.peak_activations}, compared=False)
    plot_runs(rep, list(runs.values()), "schedules",
              f"S = {s} stages, M = {m} micro-batches, t_f = {ms(tf):g} ms, t_b = {ms(tb):g} ms, p2p = "
              f"{ms(p2p):g} ms")


def stage_table(rep: Report, runs: dict, s: int) -> None:
    """Part 1's table: each stage's busy and idle time and peak activations, GPipe beside 1F1B."""
    shown = list(range(s)) if s <= 16 else list(range(4)) + list(range(s - 4, s))
    gpipe, one_f_one_b = runs["GPipe"], runs["1F1B"]
    rep.table(["stage", "busy ms", "idle ms GPipe", "idle ms 1F1B", "activations GPipe", "activations 1F1B",
               "S - s"],
              [[str(d), ms(gpipe.busy[d]), ms(gpipe.idle[d]), ms(one_f_one_b.idle[d]),
                gpipe.peak_activations[d], one_f_one_b.peak_activations[d], s - d] for d in shown],
              name="stages")
    if len(shown) < s:
        rep.note(f"{len(shown)} of {s} stages shown (the first and last four)")
    rep.note("activations: the most micro-batches whose forward has ended and backward has not")


def part2_efficiency(rep: Report, args: argparse.Namespace) -> None:
    tf = args.tf_ms / 1e3
    rows, eta = [], {}
    for S, M in EFFICIENCY:
        sims = [run(name, S, M, tf, k * tf).efficiency for k in (1, 2) for name in ("GPipe", "1F1B")]
        eta[(S, M)] = 100 * sims[3]
        rows.append([S, M, f"{M}/{M + S - 1}", 100 * M / (M + S - 1)] + [100 * e for e in sims[:3]]
                    + [rep.marked(100 * sims[3], f"CS-eta-S{S}-M{M}", {f"eta_S{S}_M{M}": eta[(S, M)]}),
                       rep.notes_text(f"CS-eta-S{S}-M{M}")])
    rep.table(["S", "M", "fraction", "η closed %", "GPipe tb=tf", "1F1B tb=tf", "GPipe tb=2tf", "1F1B tb=2tf",
               "the notes' η"], rows, name="efficiency")
    rep.marks_legend()
    rep.note(f"η = busy share of S × makespan, simulated at t_f = {args.tf_ms:g} ms; the closed form assumes "
             "equal "
             "stages and no time outside the passes (p2p, launches, optimizer step): then it holds for "
             "GPipe and 1F1B and any t_b/t_f")
    for (S, M), e in eta.items():
        rep.value(f"eta_S{S}_M{M}", e)
    rises = eta[(4, 4)] < eta[(4, 8)] < eta[(4, 16)] and eta[(8, 8)] < eta[(4, 8)]
    trend = rep.marked("yes" if rises else "no", "CS-pp-microbatch", {"eta_rises_with_m_falls_with_s": rises})
    rep.line(f"  η rises with M and falls with S: {trend}")
    rep.value("eta_rises_with_m_falls_with_s", rises)
    rep.compare_with_notes(in_table=True)


def part3_bubble_time(rep: Report, args: argparse.Namespace) -> None:
    tf, tb = args.tf_ms / 1e3, args.tb_ms / 1e3
    rows = []
    for S, M in BUBBLE:
        sim, ids = run("1F1B", S, M, tf, tb), f"CS-bubble-S{S}-M{M}"
        fill, work, share = (S - 1) * tf, M * (tf + tb), 100 * pp.notes_bubble_share(S, M, tf, tb)
        real_bubble = max(sim.idle)   # the same on every stage when stages are equal
        values = {f"work_S{S}_M{M}_ms": ms(work), f"fill_S{S}_M{M}_ms": ms(fill),
                  f"notes_share_S{S}_M{M}_pct": share, f"bubble_S{S}_M{M}_ms": ms(real_bubble),
                  f"share_S{S}_M{M}_pct": 100 * sim.bubble_fraction}
        for name, value in values.items():
            rep.value(name, value)
        rows.append([f"S={S}, M={M}", rep.notes_text(f"{ids}-notes-bubble"),
                     rep.marked(ms(fill), f"{ids}-notes-bubble", values),
                     rep.marked(ms(real_bubble), f"{ids}-bubble", values),
                     rep.notes_text(f"{ids}-work"), rep.marked(ms(work), f"{ids}-work", values),
                     rep.notes_text(f"{ids}-share"), rep.marked(share, f"{ids}-notes-share", values),
                     rep.marked(100 * sim.bubble_fraction, f"{ids}-share", values)])
    rep.table(["configuration", "notes' bubble", "by formula", "simulated", "notes' compute", "our compute",
               "notes' share", "share by formula", "share simulated"], rows, name="bubble")
    rep.marks_legend()
    rep.note("ms and %; compute = M(t_f+t_b). Their formula: bubble = (S-1)·t_f, share = bubble/(compute "
             "+ bubble). A real schedule (GPipe or 1F1B: Part 4) idles (S-1)·(t_f+t_b) a stage, as their "
             "own η table says: η = 57 % at S = 4, M = 4 is a 43 % bubble, not 20 %")
    shortcut = all(math.isclose(pp.notes_bubble_share(s, m, tf, tb), (s - 1) / (3 * m + s - 1), rel_tol=1e-9)
                   for s, m in BUBBLE)
    said = rep.marked("yes" if shortcut else "no", "CS-bubble-shortcut", {"shortcut_is_formula": shortcut})
    rep.line(f"  their shortcut (S-1)/(3M+S-1) = their formula at every row: {said}"
             + ("" if math.isclose(tb, 2 * tf, rel_tol=TOL) else " (it assumes t_b = 2 t_f)"))
    rep.value("shortcut_is_formula", shortcut)
    rep.compare_with_notes(in_table=True)
    five_percent(rep, args)


def five_percent(rep: Report, args: argparse.Namespace) -> None:
    """The smallest M for a bubble within 5 %: of the step (the notes' definition) by their formula
    and by a real schedule, and of the ideal time (Narayanan et al.'s bubble fraction)."""
    tf, tb = args.tf_ms / 1e3, args.tb_ms / 1e3
    rows = []
    for S in (2, 4, 8, 16):
        by_notes = pp.smallest_micro_batches(S, FIVE_PERCENT,
                                             lambda m, S=S: pp.notes_bubble_share(S, m, tf, tb))
        by_real = pp.smallest_micro_batches(S, FIVE_PERCENT,
                                            lambda m, S=S: pp.bubble_fraction_closed_form(S, m))
        # Narayanan et al.: bubble time over the ideal time M(t_f + t_b), a real schedule's and the
        # notes' fill's.
        by_ideal = pp.smallest_micro_batches(S, FIVE_PERCENT, lambda m, S=S: (S - 1) / m)
        by_ideal_fill = pp.smallest_micro_batches(S, FIVE_PERCENT,
                                                  lambda m, S=S: (S - 1) * tf / (m * (tf + tb)))
        # The real schedule simulated at that M and one below: the closed form's answer checked pass by pass.
        at, below = (run("1F1B", S, k, tf, tb).bubble_fraction if k else 1.0 for k in (by_real, by_real - 1))
        sim_ok = at <= FIVE_PERCENT and (by_real == 1 or below > FIVE_PERCENT)
        below_pct = 100 * pp.notes_bubble_share(S, by_notes - 1, tf, tb) if by_notes > 1 else float("nan")
        values = {f"min_m_notes_S{S}": by_notes, f"min_m_notes_below_S{S}": by_notes - 1,
                  f"min_m_notes_below_pct_S{S}": below_pct, f"min_m_real_S{S}": by_real,
                  f"min_m_ideal_S{S}": by_ideal, f"min_m_ideal_fill_S{S}": by_ideal_fill}
        ids = f"CS-five-pct-S{S}"
        if S in (4, 8):
            for name, value in values.items():
                rep.value(name, value)
        notes = S in (4, 8)
        rows.append([S, rep.notes_text(f"{ids}-real") if notes else "-",
                     rep.marked(by_notes, f"{ids}-notes", values) if notes else str(by_notes),
                     f"{below_pct:.3g}",
                     rep.marked(by_real, f"{ids}-real", values) if notes else str(by_real),
                     "yes" if sim_ok else "NO", by_ideal, by_ideal_fill])
    rep.line("\n  the smallest M with a bubble ≤ 5 %:")
    rep.table(["S", "notes' M", "by formula", "M-1 by formula %", "simulated", "checked", "over ideal",
               "fill over ideal"], rows, name="five_percent")
    rep.note("bubble over the step (the notes' measure) by their formula (M-1: its share one below) and "
             "by a real schedule ((S-1)/(M+S-1) ≤ 5 % ⇔ M ≥ 19(S-1); checked: M and M-1 simulated fall "
             "either side of 5 %); over the ideal time M(t_f+t_b) (Narayanan et al.): (S-1)/M, the "
             "notes' fill (S-1)/(3M)")
    rep.compare_with_notes(in_table=True)


def part4_gpipe_vs_1f1b(rep: Report, args: argparse.Namespace) -> None:
    tf, tb, v = args.tf_ms / 1e3, args.tb_ms / 1e3, args.virtual_stages
    configs = COMPARE + ([(args.pp, args.micro_batches)] if (args.pp, args.micro_batches) not in COMPARE
                         and args.pp * args.micro_batches <= 4096 else [])
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
    rep.table(["S", "M", "bubble GPipe %", "bubble 1F1B %", "(S-1)/(M+S-1) %", "peak GPipe", "peak 1F1B",
               "1F1B last stage"], rows, name="compare")
    rep.note("peak: the most micro-batches' activations held at once on the first stage; 1F1B's stage s\n"
             "holds min(S - s, M), so only the first stage holds S (the notes' 'S per stage' is its bound)")
    rep.value("gpipe_1f1b_same_bubble", same)
    rep.value("bubble_is_closed_form", closed_ok)
    rep.value("gpipe_holds_all_m", gpipe_all)
    rep.value("first_stage_at_most_s", first_le_s)
    rep.line(f"  1F1B: stage s holds at most S - s (every row): {'yes' if bound_ok else 'NO'}")
    interleaved(rep, args, tf, tb, v)


def interleaved(rep: Report, args: argparse.Namespace, tf: float, tb: float, v: int) -> None:
    extra = (args.pp, args.micro_batches)
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
               "peak 1F1B", "peak interleaved"], rows, name="interleaved")
    rep.line(f"  makespan = (M + (S-1)/v)(t_f+t_b) in every row: {'yes' if exact else 'NO'}")
    rep.note("the bubble time per device is divided by v, the share less: (S-1)/(vM + S-1). Costs: v "
             "times the sends, more activations on the first device (chunks held / v), M a multiple of S")
    rep.value("interleaved_ratio", ratios[(4, 8)])
    rep.compare_with_notes()   # GPipe's O(M), 1F1B's S, equal bubbles, the halved bubble: not in the tables


def part5_unbalanced(rep: Report, args: argparse.Namespace) -> None:
    s, m, tf, tb, f = args.pp, args.micro_batches, args.tf_ms / 1e3, args.tb_ms / 1e3, args.slow_factor
    slow = s // 2
    even = (s - 1 + f) / s   # the same total work spread evenly
    cases = {"balanced": (1.0,) * s,
             f"stage {slow} × {f:g}": tuple(f if d == slow else 1.0 for d in range(s)),
             "rebalanced": (even,) * s}
    rows, pace, runs = [], {}, []
    for name, scale in cases.items():
        # balanced: Part 1's arguments, so its run is reused (a tuple of equal times is the same pipeline)
        tfs, tbs = ((tf, tb) if name == "balanced"
                    else (tuple(tf * x for x in scale), tuple(tb * x for x in scale)))
        sim = run("1F1B", s, m, tfs, tbs)
        runs.append(sim)
        # The pace once the pipeline is full (M >= S): what one more micro-batch adds, measured at M = S.
        pace[name] = run("1F1B", s, s + 1, tfs, tbs).makespan - run("1F1B", s, s, tfs, tbs).makespan
        per_stage = [(tf + tb) * x for x in scale]
        rows.append([name, ms(sim.makespan), ms(pace[name]), ms(max(per_stage)), ms(sum(per_stage) / s),
                     100 * sim.bubble_fraction, sim.makespan / (m * max(per_stage))])
    rep.table(["stages", "makespan ms", "pace ms", "slowest tf+tb", "mean tf+tb", "bubble %",
               "makespan/(M·slowest)"], rows, name="unbalanced")
    rep.note("pace = makespan(S+1) - makespan(S), simulated: one more micro-batch's cost in a full "
             "pipeline (one slow stage settles to it from M = S). It is the slowest stage's t_f + t_b, not "
             "the mean's: the others wait for it; rebalanced, the same work runs at the mean. The makespan "
             "is at least M × the slowest stage's time (last column ≥ 1). No p2p time here")
    rep.value("pace_is_slowest", math.isclose(pace[f"stage {slow} × {f:g}"], (tf + tb) * f, rel_tol=1e-9))
    plot_runs(rep, runs[:2], "unbalanced", f"S = {s} stages, M = {m} micro-batches, t_f = {ms(tf):g} ms, "
              f"t_b = {ms(tb):g} ms per balanced stage, no p2p", [f"1F1B, {name}" for name in cases])


def plot_runs(rep: Report, runs: list[pp.PipelineRun], name: str, setting: str,
              titles: list[str] | None = None) -> None:
    if rep.figure_dir() is None:
        return
    height = 1.2 + min(0.35 * runs[0].stages, 6.0)   # per schedule; many stages share the rows' height
    fig, axes = new_figure(len(runs), 1, figsize=(10, height * len(runs)), squeeze=False)
    for i, (ax, sim) in enumerate(zip(axes[:, 0], runs)):
        title = (f"{titles[i]}: makespan {fmt_time(sim.makespan)}, bubble {100 * sim.bubble_fraction:.1f} %"
                 if titles else "")
        pp.draw_gantt(ax, sim, title)
    fig.suptitle(setting)
    fig.tight_layout()
    rep.save_figure(fig, name)


if __name__ == "__main__":
    run_main(main)
