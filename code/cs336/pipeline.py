"""Pipeline-parallel schedules, simulated event by event: GPipe, 1F1B and interleaved 1F1B.

A pure model (no torch, no processes). A schedule is, for every device, the ORDER in which it runs
its forward (F) and backward (B) passes; `simulate` then starts each pass as early as its device and
its dependencies allow:

    F of micro-batch m on virtual stage j   needs F of m on j - 1 (its input activation)
    B of micro-batch m on virtual stage j   needs B of m on j + 1 (its output gradient),
                                            and F of m on j (its own saved activation)

plus `p2p_s` seconds whenever the tensor crosses to another device. A device runs one pass at a
time and never reorders its list, the way Megatron-LM's and PipeDream's schedules run. Virtual
stage j lives on device j mod S; plain schedules have one virtual stage per device (v = 1), the
interleaved one has v per device, each 1/v of that device's layers (so 1/v of its time).

Closed forms (balanced stages, t_f and t_b the same for every micro-batch, p2p = 0):
    GPipe, 1F1B     makespan = (M + S - 1)(t_f + t_b),  bubble = (S - 1)/(M + S - 1)
    interleaved     makespan = (M + (S - 1)/v)(t_f + t_b)          (Narayanan et al., 2021)
The simulation is O(number of passes): each pass is looked at a bounded number of times.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from common.timeline import Span, ascii_rows, gantt_row, gantt_text, sampled, shaded

FORWARD, BACKWARD = "F", "B"
# One pass in a device's order: (kind, micro-batch, virtual stage).
Op = tuple[str, int, int]


@dataclass
class PipelineRun:
    """A simulated schedule: its passes and what they add up to."""

    name: str
    stages: int                # devices S
    micro_batches: int         # M
    virtual: int               # v: model chunks per device (1 unless interleaved)
    # Per device: its passes in the order they ran, (kind, micro, vstage), and their start and end
    # times (parallel lists: cheap to build by the hundred thousand; `events()` joins them).
    orders: list[list[Op]]
    starts: list[list[float]]
    ends: list[list[float]]
    makespan: float
    busy: list[float]          # seconds each device computed
    peak_activations: list[float] = field(default_factory=list)  # in whole-stage micro-batches

    @property
    def idle(self) -> list[float]:
        return [self.makespan - b for b in self.busy]

    @property
    def bubble_fraction(self) -> float:
        """Idle share of S × makespan (device-seconds not spent computing)."""
        return 1.0 - sum(self.busy) / (self.stages * self.makespan) if self.makespan > 0 else 0.0

    @property
    def efficiency(self) -> float:
        return 1.0 - self.bubble_fraction

    def spans(self, device: int) -> list[Span]:
        """The passes `device` ran, in order, as timeline spans (index: micro-batch; chunk: virtual stage)."""
        return [Span(device, kind, start, end, micro, "", vstage) for (kind, micro, vstage), start, end
                in zip(self.orders[device], self.starts[device], self.ends[device])]

    def events(self) -> Iterator[Span]:
        for device in range(self.stages):
            yield from self.spans(device)


# ---- schedules: each device's order of passes --------------------------------------------------

def gpipe_order(stages: int, micro_batches: int) -> list[list[Op]]:
    """GPipe: every forward, then every backward (the naive flush schedule: activations of all M
    micro-batches are alive at once on every stage)."""
    _check(stages, micro_batches)
    return [[(FORWARD, m, s) for m in range(micro_batches)] + [(BACKWARD, m, s) for m in range(micro_batches)]
            for s in range(stages)]


def one_f_one_b_order(stages: int, micro_batches: int) -> list[list[Op]]:
    """1F1B (PipeDream-flush, Megatron's non-interleaved schedule): stage s runs S - s - 1 warm-up
    forwards, then alternates one forward and one backward, then drains the remaining backwards."""
    _check(stages, micro_batches)
    orders = []
    for s in range(stages):
        warmup = min(stages - s - 1, micro_batches)
        order: list[Op] = [(FORWARD, m, s) for m in range(warmup)]
        for i in range(micro_batches - warmup):       # steady state: F of warmup + i, then B of i
            order += [(FORWARD, warmup + i, s), (BACKWARD, i, s)]
        order += [(BACKWARD, m, s) for m in range(micro_batches - warmup, micro_batches)]
        orders.append(order)
    return orders


def interleaved_order(stages: int, micro_batches: int, virtual: int) -> list[list[Op]]:
    """Megatron-LM's interleaved 1F1B: device d holds chunks d, d + S, …, d + (v-1)S of the layers.
    Forwards go round the chunks S micro-batches at a time; warm-up is 2(S - d - 1) + (v - 1)S
    chunk-forwards. Megatron needs M to be a multiple of S for this order; so do we."""
    _check(stages, micro_batches)
    if virtual < 1:
        raise ValueError("virtual stages per device must be >= 1")
    if micro_batches % stages:
        raise ValueError(f"interleaved 1F1B needs M a multiple of S (M = {micro_batches}, S = {stages})")
    total = micro_batches * virtual
    group = stages * virtual

    def op(k: int, kind: str, device: int) -> Op:
        chunk = (k % group) // stages
        if kind == BACKWARD:
            chunk = virtual - 1 - chunk
        micro = (k // group) * stages + k % stages
        return (kind, micro, chunk * stages + device)

    orders = []
    for d in range(stages):
        # M = S: Megatron runs every forward first (no steady phase), and so do we.
        if virtual > 1 and micro_batches == stages:
            warmup = total
        else:
            warmup = (stages - d - 1) * 2 + (virtual - 1) * stages
        warmup = min(warmup, total)
        order = [op(k, FORWARD, d) for k in range(warmup)]
        for i in range(total - warmup):
            order += [op(warmup + i, FORWARD, d), op(i, BACKWARD, d)]
        order += [op(k, BACKWARD, d) for k in range(total - warmup, total)]
        orders.append(order)
    return orders


# ---- the simulator -------------------------------------------------------------------------------

def simulate(orders: Sequence[Sequence[Op]], micro_batches: int, t_f: float | Sequence[float],
             t_b: float | Sequence[float], p2p_s: float = 0.0, virtual: int = 1,
             name: str = "") -> PipelineRun:
    """Run each device's order as early as dependencies allow; t_f, t_b: seconds per micro-batch
    for a whole device's layers (one number, or one per device). Raises ValueError on an order
    that deadlocks or leaves a pass out."""
    stages = len(orders)
    tf, tb = _per_stage(t_f, stages, "t_f"), _per_stage(t_b, stages, "t_b")
    if p2p_s < 0:
        raise ValueError("p2p time must be >= 0")
    starts, ends, free, ptr, complete = _run_passes(orders, micro_batches, tf, tb, p2p_s, virtual)
    stuck = [d for d in range(stages) if ptr[d] < len(orders[d])]
    if stuck:
        waits = orders[stuck[0]][ptr[stuck[0]]]
        raise ValueError(f"schedule deadlocks: device {stuck[0]} waits forever at {waits}")
    if not complete:
        raise ValueError("schedule leaves a forward or backward pass out")
    busy, peak = [], []
    for d in range(stages):
        forwards, most_held = _count_and_peak(orders[d])
        busy.append((forwards * tf[d] + (len(orders[d]) - forwards) * tb[d]) / virtual)
        peak.append(most_held / virtual)
    return PipelineRun(name, stages, micro_batches, virtual, list(orders), starts, ends, max(free), busy,
                       peak)


Times = list[list[float]]


def _run_passes(orders: Sequence[Sequence[Op]], micro_batches: int, tf: list[float], tb: list[float],
                p2p_s: float, virtual: int) -> tuple[Times, Times, list[float], list[int], bool]:
    """Each device's passes run as early as they can: (starts, ends, when each device is free, how
    far each got, whether every pass of every virtual stage ran). A device runs until a pass waits
    on another device; the neighbours it may have unblocked are looked at next.

    The hot loop (up to ~10^5 passes): plain locals, no calls but list appends, kept whole (67 lines)
    because a call per pass, or per device woken, costs more than the pass itself (a method per
    device woken measured 1.2-1.35x slower)."""
    stages = len(orders)
    n_v = stages * virtual
    f_end: list[float | None] = [None] * (n_v * micro_batches)   # index vstage * M + micro
    b_end: list[float | None] = [None] * (n_v * micro_batches)
    free = [0.0] * stages
    ptr = [0] * stages
    starts: list[list[float]] = [[] for _ in range(stages)]
    ends: list[list[float]] = [[] for _ in range(stages)]
    last_v = n_v - 1
    ready = deque(range(stages))
    while ready:
        d = ready.popleft()
        order, n_ops, p = orders[d], len(orders[d]), ptr[d]
        if p >= n_ops:
            continue
        dur_f, dur_b, t, st, en = tf[d] / virtual, tb[d] / virtual, free[d], starts[d], ends[d]
        woke_up = woke_down = False
        while p < n_ops:
            kind, m, j = order[p]
            if kind == FORWARD:
                if j:
                    dep = f_end[(j - 1) * micro_batches + m]
                    if dep is None:
                        break
                    if (j - 1) % stages != d:
                        dep += p2p_s
                    if dep > t:
                        t = dep
                st.append(t)
                t += dur_f
                f_end[j * micro_batches + m] = t
                woke_up = woke_up or j < last_v
            else:
                own = f_end[j * micro_batches + m]
                if own is None:
                    break
                if j < last_v:
                    dep = b_end[(j + 1) * micro_batches + m]
                    if dep is None:
                        break
                    if (j + 1) % stages != d:
                        dep += p2p_s
                else:
                    dep = own
                if own > dep:
                    dep = own
                if dep > t:
                    t = dep
                st.append(t)
                t += dur_b
                b_end[j * micro_batches + m] = t
                woke_down = woke_down or j > 0
            en.append(t)
            p += 1
        ptr[d], free[d] = p, t
        # Wake the neighbours this device may have unblocked (a plain ring order: d ± 1 mod S).
        if woke_up and stages > 1:
            ready.append((d + 1) % stages)
        if woke_down and stages > 1:
            ready.append((d - 1) % stages)
    return starts, ends, free, ptr, None not in f_end and None not in b_end


def _count_and_peak(order: Sequence[Op]) -> tuple[int, int]:
    """Forwards in a device's order, and the most (micro-batch, chunk) activations it holds at once:
    a forward's output is kept from its end until its backward ends. Depends on the order only."""
    held = peak = forwards = 0
    for kind, _, _ in order:
        if kind == FORWARD:
            forwards += 1
            held += 1
            if held > peak:
                peak = held
        else:
            held -= 1
    return forwards, peak


def run_schedule(schedule: str, stages: int, micro_batches: int, t_f: float | Sequence[float],
                 t_b: float | Sequence[float], p2p_s: float = 0.0, virtual: int = 2) -> PipelineRun:
    """One of SCHEDULES, simulated."""
    if schedule == "GPipe":
        return simulate(gpipe_order(stages, micro_batches), micro_batches, t_f, t_b, p2p_s, 1, schedule)
    if schedule == "1F1B":
        return simulate(one_f_one_b_order(stages, micro_batches), micro_batches, t_f, t_b, p2p_s, 1, schedule)
    if schedule == "interleaved":
        return simulate(interleaved_order(stages, micro_batches, virtual), micro_batches, t_f, t_b, p2p_s,
                        virtual, f"interleaved 1F1B, v = {virtual}")
    raise ValueError(f"unknown schedule {schedule!r}; one of {SCHEDULES}")


SCHEDULES = ("GPipe", "1F1B", "interleaved")


# ---- an ASCII chart of the timelines ---------------------------------------------------------

BACKWARD_LETTERS = "abcdefghij"  # backward of micro-batch m: BACKWARD_LETTERS[m % 10]


def ascii_chart(run: PipelineRun, max_columns: int = 84, max_rows: int = 16) -> tuple[list[str], str]:
    """One row per device, one character per time step.

    At full detail (every pass at least one column wide) a column shows the pass running at its
    middle: a forward shows its micro-batch's last digit, a backward the matching letter (a = 0,
    b = 1, …); '.' is idle. When that would be wider than max_columns the chart is scaled to
    max_columns and a column shows how busy the device was in it: '#' ≥ 90 %, '+' ≥ 50 %,
    '-' some, '.' idle. More than max_rows devices: the first and last max_rows/2 rows.
    Returns the rows and how to read them (lines joined by newlines).
    """
    step, detailed = _chart_step(run, max_columns)
    columns = max(1, round(run.makespan / step))
    cells = sampled(columns, step, _pass_char) if detailed else shaded(columns, step)
    width = len(str(run.stages - 1))
    shown = list(range(run.stages))
    if run.stages > max_rows:
        shown = shown[: max_rows // 2] + [-1] + shown[-(max_rows // 2):]
    rows = [" " * (7 + width) + f"… {run.stages - max_rows // 2 * 2} more stages" if d < 0 else
            ascii_rows([(f"stage {d:>{width}}", run.spans(d))], cells)[0] for d in shown]
    scale, legend = chart_key(run, max_columns)
    how = f"{scale}; {legend}"
    if len(shown) < run.stages:
        how += f"\n{max_rows} of {run.stages} stages shown"
    return rows, how


def chart_key(run: PipelineRun, max_columns: int = 84) -> tuple[str, str]:
    """The two halves of `run`'s chart legend: its scale (one column's time) and how to read a cell.
    A page of several charts prints each one's scale and the reading once (08_pipeline_schedules)."""
    step, detailed = _chart_step(run, max_columns)
    if detailed:
        return (f"one column = {step * 1e3:.3g} ms", "digit m = forward of micro-batch m, letter = its "
                "backward (a = 0, b = 1, …; both mod 10); '.' = idle")
    return (f"scaled: one column = {step * 1e3:.3g} ms, longer than a pass",
            "a column shows how busy the stage was in it: '#' ≥ 90 %, '+' ≥ 50 %, '-' less, '.' idle")


def _chart_step(run: PipelineRun, max_columns: int) -> tuple[float, bool]:
    """A column's time, and whether it is full detail (half the shortest pass, or the whole, fits)."""
    shortest = min((e - s for st, en in zip(run.starts, run.ends) for s, e in zip(st, en) if e > s),
                   default=run.makespan or 1.0)
    for step in (shortest / 2, shortest):
        if run.makespan / step <= max_columns + 1e-9:
            return step, True
    return (run.makespan / max_columns if run.makespan > 0 else 1.0), False


def _pass_char(span: Span) -> str:
    return str(span.index % 10) if span.kind == FORWARD else BACKWARD_LETTERS[span.index % 10]


# ---- closed forms ---------------------------------------------------------------------------------

def bubble_fraction_closed_form(stages: int, micro_batches: int) -> float:
    """(S - 1)/(M + S - 1): GPipe's and 1F1B's idle share, balanced stages, no p2p time."""
    return (stages - 1) / (micro_batches + stages - 1)


def makespan_closed_form(stages: int, micro_batches: int, t_f: float, t_b: float, virtual: int = 1) -> float:
    """(M + (S - 1)/v)(t_f + t_b): v = 1 for GPipe and 1F1B, v chunks per device interleaved."""
    return (micro_batches + (stages - 1) / virtual) * (t_f + t_b)


def notes_bubble_share(stages: int, micro_batches: int, t_f: float, t_b: float) -> float:
    """The notes' worked-example formula: (S-1)·t_f / (M(t_f + t_b) + (S-1)·t_f). It counts only
    the forward fill as bubble; a real schedule also waits (S - 1)·t_b to drain the backwards."""
    fill = (stages - 1) * t_f
    return fill / (micro_batches * (t_f + t_b) + fill)


def smallest_micro_batches(stages: int, share: float, bubble_of_m) -> int:  # type: ignore[no-untyped-def]
    """Smallest M >= 1 whose bubble_of_m(M) <= share, for a bubble that falls as M grows."""
    lo, hi = 1, 1
    while bubble_of_m(hi) > share:
        lo, hi = hi + 1, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if bubble_of_m(mid) <= share:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _check(stages: int, micro_batches: int) -> None:
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"need S >= 1 and M >= 1, got S = {stages}, M = {micro_batches}")


def _per_stage(value: float | Sequence[float], stages: int, what: str) -> list[float]:
    values = [float(value)] * stages if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(values) != stages:
        raise ValueError(f"{what}: {len(values)} values for {stages} stages")
    if any(not v >= 0 for v in values):
        raise ValueError(f"{what} must be >= 0")
    return values


def draw_gantt(ax, run: PipelineRun, title: str = "") -> None:  # type: ignore[no-untyped-def]
    """A Gantt chart of `run` on a matplotlib axis: a row per stage, forwards and backwards in two
    colours, micro-batch numbers written in when there are few passes (ms on the x axis)."""
    colours = {FORWARD: "tab:blue", BACKWARD: "tab:orange"}
    few = sum(len(o) for o in run.orders) <= 160
    for d in range(run.stages):
        spans = run.spans(d)
        gantt_row(ax, d, spans, lambda span: colours[span.kind], linewidth=0.5 if few else 0, merge=not few,
                  legend={"tab:blue": "forward", "tab:orange": "backward"} if d == 0 else None)
        if few:
            gantt_text(ax, d, spans, lambda span: str(span.index))
    title = title or (f"{run.name}: makespan {run.makespan * 1e3:.4g} ms, "
                      f"bubble {100 * run.bubble_fraction:.1f} %")
    ax.set(ylim=(run.stages - 0.5, -0.5), xlim=(0, run.makespan * 1e3), xlabel="time (ms)", ylabel="stage",
           title=title)
    if run.stages <= 16:
        ax.set_yticks(range(run.stages))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
