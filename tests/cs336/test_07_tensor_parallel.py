"""code/cs336/07_tensor_parallel.py: PyTorch's DTensor tensor parallelism beside 05's hand-written one.

The script is run once as a student would (--quick --json, 4 ranks): its rows decided, its byte
counts (counted, ring model, on the wire here) against numbers worked out here by hand. DTensorComm's
counts are checked against PyTorch's own CommDebugMode. Each side is then broken in turn (DTensor's
model computes another GELU; 05's backward loses its reduce): the run must end in exit 1 with one
line naming the side that broke. At 2 and 3 ranks Parts 1 and 2 run and Part 3 says what it needs.
(More broken engines, one for every row: tests/suite/test_mutations_cs336_tp_zero.py.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from conftest import ROOT, every_row_agrees, flat, load_script, python, run_script

from common.costmodel.steps import tp_step_traffic
from common.error_types import UsageError
from common.launch import launch
from cs336 import mlp

SCRIPT = "cs336/07_tensor_parallel.py"


def test_quick_run_agrees_row_by_row_and_byte_for_byte(quick_run) -> None:
    proc = quick_run(SCRIPT)      # the session's reproduction ran it
    data = proc.data
    every_row_agrees(SCRIPT, data)
    # the marks under each table of gaps from one process: 3 sides, Megatron, the mesh
    marks = [row[1:] for part in ("Part 1", "Part 2", "Part 3")
             for row in data["parts"][part]["tables"]["vs_one_process"]["rows"]
             if row[0].startswith("step 1 ≤")]
    assert marks == [["ok"] * 3, ["ok"], ["ok"]]
    # By hand, k = 4, L = 8, A = B·d·e = 32·128·8 = 32768 B: a ring all-gather or reduce-scatter sends
    # 3/4·A, an all-reduce 3/2·A. 05: 8 gathers + 7 reduce-scatters; DTensor at output: 7 all-reduces.
    traffic = {r[0]: r for r in data["parts"]["Part 1"]["tables"]["traffic"]["rows"]}
    assert traffic["DTensor, at input"][1:4] == [8, 7, 0]
    assert traffic["DTensor, at output"][1:4] == [8, 0, 7]
    values = {k: v for part in data["parts"].values() for k, v in part.get("values", {}).items()}
    assert values["p1_hand_calls"] == values["p1_at_input_calls"] == "8 all-gather + 7 reduce-scatter"
    assert values["p1_hand_bytes"] == values["p1_at_input_bytes"] == 15 * 24576
    assert values["p1_at_output_bytes"] == 8 * 24576 + 7 * 49152
    assert values["p2_step_bytes"] == 7 * 49152 and values["p2_step_calls"] == "7 all-reduce"
    # On the wire here, gloo ran the gathers as they were handed (N = A each) and no reduce-scatter:
    # 05's dist.reduce_scatter as 4 all-reduces of a chunk (A/4), DTensor's as one of A.
    assert values["p1_hand_wire"] == "all-gather: 8 calls, 262,144 B; all-reduce: 28 calls, 229,376 B"
    assert values["p1_at_input_wire"] == "all-gather: 8 calls, 262,144 B; all-reduce: 7 calls, 229,376 B"
    assert values["p1_at_output_wire"] == values["p1_at_input_wire"]
    # 2 × 2 mesh: tp all-reduces 16 rows (8192·2 B … 16384 B) over 2 ranks, 2·1/2·16384 B each;
    # dp all-reduces the local half of 8·128² weights (65536 · 8 B) over 2 ranks.
    assert values["p3_tp_bytes"] == 7 * 16384 and values["p3_dp_bytes"] == 65536 * 8
    assert values["dtensor_calls_through_python"] == 0 < values["dtensor_calls_recorded"]


def test_the_reduce_scatter_formula_is_the_cost_models() -> None:
    from cs336 import dtensor_tp as dt

    for k, layers, width, batch in [(4, 8, 128, 32), (3, 2, 12, 5), (2, 6, 10, 1)]:
        by_kind = dt.colwise_traffic(k, layers, width, batch, 8, "reduce_scatter")
        total = (sum(c for c, _ in by_kind.values()), sum(b for _, b in by_kind.values()))
        assert total == pytest.approx(tp_step_traffic(k, layers, width, batch, 8))


def _count_both(rank: int, world_size: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    from cs336 import dtensor_tp as dt

    mesh, found = init_device_mesh("cpu", (world_size,)), {}
    params, x = mlp.make_params(4, 8, 0), mlp.make_batch(4, 8, 0)
    for plan in dt.PLANS:
        model = dt.as_linears(params)
        parallelize_module(model, mesh, dt.PLANS[plan](len(params)))
        ours = dt.DTensorComm({"tp": mesh.get_group()})
        with CommDebugMode() as theirs, ours:
            dt.whole(model(x)).square().mean().backward()
        names = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
                 "all_reduce": "all_reduce"}
        found[plan] = ({names[str(op).split(".")[-1]]: n for op, n in theirs.get_comm_counts().items()},
                       dict(ours.logs["tp"].calls))
    return found


def test_the_dispatch_mode_counts_what_comm_debug_mode_counts() -> None:
    """PyTorch's own counter, on every plan, forward and backward: the same calls of each kind."""
    for rank in launch(_count_both, 2, timeout_s=120):
        for plan, (theirs, ours) in rank.items():
            assert theirs == ours and sum(ours.values()) >= 3, (plan, theirs, ours)


# A side broken on purpose; forked ranks inherit the change.
BROKEN = """
import sys
sys.path.insert(0, {code!r})
sys.argv = ["07_tensor_parallel.py", "--quick", "--layers", "2", "--width", "8", "--batch", "4"]
import importlib.util
spec = importlib.util.spec_from_file_location("tensor_parallel", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules["tensor_parallel"] = module
spec.loader.exec_module(module)
import torch.distributed as dist
from torch import nn
{patch}
from common.script_end import run_main
run_main(module.main)
"""
# PyTorch's side computes another GELU (tanh's approximation): DTensor's every layout is off.
TANH_GELU = """
as_linears = module.dt.as_linears
def tanh_gelu(params):
    model = as_linears(params)
    for i in range(1, len(model), 2):
        model[i] = nn.GELU(approximate="tanh")
    return model
module.dt.as_linears = tanh_gelu
"""
# 05's backward loses its reduce: each rank keeps its own term of dL/dx = Σ_r dz_r · W_rᵀ.
LOST_REDUCE = """
def local_term_only(dz, w_local, widths, log):
    start = sum(widths[:dist.get_rank()])
    return (dz @ w_local.T)[:, start:start + widths[dist.get_rank()]].contiguous()
module.HAND.tp_input_gradient = local_term_only
"""


@pytest.mark.parametrize("patch, first, also", [
    (TANH_GELU, "DTensor TP (gather at input)", "DP × TP (2 × 2 mesh)"),
    (LOST_REDUCE, "TP by hand (05 Part 2)", None),
], ids=["pytorch-side", "hand-written-side"])
def test_a_broken_side_ends_the_run_in_one_line(tmp_path: Path, patch: str, first: str, also: str) -> None:
    code = ROOT / "code"
    wrapper = tmp_path / "broken.py"
    text = BROKEN.format(code=str(code), script=str(code / SCRIPT), patch=patch)
    wrapper.write_text(text, encoding="utf-8")
    proc = python(wrapper, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"07_tensor_parallel.py: error: {first} against one process: step 1 largest "
                               "|difference| / its size "), lines[0]
    assert "> 1e-09" in lines[0] and "Traceback" not in proc.stderr
    # each side's mark, in the row of marks under each table of gaps from one process (in order)
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("  step 1 ≤")]
    marks = rows[0][-3:] + [row[-1] for row in rows[1:]]     # Part 1: three sides; Parts 2, 3: one
    sides = ["TP by hand (05 Part 2)", "DTensor TP (gather at input)", "DTensor TP (gather at output)",
             "Megatron TP (DTensor)", "DP × TP (2 × 2 mesh)"]
    named = {side: mark == "FAILED" for side, mark in zip(sides, marks)}
    assert named[first], named
    if also:
        assert named[also], named
    else:  # DTensor's own runs stay equal to one process
        assert {n for n, bad in named.items() if bad} == {first}, named


@pytest.mark.parametrize("changes, says", [
    ({"world_size": 1}, "--world-size 1"), ({"tp": 1}, "--tp 1"), ({"layers": 3}, "--layers 3"),
    ({"width": 10}, "--width 10 must be a multiple of --world-size 4"), ({"batch": 1}, "--batch 1 < 2"),
])
def test_sizes_the_parts_cannot_split_are_refused(changes: dict, says: str) -> None:
    base = {"world_size": 4, "tp": 2, "layers": 8, "width": 128, "batch": 32}
    args = argparse.Namespace(**(base | changes))
    with pytest.raises(UsageError, match=says.replace("|", r"\|")):
        load_script(SCRIPT).check_args(args)


@pytest.mark.parametrize("world_size", [2, 3])
def test_parts_1_and_2_run_where_the_mesh_does_not(tmp_path: Path, world_size: int) -> None:
    out = tmp_path / "run.json"
    proc = run_script(SCRIPT, "--world-size", str(world_size), "--layers", "2", "--width", "12",
                      "--batch", "4", "--json", str(out))
    data = json.loads(out.read_text())
    assert not [line for part in data["prose"].values() for line in part if line["kind"] == "check"]
    marks = [row[1:] for part in ("Part 1", "Part 2")
             for row in data["parts"][part]["tables"]["vs_one_process"]["rows"]
             if row[0].startswith("step 1 ≤")]
    assert marks == [["ok"] * 3, ["ok"]]
    # the line a student reads on why Part 3 did not run
    assert "not run: Part 3 needs --world-size = --tp × a data-parallel size of at least 2" in \
        flat(proc.stdout)
    claims = {c["ref"]: c["status"] for c in json.loads(out.read_text())["claims"]}
    mesh = {ref for ref in claims if ref.startswith("EN-tp-mesh-")}
    assert mesh and all(claims[ref] == "not measured" for ref in mesh), claims
    assert all(status == "agrees" for ref, status in claims.items() if ref not in mesh), claims
    # a --tp that fits no mesh at 4 ranks leaves Part 3 out too, rather than refusing Parts 1 and 2
    args = argparse.Namespace(world_size=4, tp=3, layers=8, width=128, batch=32)
    load_script(SCRIPT).check_args(args)
    assert not load_script(SCRIPT).mesh_fits(args)
