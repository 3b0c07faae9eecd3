"""The sync-vs-async parameter-server sweep of 05_data_parallel.py Part 5 (lecture 14 §4.3), how late
a gradient lands on an asynchronous server, and what the sweep shows, read off the final losses as
named values: the script prints the tables and records the values its rows compare.

Columns: sync (each update averages K gradients at the current w), then async with τ-old
gradients for each τ. Rows: learning rates. A run "diverged" when it overflowed or ended above the
starting loss; it "converged" when it ended within CONVERGED × the optimum loss.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any

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


def findings(sw: Sweep, problem: LeastSquares, k: int, seed: int) -> dict[str, Any]:
    """What the notes say of async SGD (§4.3), read off the sweep `sw` of `problem` as named values
    (05_data_parallel.py records them; its rows compare them): τ = 0 is sequential SGD and beats sync
    (K× the updates); staler is worse; a large lr diverges."""
    first, computations = sw.finals[0], problem.computations
    samples, dim, batch = problem.a.shape[0], problem.a.shape[1], problem.rows.shape[1]
    beaten = [lr for lr, f in zip(sw.lrs, sw.finals) if not f[1] < f[0]]
    done = [i for i, f in enumerate(sw.finals) if sw.converged(f[1])]
    seeds = range(seed, seed + 5)  # is "staler helps at the smallest lr" one seed's accident?
    helps = seeds_where_staler_helps(samples, dim, computations, batch, seeds, k, sw.lrs[0], sw.taus)
    longer, longer_finals = longer_run_staler_worse(
        samples, dim, 10 * computations, batch, seed, k, sw.lrs[0], sw.taus
    )
    firsts = [sw.first_diverging_lr(c) for c in range(1, len(sw.taus) + 1)]
    return dict(
        tau0_is_sequential=simulate_parameter_server(problem, k, sw.lrs[0],
                                                     0) == sequential_sgd(problem, sw.lrs[0]),
        updates_ratio=computations / (computations // k), computations=computations, ps_workers=k,
        sync_updates=computations // k, tau0_final=first[1], sync_final=first[0],
        tau0_beats_sync=first[1] < first[0], tau0_beats_sync_everywhere=not beaten, ps_batch=batch,
        sync_wins_from=f"{beaten[0]:g}" if beaten else "no lr",
        converged_lrs=", ".join(f"{sw.lrs[i]:g}" for i in done) or "none",
        staler_worse_where_converged=bool(done) and all(sw.staler_worse(i) for i in done),
        staler_worse_smallest_lr=sw.staler_worse(0), smallest_over_optimum=first[1] / sw.optimum,
        helping_seeds=len(helps), seeds_text=f"{seeds.start}-{seeds.stop - 1}",
                longer_computations=10 * computations,
        longer_staler_worse=longer, longer_answer="yes" if longer else "no",
        longer_finals=", ".join(f"{v:.6g}" for v in longer_finals),
        longer_finals_by_tau=", ".join(f"{t}: {v:.6g}" for t, v in zip(sw.taus, longer_finals)),
        first_diverging=", ".join(f"{t}: {sw.lrs[i]:g}" if i < len(sw.lrs) else f"{t}: none"
                                  for t, i in zip(sw.taus, firsts)),
        staler_diverges_sooner=all(a >= b for a, b in zip(firsts, firsts[1:])),
        async_diverges_at_largest=all(sw.diverged(v) for v in sw.finals[-1][1:]),
        largest_lr_curvature=sw.lrs[-1] * problem.largest_curvature(),
        sync_at_largest="diverges" if sw.diverged(sw.finals[-1][0]) else "survives")
