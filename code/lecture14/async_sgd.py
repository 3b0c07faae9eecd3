"""The sync-vs-async parameter-server sweep of 05_data_parallel.py Part 5 (lecture 14 §4.3), and
what it shows, read off the final losses: the script prints the table and makes the claims.

Columns: sync (each update averages K gradients at the current w), then async with τ-old
gradients for each τ. Rows: learning rates. A run "diverged" when it overflowed or ended above the
starting loss; it "converged" when it ended within CONVERGED × the optimum loss.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from common.output import ASSUMPTION, EXACT, Report
from lecture14.data_parallel import (
    LeastSquares,
    make_least_squares,
    parameter_server_curve,
    sequential_sgd,
    simulate_parameter_server,
)

CONVERGED = 1.5  # within 1.5× the optimum loss: the run has reached the noise floor's neighbourhood


@dataclass(frozen=True)
class Sweep:
    lrs: list[float]
    taus: list[int]
    finals: list[list[float]]  # [lr][column]: column 0 sync, then one per τ
    start: float
    optimum: float

    def diverged(self, value: float) -> bool:
        return not value <= self.start

    def converged(self, value: float) -> bool:
        return value <= CONVERGED * self.optimum

    def staler_worse(self, row: int) -> bool:
        """At lr row: every larger τ ends strictly higher (a diverged run counts as highest)."""
        values = self.finals[row][1:]
        return all(a < b or self.diverged(b) for a, b in zip(values, values[1:]))

    def first_diverging_lr(self, column: int) -> int:
        """Row of the smallest lr at which `column` diverges (len(lrs) if none)."""
        return next((i for i, f in enumerate(self.finals) if self.diverged(f[column])), len(self.lrs))


def gradient_staleness(workers: int, gradients: int, compute_times: list[float] | None = None) -> list[int]:
    """How many updates late each applied gradient is, asynchronous server with `workers` workers.

    An event simulation: every worker pulls the parameters (their version = updates so far),
    computes for its compute time, pushes; the server applies each gradient as it arrives (one
    update) and the worker pulls again at once. All start together at time 0. compute_times=None:
    equal-speed workers (ties go to the lower worker id, so they take turns round-robin); else
    worker i's time per gradient is compute_times[i]. Returns, in the order applied, each
    gradient's staleness: the server's version when it arrives minus the version it was computed on.
    """
    if workers < 1 or gradients < 0:
        raise ValueError(f"need workers >= 1 and gradients >= 0, got {workers}, {gradients}")
    times = compute_times or [1.0] * workers
    if len(times) != workers or min(times) <= 0:
        raise ValueError("compute_times needs one positive time per worker")
    version, stale = 0, []
    arrivals = [(times[i], i, 0) for i in range(workers)]  # (arrival time, worker, version pulled)
    heapq.heapify(arrivals)
    while len(stale) < gradients:
        now, worker, pulled = heapq.heappop(arrivals)
        stale.append(version - pulled)
        version += 1  # the server applies it at once; the worker pulls the new version
        heapq.heappush(arrivals, (now + times[worker], worker, version))
    return stale


def staleness_rows(ks: list[int], gradients: int, seed: int) -> list[list]:
    """Per K: steady-state (after the first K gradients) mean, min and max staleness with
    equal-speed workers, and the mean with random per-worker speeds (uniform 0.5 … 1.5 time units:
    the slow ones deliver less often, yet the steady-state mean stays K − 1, one update per
    gradient in flight elsewhere)."""
    rows = []
    for k in ks:
        even = gradient_staleness(k, gradients)[k:]
        rng = random.Random(seed)
        uneven = gradient_staleness(k, gradients, [rng.uniform(0.5, 1.5) for _ in range(k)])[k:]
        rows.append([k, k - 1, sum(even) / len(even), min(even), max(even), sum(uneven) / len(uneven)])
    return rows


def report_staleness(rep: Report, k: int, gradients: int, seed: int) -> None:
    """The notes' 'a gradient arrives about K − 1 updates late': a table over K and the claim at K = k."""
    rows = staleness_rows(sorted({1, 2, 4, 8, 16, k}), gradients, seed)
    rep.line(f"  how late a gradient arrives: K workers push to an asynchronous server, {gradients} gradients, "
             "counted after the first K (steady state)")
    rep.table(["K", "K − 1", "equal speeds: mean", "equal: min", "equal: max", "random speeds: mean"], rows,
              name="staleness")
    mean = next(r[2] for r in rows if r[0] == k)
    rep.claim(f"K = {k} equal-speed workers: mean staleness in steady state", mean, k - 1, "updates", EXACT,
              setting=(), ref="L14-4.3-staleness-k-minus-1",
              why=f"the notes' K − 1 at K = {k}: the workers take turns (round-robin), so each gradient arrives "
                  f"after the other {k - 1} workers' updates, every one exactly K − 1 late once all are busy")
    rep.note(f"random speeds: worker i takes a fixed time drawn from 0.5 … 1.5 (seed {seed}) per gradient; the "
             "mean stays near K − 1: while one gradient is computed, the other workers' updates land.")


def curve_panels(problem: LeastSquares, k: int, lrs: tuple[float, ...], taus: list[int]) -> list[dict]:
    """The figure's panels: per lr, the loss curve of sync and of async at each τ."""
    return [{"lr": lr, "curves": {("sync" if t is None else f"async τ = {t}"):
                                  parameter_server_curve(problem, k, lr, t) for t in [None, *taus]}}
            for lr in lrs]


def run_sweep(problem: LeastSquares, workers: int, lrs: list[float], taus: list[int]) -> Sweep:
    finals = [[simulate_parameter_server(problem, workers, lr, None)]
              + [simulate_parameter_server(problem, workers, lr, t) for t in taus] for lr in lrs]
    return Sweep(lrs, taus, finals, problem.loss(problem.a[0] * 0), problem.optimum_loss())


def longer_run_staler_worse(samples: int, dim: int, computations: int, batch: int, seed: int,
                            workers: int, lr: float, taus: list[int]) -> tuple[bool, list[float]]:
    """The same problem with `computations` gradients (more than the sweep's): at `lr`, do staler
    gradients now end strictly higher? Returns (answer, final losses by τ)."""
    problem = make_least_squares(samples, dim, computations, batch, seed)
    finals = [simulate_parameter_server(problem, workers, lr, t) for t in taus]
    return all(a < b for a, b in zip(finals, finals[1:])), finals


def seeds_where_staler_helps(samples: int, dim: int, computations: int, batch: int, seeds: range,
                             workers: int, lr: float, taus: list[int]) -> list[int]:
    """The seeds whose problem, at `lr`, ends strictly lower with every larger τ (the opposite of
    the notes' trend): whether that is one seed's accident or the regime's."""
    found = []
    for seed in seeds:
        problem = make_least_squares(samples, dim, computations, batch, seed)
        finals = [simulate_parameter_server(problem, workers, lr, t) for t in taus]
        if all(a > b for a, b in zip(finals, finals[1:])):
            found.append(seed)
    return found


def claim_findings(rep: Report, sw: Sweep, problem: LeastSquares, k: int, seed: int, setting: tuple[str, ...]) -> None:
    """The notes' statements on async SGD, each a claim read off the sweep `sw` of `problem`:
    τ = 0 is sequential SGD; τ = 0 beats sync (8× the updates); staler is worse; large lr diverges."""
    taus, curvature = sw.taus, problem.largest_curvature()
    samples, dim, batch = problem.a.shape[0], problem.a.shape[1], problem.rows.shape[1]
    tau0 = simulate_parameter_server(problem, k, sw.lrs[0], 0)
    rep.claim("async τ = 0 is sequential mini-batch SGD (same final loss, lr 0.01)", tau0 == sequential_sgd(
              problem, sw.lrs[0]), True, kind=EXACT, setting=(), ref="L14-4.3-tau0-sequential",
              why="the simulator with τ = 0 against a plain loop of one mini-batch gradient per update")
    rep.claim(f"async τ = 0: updates per sync update ({problem.computations} gradients)",
              problem.computations / (problem.computations // k), 8, "×", EXACT, setting=("ps_workers",),
              ref="L14-4.3-8x-updates", why=f"one update per gradient against one per {k} gradients: "
              f"{problem.computations} / {problem.computations // k}")
    first = sw.finals[0]
    rep.claim(f"lr {sw.lrs[0]:g}: async τ = 0 ({k}× the updates) ends below sync", first[1] < first[0], True,
              kind=ASSUMPTION, setting=setting, ref="L14-4.3-async-tau0-faster",
              why=f"τ = 0 {first[1]:.4g} vs sync {first[0]:.4g} after {problem.computations} gradients")
    beaten = [lr for lr, f in zip(sw.lrs, sw.finals) if not f[1] < f[0]]
    rep.claim("async τ = 0 ends below sync at every lr of the grid", not beaten, True, kind=ASSUMPTION,
              setting=setting, ref="L14-4.3-async-tau0-faster",
              why=f"from lr {beaten[0]:g} sync ends lower: a step on one mini-batch of {batch} carries noise "
                  f"that sync averages over {k}, and τ = 0's noise floor grows with lr; 'faster' holds "
                  "where progress is limited by the number of updates (small lr)" if beaten else
                  "τ = 0 ends lower at every lr")
    done = [i for i, f in enumerate(sw.finals) if sw.converged(f[1])]
    rep.claim(f"staler ends worse at every lr where τ = 0 converges (within {CONVERGED:g}× the optimum)",
              bool(done) and all(sw.staler_worse(i) for i in done), True, kind=ASSUMPTION, setting=setting,
              ref="L14-4.3-staleness-worse", why="lr " + ", ".join(f"{sw.lrs[i]:g}" for i in done)
              + ": the final loss rises with τ (or the run diverges)")
    smallest_ok = sw.staler_worse(0)
    longer = longer_run_staler_worse(samples, dim, 10 * problem.computations, batch, seed, k,
                                               sw.lrs[0], taus)
    seeds = range(seed, seed + 5)
    helps = seeds_where_staler_helps(samples, dim, problem.computations, batch, seeds, k, sw.lrs[0],
                                               taus)
    rep.claim(f"staler ends worse also at the smallest lr, {sw.lrs[0]:g}", smallest_ok, True, kind=ASSUMPTION,
              setting=setting, ref="L14-4.3-staleness-worse",
              why=f"at lr {sw.lrs[0]:g} no run has converged ({first[1] / sw.optimum:.1f}× the optimum after "
                  f"{problem.computations} gradients), and there a τ-old gradient, taken farther up the slope, acts "
                  "like a slightly larger step, which helps an unfinished run: the finals fall with τ. Not the seed "
                  f"(so do {len(helps)} of seeds {seeds.start}-{seeds.stop - 1}) nor a bug: with {10 * problem.computations} gradients staler ends worse "
                  f"here too ({'yes' if longer[0] else 'no'}: " + ", ".join(f"{v:.6g}" for v in longer[1]) + ")")
    rep.claim(f"with {10 * problem.computations} gradients, staler ends worse at lr {sw.lrs[0]:g}", longer[0], True,
              kind=ASSUMPTION, setting=setting, ref="L14-4.3-staleness-worse",
              why="final losses by τ " + ", ".join(f"{t}: {v:.6g}" for t, v in zip(taus, longer[1])))
    firsts = [sw.first_diverging_lr(c) for c in range(1, len(taus) + 1)]
    rep.claim("staler gradients diverge at a smaller or equal lr", all(a >= b for a, b in zip(firsts, firsts[1:])),
              True, kind=ASSUMPTION, setting=setting, ref="L14-4.3-diverges-large-lr",
              why="first diverging lr by τ: " + ", ".join(
                  f"{t}: {sw.lrs[i]:g}" if i < len(sw.lrs) else f"{t}: none" for t, i in zip(taus, firsts)))
    rep.claim(f"at the largest lr, {sw.lrs[-1]:g}, every async column diverges",
              all(sw.diverged(v) for v in sw.finals[-1][1:]), True, kind=ASSUMPTION, setting=setting,
              ref="L14-4.3-diverges-large-lr", why=f"lr·λmax = {sw.lrs[-1] * curvature:.3g}; sync, averaging {k} "
              f"mini-batches, {'diverges' if sw.diverged(sw.finals[-1][0]) else 'survives'}")
