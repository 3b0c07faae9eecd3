"""Lecture 14 §2 (多 GPU 通信): the five collective primitives on real torch.distributed ranks (gloo on
CPU; NCCL where every rank has a GPU), the identities between them, and a point-to-point shift round
the ring without deadlock.

    python code/lecture14/02_primitives.py
    python code/lecture14/02_primitives.py --world-size 3 --numbers 7

Every rank starts with --numbers small integers (rank r: 10(r+1), 10(r+1)+1, ...), stored as
float32: their sums are exact, so real ranks and the simulator in collectives.py must agree bit for
bit. Ranks compute and return their buffers; this process prints them. The default run is already
small (three launches of a few tiny collectives); --quick only halves Part 4's timeout (an extra:
the notes' "most common deadlock", one rank skipping a collective).
"""

from __future__ import annotations

import sys
from pathlib import Path

# this checkout's code/, ahead of anything installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: F401  (first: Ctrl-C and a closed pipe end quietly, torch's import too)

# isort: split

import argparse

import numpy as np
import torch
import torch.distributed as dist

from common.cli import make_parser
from common.collectives_real import all_gather_uneven
from common.error_types import UsageError
from common.launch import (
    MAX_STAGED_RANKS,
    ask_gloo,
    choose_backend,
    launch,
    rank_device,
    skipped_collective,
    under_torchrun,
)
from common.output import Report
from common.run_cost import Cost, Term
from common.script_end import run_main
from lecture14 import collectives as col
from lecture14.network import Result
from lecture14.rank_ops import all_inputs, rank_data, reduce_scatter_real, show, yes

ROOT = 0  # the root of broadcast and reduce, and the parameter server
LR = 0.5  # the parameter server's learning rate in Part 2 (any value works)
PS_TOLERANCE = 1e-4  # Part 2: its update is float32 arithmetic on numbers near 100 (a few ulps)
SEED = 1234  # random data of Part 2: rank r uses seed SEED + r
DEADLOCK_TIMEOUT_S = 1.0  # Part 4: a healthy collective here takes milliseconds (0.5 s with --quick)
IDENTITIES = [  # Part 2's routes to an all-reduce: (its row's label, the key the ranks return it under)
    ("all-reduce = reduce + broadcast", "reduce_broadcast"),
    ("all-reduce = reduce-scatter + all-gather", "rs_ag"),
]
# CPU time here (bench/bench_costs.py, W = 2 … 64): four launches, gloo connecting every pair of
# ranks, and every number turned into Python floats and printed from. Part 4 waits for its timeout
# (then the launcher asks who is where). Memory: each rank returns its buffers as lists of Python
# floats (32 B a number), W + 12 buffers of N, and the parent holds every rank's.
COST = Cost([Term("1", 3.5, lambda a: 1), Term("W²", 0.015, lambda a: a.world_size**2),
             Term("W·N", 7e-6, lambda a: a.world_size * a.numbers)],
            memory=lambda a: 32 * a.world_size * (a.world_size + 12) * a.numbers,
            waits_s=lambda a: 2 * (a.timeout_s or DEADLOCK_TIMEOUT_S) + 1)


# ---- the parent: parts in the notes' order (the rank code follows) -----------------------------

def main() -> None:
    parser = make_parser(__doc__, world_size=4, numbers=4, real=True, cost=COST, context={"numbers": "as in "
                                                                                                     "the "
                                                                                                     "notes"})
    args = parser.parse_args()
    if args.world_size < 2:
        raise UsageError("--world-size must be >= 2 for collectives between ranks")
    ask_gloo()  # does gloo have AVG and reduce_scatter? asked once here; forked ranks inherit it
    rep = Report(__file__, "the five primitives, their identities, point-to-point", args)
    w, n = args.world_size, args.numbers
    rep.part(1, f"five primitives on {w} {choose_backend(w, 'auto')} ranks, {n} float32 numbers each")
    part1_primitives(rep, args)   # every buffer before and after each of the five calls
    rep.part(2, "identities: AllReduce = Reduce + Broadcast = ReduceScatter + AllGather; PS = Broadcast + "
                "Reduce")
    part2_identities(rep, args)   # all-reduce = reduce + broadcast = reduce-scatter + all-gather; PS
    rep.part(3, "point-to-point: everyone sends right, receives left (batch_isend_irecv)")
    part3_point_to_point(rep, args)  # everyone sends right, receives left; a ring built of shifts
    rep.part(4, "extra (§2.2, §6): the most common deadlock, one rank skips a collective")
    part4_deadlock(rep, args)     # one rank skips a collective: a timeout, not a hang
    rep.finish()


# ---- rank code: each returns plain lists; the parent prints ----------------------------------

def primitives_worker(rank: int, world_size: int, n: int) -> dict[str, object]:
    x = rank_data(rank, n, rank_device())
    out: dict[str, object] = {}
    buf = x.clone()
    dist.broadcast(buf, src=ROOT)  # in place: the non-roots' buffers are overwritten
    out["broadcast"] = (x.tolist(), buf.tolist())
    buf = x.clone()
    dist.reduce(buf, dst=ROOT)  # in place on the root; other buffers are scratch afterwards
    out["reduce"] = (x.tolist(), buf.tolist())
    buf = x.clone()
    dist.all_reduce(buf)
    out["all-reduce"] = (x.tolist(), buf.tolist())
    piece, how = reduce_scatter_real(x, world_size)
    out["reduce-scatter"] = (x.tolist(), piece.tolist())
    out["reduce_scatter_method"] = how
    gathered = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(gathered, x)  # every rank's n numbers: output K times the input
    out["all-gather"] = (x.tolist(), torch.cat(gathered).tolist())
    return out


def identities_worker(rank: int, world_size: int, n: int, seed: int) -> dict[str, dict[str, list[float]]]:
    """The identities on exact integer data, and again on random float32 data (seeded per rank)."""
    noise = torch.randn(n, generator=torch.Generator().manual_seed(seed + rank)).to(rank_device())
    return {"exact": identity_routes(rank_data(rank, n, rank_device()), world_size),
            "random": identity_routes(noise, world_size)}


def identity_routes(x: torch.Tensor, world_size: int) -> dict[str, list[float]]:
    """Three routes to an all-reduce, and one parameter-server step."""
    rank, n = dist.get_rank(), x.numel()
    direct = x.clone()
    dist.all_reduce(direct)
    via_root = x.clone()
    dist.reduce(via_root, dst=ROOT)
    dist.broadcast(via_root, src=ROOT)
    piece, _ = reduce_scatter_real(x, world_size)
    via_chunks = all_gather_uneven(piece, [c.numel() for c in x.tensor_split(world_size)])
    # Parameter server: rank ROOT is the server (it contributes no gradient); the others are workers
    # whose gradient is x. Pull = broadcast, push = reduce, the server updates, the next pull broadcasts.
    params = rank_data(ROOT, n, x.device) * 10 if rank == ROOT else torch.empty_like(x)
    dist.broadcast(params, src=ROOT)  # pull: every worker gets the parameters
    grad = torch.zeros_like(x) if rank == ROOT else x.clone()
    dist.reduce(grad, dst=ROOT)  # push: the server gets the sum of the workers' gradients
    if rank == ROOT:
        params = params - LR * grad / (world_size - 1)
    dist.broadcast(params, src=ROOT)  # the next pull hands out the updated parameters
    return {"x": x.tolist(), "all_reduce": direct.tolist(), "reduce_broadcast": via_root.tolist(),
            "rs_ag": via_chunks.tolist(), "ps": params.tolist()}


def shift_worker(rank: int, world_size: int, n: int) -> dict[str, object]:
    """Send right, receive left; then a whole ring all-reduce made of such shifts."""
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    x = rank_data(rank, n, rank_device())
    received = torch.empty_like(x)
    # Blocking dist.send then dist.recv on every rank may deadlock: each send can wait until the
    # peer posts its recv, but the peer is itself stuck in its own send (NCCL always waits; gloo
    # might return early for small messages: never rely on it). Posting both at once cannot wait
    # on itself: batch_isend_irecv (like ncclGroupStart/End) starts the pair, then we wait.
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, right),
                                        dist.P2POp(dist.irecv, received, left)]):
        work.wait()
    ring = ring_allreduce_by_shifts(x.clone(), rank, world_size)
    reference = x.clone()
    dist.all_reduce(reference)
    return {"before": x.tolist(), "after": received.tolist(), "ring": ring[0].tolist(),
            "bytes_sent": ring[1], "all_reduce": reference.tolist()}


def ring_allreduce_by_shifts(buf: torch.Tensor, rank: int, world_size: int) -> tuple[torch.Tensor, int]:
    """The notes' ring all-reduce with isend/irecv: each round is one shift. Returns (result, bytes sent)."""
    chunks = list(buf.tensor_split(world_size))  # views: writing a chunk writes buf
    right, left, sent = (rank + 1) % world_size, (rank - 1) % world_size, 0
    for phase, offset in (("reduce-scatter", 0), ("all-gather", 1)):
        for i in range(world_size - 1):
            send_c, recv_c = (rank - i + offset) % world_size, (rank - i - 1 + offset) % world_size
            incoming = torch.empty_like(chunks[recv_c])
            outgoing = chunks[send_c].clone()
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, right),
                                                dist.P2POp(dist.irecv, incoming, left)]):
                work.wait()
            sent += outgoing.numel() * outgoing.element_size()
            if phase == "reduce-scatter":
                chunks[recv_c] += incoming  # reduce into our own copy of that chunk
            else:
                chunks[recv_c].copy_(incoming)  # already complete: overwrite
    return buf, sent


def skip_collective_worker(rank: int, world_size: int) -> float:
    """The bug: only rank 0 all-reduces (say, a metric it alone logs); the others go on to the end."""
    value = torch.ones(1, device=rank_device())
    if rank == 0:
        torch.distributed.all_reduce(value)
    return value.item()


def size_text(count: int) -> str:
    return f"{count} × 4 B"


def buffer_gap(real: list[float], simulated: np.ndarray) -> float:
    """The largest |real − simulated|; infinite where their lengths differ (numpy would broadcast a
    one-number buffer against any other and find no difference)."""
    real = np.asarray(real, np.float32)
    if real.shape != np.shape(simulated):
        return float("inf")
    return float(np.abs(real - simulated).max(initial=0))


def part1_primitives(rep: Report, args: argparse.Namespace) -> None:
    w, n = args.world_size, args.numbers
    results = launch(primitives_worker, w, n, backend="auto", timeout_s=args.timeout_s)
    inputs = all_inputs(w, n)
    sims = {"broadcast": col.broadcast(inputs, ROOT).outputs, "reduce": col.reduce(inputs, ROOT).outputs,
            "all-reduce": col.allreduce(inputs).outputs, "reduce-scatter": col.reduce_scatter(inputs).outputs,
            "all-gather": col.all_gather(inputs).outputs}
    meaning = {
        "broadcast": f"rank {ROOT}'s buffer copied to every rank",
        "reduce": f"the sum lands on rank {ROOT} only; other ranks' buffers are scratch afterwards (gloo "
                  "leaves partial sums)",
        "all-reduce": "every rank gets the sum",
        "reduce-scatter": "rank r gets chunk r of the sum (output N/K)",
        "all-gather": "every rank gets every rank's buffer (output K times the input)",
    }
    gap = 0.0  # the largest |real − simulated| over every defined buffer
    for name in meaning:
        rep.line(f"\n  {name}: {meaning[name]}")
        rows = []
        for r, res in enumerate(results):
            before, after = res[name]
            defined = name != "reduce" or r == ROOT
            if defined:
                gap = max(gap, buffer_gap(after, sims[name][r]))
            rows.append([str(r), show(before), size_text(len(before)),
                         show(after) + ("" if defined else "  (undefined)"), size_text(len(after))])
        rep.table(["rank", "before", "size before", "after", "size after"], rows, name=name)
    # Integer data: sums are exact in float32, so real ranks and the simulator agree bit for bit.
    rep.check_close(f"the five collectives on {w} real ranks vs collectives.py", gap, 0.0)
    rep.note(f"reduce-scatter ran as {results[0]['reduce_scatter_method']}; with N not divisible by K, "
             "chunks follow np.array_split: the first N mod K ranks get one number more (torch.tensor_split "
             "too)")
    rep.value("numbers", n)
    rep.value("rs_out_numbers", len(results[0]["reduce-scatter"][1]))
    rep.value("rs_output_ratio", len(results[0]["reduce-scatter"][1]) / n)
    rep.value("ag_output_ratio", len(results[0]["all-gather"][1]) / n)


def part2_identities(rep: Report, args: argparse.Namespace) -> None:
    w, n = args.world_size, args.numbers
    results = launch(identities_worker, w, n, SEED, backend="auto", timeout_s=args.timeout_s)
    exact, noisy = [res["exact"] for res in results], [res["random"] for res in results]
    inputs = all_inputs(w, n)
    rows, real_ok = identity_rows(rep, inputs, exact, noisy)
    ps_sim, ps_gap, ps_sim_gap = parameter_server_step(inputs, exact, n)
    rows.append(["PS step = broadcast (pull) + reduce (push)", yes(ps_gap <= PS_TOLERANCE), "-",
                 rep.mark("the PS step on real ranks vs collectives.py", ps_sim_gap <= PS_TOLERANCE,
                          f"max |difference| {ps_sim_gap:.3g}, above the tolerance {PS_TOLERANCE:g}"), "-"])
    # The marks hold the real ranks to collectives.py; the rows (the notes' identities) hold them to
    # the formulas: all-reduce's sum, params − lr·Σg/(K−1). A slip the simulator shares only a row sees.
    rep.table(["identity", "ranks: equal", "simulator: equal", "ranks = simulator", "float32 noise"], rows,
              name="identities")
    rep.note("ranks: the real ones, on integer data, so 'equal' is bit for bit (ranks = simulator: ok = no\n"
             f"difference, the PS step within {PS_TOLERANCE:g}); float32 noise: the routes' largest "
             "difference on\n"
             "random N(0,1) float32 data (seeded per rank), summed in other orders")
    workers = "rank 1 is the worker" if w == 2 else f"ranks 1..{w - 1} are workers"
    rep.note(f"parameter server: rank {ROOT} is the server (contributes no gradient), {workers};\nparams = "
             f"rank {ROOT}'s numbers × 10, update params - {LR:g} · sum / {w - 1}; collectives.py's model: "
             f"the server's link carries K·N = {ps_sim.received[-1]:,} B each way, a worker's "
             f"{ps_sim.sent[0]:,} B")
    rep.value("reduce_broadcast_equal", real_ok["reduce_broadcast"])
    rep.value("rs_ag_equal", real_ok["rs_ag"])
    rep.value("ps_step_equal", ps_gap <= PS_TOLERANCE)


def identity_rows(rep: Report, inputs: list[np.ndarray], exact: list[dict], noisy: list[dict]
                  ) -> tuple[list[list], dict[str, bool]]:
    """Part 2's rows for the two all-reduce routes: real ranks (integer data, then random float32)
    against their own all-reduce and against collectives.py (a mark: bit for bit). Also whether each
    route is exact on real ranks."""
    ref = col.allreduce(inputs).outputs
    reduced = col.reduce(inputs, ROOT).outputs[ROOT]
    sim_rb = col.broadcast([reduced if r == ROOT else inputs[r] for r in range(len(inputs))], ROOT).outputs
    sim_rsag = col.all_gather(col.reduce_scatter(inputs).outputs).outputs
    sim = {"reduce_broadcast": sim_rb, "rs_ag": sim_rsag}
    rows, real_ok = [], {}
    for label, key in IDENTITIES:
        real_equal = all(res[key] == res["all_reduce"] for res in exact)
        route_gap = max(buffer_gap(res[key], s) for res, s in zip(exact, sim[key]))
        sim_equal = all(np.array_equal(a, b) for a, b in zip(sim[key], ref))
        worst = max(np.abs(np.subtract(res[key], res["all_reduce"])).max() for res in noisy)
        rows.append([label, yes(real_equal), yes(sim_equal),
                     rep.mark("the all-reduce routes on real ranks vs collectives.py", route_gap == 0,
                              f"{label}: max |difference| {route_gap:.3g}, above the tolerance 0"),
                     float(worst)])
        real_ok[key] = real_equal and route_gap == 0
    return rows, real_ok


def parameter_server_step(inputs: list[np.ndarray], exact: list[dict], n: int
                          ) -> tuple[Result, float, float]:
    """The parameter-server step: workers are ranks 1..W-1 with gradients x_r (the simulator has
    K = W-1 workers). Returns the simulation and the real ranks' gaps to numpy and to it."""
    w = len(inputs)
    params0 = rank_data(ROOT, n).numpy() * 10
    ps_sim = col.parameter_server(inputs[1:], params=params0, lr=LR)
    ps_real = [np.asarray(res["ps"], np.float32) for res in exact]
    ps_ref = params0 - LR * np.sum(inputs[1:], axis=0) / (w - 1)
    ps_gap = max(float(np.abs(p - ps_ref).max()) for p in ps_real)  # real ranks vs numpy
    ps_sim_gap = max(float(np.abs(p - q).max()) for p, q in zip(ps_real[1:], ps_sim.outputs))
    return ps_sim, ps_gap, ps_sim_gap


def part3_point_to_point(rep: Report, args: argparse.Namespace) -> None:
    w, n = args.world_size, args.numbers
    results = launch(shift_worker, w, n, backend="auto", timeout_s=args.timeout_s)
    rows = [[str(r), show(res["before"]), f"→ rank {(r + 1) % w}", f"rank {(r - 1) % w} →",
             show(res["after"])]
            for r, res in enumerate(results)]
    rep.table(["rank", "before", "sends to", "receives from", "after"], rows, name="shift")
    sim = col.ring_allreduce(all_inputs(w, n))
    gap = max(max(buffer_gap(res["ring"], np.asarray(res["all_reduce"], np.float32)),
                  buffer_gap(res["ring"], s)) for res, s in zip(results, sim.outputs))
    rep.line(f"  a ring all-reduce made of 2(K-1) = {2 * (w - 1)} such shifts (chunk (r - i) mod K, then "
             f"(r + 1 - i) mod K); bytes each rank handed to isend (counted): "
             f"{show([res['bytes_sent'] for res in results])}, collectives.py's ring: "
             f"{show(sim.sent.tolist())}")
    rep.check_close("the ring of shifts vs dist.all_reduce and collectives.py", gap, 0.0)
    rep.value("shift_right_ok", all(results[r]["after"] == results[(r - 1) % w]["before"] for r in range(w)))
    rep.value("ring_bytes_ok", [res["bytes_sent"] for res in results] == sim.sent.tolist())
    rep.value("ring_bytes_counted", [res["bytes_sent"] for res in results], compared=False)   # for --json
    rep.value("ring_bytes_simulated", sim.sent.tolist(), compared=False)


def part4_deadlock(rep: Report, args: argparse.Namespace) -> None:
    if under_torchrun():
        rep.line("  skipped under torchrun: the stuck collective would break torchrun's one process group")
        rep.value("skip_ranks", args.world_size)
        rep.value("skip_outcome", "not run under torchrun")
        rep.value("skipped_collective_fails", None)
        return
    timeout = args.timeout_s or (DEADLOCK_TIMEOUT_S / 2 if args.quick else DEADLOCK_TIMEOUT_S)
    w = min(args.world_size, MAX_STAGED_RANKS)
    if w < args.world_size:
        rep.line(f"  on {w} of the {args.world_size} ranks"
                 " (a few show it; see common/launch/staged_failure.py)")
    # The report must be the staged one (ranks 1.. named for finishing while rank 0 waited until the
    # timeout): a rank killed, stopped or failing during this part is a failure of the run, exit 1.
    seconds, report = skipped_collective(
        skip_collective_worker, w, backend="auto", timeout_s=timeout, skippers=range(1, w), waiters=[ROOT],
        staged="Part 4 staged a skipped collective (only rank 0 calls all_reduce)")
    rep.line(f"  only rank 0 calls all_reduce; after {seconds:.2f} s (timeout {timeout:g} s) the launcher "
             f"reports:\n    {report}" if report else "  no error: the collective completed (it should not "
                                                      "have)")
    rep.note("every rank must make the same collective calls in the same order; without a timeout "
             "this run would wait for ever (NCCL's default timeout is minutes).")
    rep.value("skip_ranks", w)
    rep.value("skipped_collective_fails", report is not None)
    rep.value("skip_outcome",
              f"the launch failed after {seconds:.2f} s" if report else "the launch completed")


if __name__ == "__main__":
    run_main(main)
