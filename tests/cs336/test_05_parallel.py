"""code/cs336/05_parallel.py: every strategy on real ranks against an independent one-process run.

One launch per world size (2 and 3, every size uneven: 5 layers, width 10, batch 7, 3 micro-batches)
runs DP, TP, PP, ZeRO-1 and ZeRO-2; the reference is torch.nn (Linear without bias, GELU, MSE to
zero) with torch.optim in one process, written here, not cs336/mlp.py's. Byte counts are checked
against numbers worked out by hand and against costmodel's formulas; the script is smoke-run once
with --quick (4 ranks).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import assert_usage_error, flat, load_script, python
from rank_faults import assert_named_at_once
from torch import nn

from common.costmodel import collectives as cdef
from common.costmodel.collectives import split_sizes
from common.costmodel.steps import dp_step_traffic, pp_step_traffic, tp_step_traffic, zero_step_traffic
from common.error_types import UsageError
from common.launch import launch
from cs336 import ledger, mlp

SCRIPT = "cs336/05_parallel.py"
LAYERS, WIDTH, BATCH, MICRO, STEPS, SEED = 5, 10, 7, 3, 2, 1
TOL = 1e-12  # float64: only the order of additions differs


def _nn_reference(optimizer: str) -> dict:
    """The same MLP as torch.nn layers (Linear computes x @ weightᵀ, so weight = Wᵀ), one process."""
    params, x = mlp.make_params(LAYERS, WIDTH, SEED), mlp.make_batch(BATCH, WIDTH, SEED)
    linears = [nn.Linear(WIDTH, WIDTH, bias=False).double() for _ in params]
    for lin, w in zip(linears, params):
        lin.weight.data.copy_(w.T)
    model = nn.Sequential(*[m for lin in linears for m in (lin, nn.GELU())])
    opt = (torch.optim.SGD(model.parameters(), lr=mlp.LR_SGD) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=mlp.LR_ADAM))
    out: dict = {"params_after": []}
    for step in range(STEPS):
        opt.zero_grad()
        y = model(x)
        loss = nn.functional.mse_loss(y, torch.zeros_like(y))
        loss.backward()
        if step == 0:
            out.update(output=y.detach().clone(), loss=loss.item(),
                       grads=[lin.weight.grad.T.clone() for lin in linears])
        opt.step()
        out["params_after"].append([lin.weight.detach().T.clone() for lin in linears])
    return out


def _slice_mean_grads(k: int) -> list[list[torch.Tensor]]:
    """Each rank's gradient before any communication: of the mean loss over its own slice."""
    params, x = mlp.make_params(LAYERS, WIDTH, SEED), mlp.make_batch(BATCH, WIDTH, SEED)
    grads = []
    for part in x.tensor_split(k):
        ws = [w.clone().requires_grad_() for w in params]
        grads.append(list(torch.autograd.grad(mlp.forward(ws, part).square().mean(), ws)))
    return grads


@pytest.fixture(scope="module")
def refs() -> dict:
    # Also imports torch._dynamo before forking.
    return {"sgd": _nn_reference("sgd"), "adam": _nn_reference("adam")}


@pytest.fixture(scope="module", params=[2, 3])
def run(request, refs) -> tuple[int, list[dict]]:
    module = load_script(SCRIPT)
    params, x = mlp.make_params(LAYERS, WIDTH, SEED), mlp.make_batch(BATCH, WIDTH, SEED)
    return request.param, launch(module.strategies_worker, request.param, params, x, STEPS, MICRO,
                                 timeout_s=30)


def _diff(a, b) -> float:
    return mlp.max_abs_diff(a, b)


def test_data_parallel_equals_one_process_and_avg_does_not(run, refs) -> None:
    k, ranks = run
    ref, dp = refs["sgd"], [r["DP"] for r in ranks]
    sizes = [len(s) for s in torch.arange(BATCH).tensor_split(k)]
    assert len(set(sizes)) > 1                                       # the slices really are uneven
    assert _diff(torch.cat([r["output"] for r in dp]), ref["output"]) < TOL
    assert abs(sum(n * r["loss"] for n, r in zip(sizes, dp)) / BATCH - ref["loss"]) < TOL
    for r in dp:                                                     # every replica
        assert _diff(r["grads"], ref["grads"]) < TOL
        assert _diff(r["params"], ref["params_after"][-1]) < TOL
    # op=AVG is the plain mean of the slices' mean gradients: not the batch gradient when uneven
    slices = _slice_mean_grads(k)
    plain_mean = [sum(g[i] for g in slices) / k for i in range(LAYERS)]
    assert _diff(dp[0]["avg_grads"], plain_mean) < TOL
    scale = max(g.abs().max().item() for g in ref["grads"])
    assert _diff(dp[0]["avg_grads"], ref["grads"]) > 1e-3 * scale


def test_tensor_parallel_equals_one_process(run, refs) -> None:
    k, ranks = run
    ref, tp = refs["sgd"], [r["TP"] for r in ranks]
    assert [r["params"][0].shape[1] for r in tp] == split_sizes(WIDTH, k)  # column slices
    for r in tp:                                                     # the whole output on every rank
        assert _diff(r["output"], ref["output"]) < TOL and abs(r["loss"] - ref["loss"]) < TOL
    joined = [torch.cat([r["grads"][i] for r in tp], dim=1) for i in range(LAYERS)]
    assert _diff(joined, ref["grads"]) < TOL
    joined = [torch.cat([r["params"][i] for r in tp], dim=1) for i in range(LAYERS)]
    assert _diff(joined, ref["params_after"][-1]) < TOL


def test_pipeline_equals_one_process(run, refs) -> None:
    k, ranks = run
    ref, pp = refs["sgd"], [r["PP"] for r in ranks]
    assert [len(r["params"]) for r in pp] == split_sizes(LAYERS, k)     # 3+2, or 2+2+1
    assert _diff(pp[-1]["output"], ref["output"]) < TOL and abs(pp[-1]["loss"] - ref["loss"]) < TOL
    assert _diff([g for r in pp for g in r["grads"]], ref["grads"]) < TOL
    assert _diff([p for r in pp for p in r["params"]], ref["params_after"][-1]) < TOL


@pytest.mark.parametrize("stage", ["ZeRO-1", "ZeRO-2"])
def test_zero_equals_torch_adam_every_step_and_holds_its_shard(run, refs, stage: str) -> None:
    k, ranks = run
    z = [r[stage] for r in ranks]
    for got, want in zip(z[0]["params_after"], refs["adam"]["params_after"], strict=True):
        assert _diff(got, want) < TOL
    n = LAYERS * WIDTH * WIDTH
    shard = math.ceil(n / k)                                         # 500 on 3: 167, one element of padding
    for r in z:
        assert r["shard"] == shard
        assert r["mv_bytes"] == 2 * 8 * shard == ledger.optimizer_state_bytes(n, k, 16)
        assert r["mv_bytes"] < 2 * 8 * n                              # less than unsharded Adam's
        assert r["grad_bytes"] == 8 * (shard if stage == "ZeRO-2" else n + shard)


def test_counted_bytes_and_calls_equal_hand_counts_and_formulas(run) -> None:
    k, ranks = run
    e = 8
    # by hand, for 5 layers of 10×10, batch 7, 3 micro-batches, float64
    hand = {2: {"DP": (5, 5 * 100 * e), "TP": (9, 5 * 1 * 7 * 5 * e + 4 * 7 * 10 * e / 2),
                "ZeRO": (2, 2 * 250 * e)},
            3: {"DP": (5, 5 * 4 / 3 * 100 * e), "TP": (9, 5 * 2 * 7 * 4 * e + 4 * 2 / 3 * 7 * 10 * e),
                "ZeRO": (2, 2 * 2 * 167 * e)}}[k]
    formulas = {"DP": dp_step_traffic(k, LAYERS, WIDTH, e),
                "TP": tp_step_traffic(k, LAYERS, WIDTH, BATCH, e),
                "ZeRO": zero_step_traffic(k, LAYERS * WIDTH * WIDTH, e)}
    ops = {"DP": ("all_reduce",), "TP": ("all_gather", "reduce_scatter"),
           "ZeRO": ("reduce_scatter", "all_gather")}
    for rank, r in enumerate(ranks):
        for name, stage in [("DP", "DP"), ("TP", "TP"), ("ZeRO", "ZeRO-1"), ("ZeRO", "ZeRO-2")]:
            log = r[stage]["log"]
            assert set(log.calls) == set(ops[name])                  # no other call slipped in
            calls, sent = log.per_step(STEPS, ops[name])
            assert calls == hand[name][0] == formulas[name][0]
            assert sent == pytest.approx(hand[name][1], rel=1e-12) == formulas[name][1]
        log = r["PP"]["log"]
        sends, sent = log.per_step(STEPS, ("send",))
        directions = (rank > 0) + (rank < k - 1)
        assert (sends, sent) == (MICRO * directions, BATCH * WIDTH * e * directions)
        assert (sends, sent) == pp_step_traffic(k, rank, MICRO, BATCH, WIDTH, e)
        assert log.per_step(STEPS, ("recv",))[0] == sends              # every send has its recv


def test_splits_and_padding() -> None:
    for n in range(1, 30):
        for parts in range(1, n + 1):
            assert split_sizes(n, parts) == [len(t) for t in torch.arange(n).tensor_split(parts)]
            blocks = mlp.stage_layers(n, parts)
            assert [i for b in blocks for i in b] == list(range(n)) and all(len(b) for b in blocks)
    ts = [torch.arange(6.0).view(2, 3), torch.arange(5.0)]
    flat = mlp.flatten_padded(ts, 4)
    assert len(flat) == 12 and flat[11] == 0
    assert all(torch.equal(a, b) for a, b in zip(mlp.unflatten(flat, ts), ts))


def test_formulas_edge_cases() -> None:
    assert tp_step_traffic(4, 40, 5120, 128, 2, first_input_grad=True)[0] == 80
    with pytest.raises(ValueError):
        cdef.by_torch_name("all-reduce")  # the collective's name, not torch's "all_reduce"


def test_quick_run_prints_every_part_and_its_claims(tmp_path: Path, quick_run) -> None:
    out = tmp_path / "05.json"
    proc = quick_run(SCRIPT, json_to=out)
    for part in range(1, 6):
        assert f"== Part {part}:" in proc.stdout
    assert all(len(line) <= 100 for line in proc.stdout.splitlines())
    data = json.loads(out.read_text())
    for part in ("Part 1", "Part 2", "Part 3", "Part 4"):
        assert 0 <= data["parts"][part]["max_diff"] < TOL
    assert data["parts"]["Part 5"]["counted_equals_formula"] is True
    traffic = data["parts"]["Part 5"]["tables"]["traffic"]
    assert all(row[traffic["headers"].index("all ranks as it")] == "yes" for row in traffic["rows"])
    claims = {c["ref"]: (c["ours"], c["status"]) for c in data["claims"]}
    # The notes' own figures are checked once, in 03_costs.py and 04_memory.py; here the runs' own.
    assert all(s == "agrees" for _, s in claims.values()) and claims
    assert claims["CS-zero1-shard"][0] is True   # each rank holds only its 1/p shard of Adam's m and v
    # the marks under DP's, TP's, PP's and ZeRO's tables
    marks = [proc.data["parts"][f"Part {n}"]["tables"]["vs_one_process"]["rows"][-1][1] for n in (1, 2, 3, 4)]
    assert marks == ["ok"] * 4
    rows = {r[0]: r for r in data["parts"]["Part 4"]["tables"]["state_bytes"]["rows"]}
    assert all(r[2] == 2 * 8 * 8 * 128 * 128 // 4 for r in rows.values())       # m + v: 16P/p at float64
    # every byte figure says what it is: PP's sends counted, the collectives priced by the ring model,
    # and the reduce-scatters said not to be what gloo ran
    assert "bytes sent a step, counted" in data["parts"]["Part 3"]["tables"]["per_rank"]["headers"]
    assert "bytes sent: ring model, PP counted" in traffic["headers"]
    assert "not what gloo ran here: gloo runs each reduce-scatter" in flat(proc.stdout)   # the words tested


# The TP backward with its reduce lost: each rank keeps its own term of dL/dx = Σ_r dz_r · W_rᵀ.
BROKEN_TP = """
import sys
sys.path.insert(0, {code!r})
sys.argv = ["05_parallel.py", "--quick", "--world-size", "2", "--layers", "4", "--width", "16",
            "--batch", "8"]
import importlib.util
spec = importlib.util.spec_from_file_location("parallel", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules["parallel"] = module
spec.loader.exec_module(module)
import torch.distributed as dist


def local_term_only(dz, w_local, widths, log):
    start = sum(widths[:dist.get_rank()])
    return (dz @ w_local.T)[:, start:start + widths[dist.get_rank()]].contiguous()


module.tp_input_gradient = local_term_only   # forked ranks inherit it
from common.script_end import run_main
run_main(module.main)
"""


def test_a_lost_tp_reduce_ends_the_run_naming_tp(tmp_path: Path) -> None:
    """A run that differs from one process must fail on its own: exit 1, one line naming TP and its gap."""
    code = Path(__file__).resolve().parents[2] / "code"
    wrapper = tmp_path / "broken_tp.py"
    wrapper.write_text(BROKEN_TP.format(code=str(code), script=str(code / SCRIPT)), encoding="utf-8")
    proc = python(wrapper, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("05_parallel.py: error: TP against one process: step 1 max |difference| "
                               ), lines[0]
    assert "> 1e-09" in lines[0]
    # the marks under the tables: DP's (Part 1) ok, TP's (Part 2) FAILED
    marks = [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("  step 1 ≤")]
    assert marks[:2] == ["ok", "FAILED"] and proc.stdout.count("FAILED") == 1


def _args(**changes: int) -> argparse.Namespace:
    base = dict(world_size=4, layers=8, width=128, batch=32, micro_batches=4)
    return argparse.Namespace(**(base | changes))


@pytest.mark.parametrize("changes", [dict(world_size=1), dict(layers=3), dict(width=3),
                                     dict(batch=3, micro_batches=3), dict(micro_batches=33),
                                     dict(layers=2000, width=100)])
def test_sizes_no_strategy_can_split_are_refused(changes: dict) -> None:
    with pytest.raises(UsageError):
        load_script(SCRIPT).check_args(_args(**changes))
    load_script(SCRIPT).check_args(_args())                          # the defaults pass


def test_bad_sizes_are_one_line_errors_before_any_launch() -> None:
    assert_usage_error(SCRIPT, "--world-size", "5", "--layers", "4")  # 5 stages, 4 layers


# ---- a failure in any rank, in any part, is that rank's: named at once, never swallowed --------------

# (where, call, nth) on 3 ranks with LAYERS = 5, STEPS = 2: DP calls all_reduce 5 times with op=AVG
# then 5 × 2 for the sketch; TP all-gathers 5 and reduce-scatters 4 per step; ZeRO-1 comes after them.
FAULTS = [("DP, the op=AVG copies", "all_reduce", 1), ("DP, the sketch's all-reduce", "all_reduce", 7),
          ("TP forward, comm.all_gather_columns", "all_gather", 2),
          ("TP backward, comm.reduce_scatter_columns", "reduce_scatter", 1),
          ("PP, comm.send", "send", 1), ("PP, comm.recv", "recv", 1),
          ("ZeRO-1, comm.reduce_scatter_columns", "reduce_scatter", 4 * STEPS + 1),
          ("ZeRO-2, comm.all_gather_columns", "all_gather", 5 * STEPS + STEPS + 1)]


@pytest.mark.parametrize("where, call, nth", FAULTS, ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("error", [ValueError, RuntimeError])
def test_an_error_in_a_rank_names_that_rank_at_once(where: str, call: str, nth: int, error: type,
                                                    refs) -> None:
    """The fault each part's call raises, in one rank: the launcher must name that rank and its
    error within seconds (a fallback that swallowed it would leave the others waiting until the
    timeout, and blame one of them). refs: torch._dynamo imported before the fork, as the script does."""
    k = 3
    fault_rank = {"send": 0, "recv": 2}.get(call, nth % k)  # send: not the last stage; recv: not the first
    params, x = mlp.make_params(LAYERS, WIDTH, SEED), mlp.make_batch(BATCH, WIDTH, SEED)
    assert_named_at_once(k, fault_rank, call, nth, error, load_script(SCRIPT).strategies_worker,
                         params, x, STEPS, MICRO)
