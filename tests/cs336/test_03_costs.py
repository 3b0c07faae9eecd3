"""CS336 lecture 8 costs: the α-β formulas added to common.costmodel against round-by-round counts
from lecture14.collectives, and 03_costs.py run as a student would (claims read from --json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_usage_error, run_script

from common.collectives import algorithm
from common.costmodel_collectives import alpha_beta_time, ring_allreduce_balance_bytes, ring_allreduce_terms
from common.costmodel_steps import (
    pp_step_bytes_per_device,
    pp_step_send_time,
    tp_step_bytes_per_device,
    zero_step_bytes_per_device,
    zero_step_collectives,
)
from common.link import CS336_NVLINK, Link
from lecture14 import collectives as col

RING_ALLREDUCE = algorithm("ring all-reduce")

S03 = "cs336/03_costs.py"
LINKS = [Link(5e-6, 50 * 2**30), Link(1e-6, 450e9), Link(0.0, 10e9), Link(20e-6, 1e9)]


def buffers(k: int, n: int) -> list[np.ndarray]:
    """K buffers of n one-byte elements: the simulator then counts bytes as elements."""
    return [np.zeros(n, dtype=np.uint8) for _ in range(k)]


def pieces(k: int, n: int) -> list[np.ndarray]:
    """n bytes cut into K pieces at array_split boundaries (all-gather inputs)."""
    return [np.zeros(len(c), dtype=np.uint8) for c in np.array_split(np.arange(n), k)]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("link", LINKS)
def test_reduce_scatter_and_all_gather_equal_their_rounds(k: int, link: Link) -> None:
    n = 840 * k  # K divides N: every chunk N/K
    rs, ag = col.reduce_scatter(buffers(k, n)), col.all_gather(pieces(k, n))
    for res, ring in ((rs, algorithm("ring reduce-scatter")), (ag, algorithm("ring all-gather"))):
        assert res.n_rounds == k - 1
        assert ring.time(k, n, link) == pytest.approx(res.time(link), rel=1e-12, abs=1e-18)
        assert all(s == ring.busiest_bytes(k, n) for s in res.sent)


@pytest.mark.parametrize("k,n", [(3, 1000), (4, 1001), (7, 50), (5, 3)])
def test_uneven_chunks_stay_within_one_element_per_round(k: int, n: int) -> None:
    link = Link(1e-6, 1e9)
    res = col.reduce_scatter(buffers(k, n))
    assert res.total_sent == (k - 1) * n  # each chunk travels K-1 hops, whatever its size
    formula = algorithm("ring reduce-scatter").time(k, n, link)
    assert formula <= res.time(link) + 1e-15 <= formula + (k - 1) / link.beta_Bps + 1e-12


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("link", LINKS)
def test_allreduce_terms_are_the_rounds_alphas_and_the_busiest_bytes(k: int, link: Link) -> None:
    n = 64 * k
    res = col.ring_allreduce(buffers(k, n))
    latency, bandwidth = ring_allreduce_terms(k, n, link)
    assert latency == pytest.approx(res.n_rounds * link.alpha_s)
    assert bandwidth == pytest.approx(res.busiest_sent / link.beta_Bps)
    assert latency + bandwidth == pytest.approx(RING_ALLREDUCE.time(k, n, link), rel=1e-12, abs=1e-18)
    assert latency + bandwidth == pytest.approx(res.time(link), rel=1e-12, abs=1e-18)
    # The notes' generic α·N_msg + S/B with the ring's messages and bytes is the same thing.
    assert alpha_beta_time(res.n_rounds, res.busiest_sent, link) == pytest.approx(res.time(link),
                                                                                     abs=1e-18)


@pytest.mark.parametrize("k", [2, 3, 4, 8, 64])
@pytest.mark.parametrize("link", [lk for lk in LINKS if lk.alpha_s > 0])
def test_balance_size_is_where_the_terms_cross(k: int, link: Link) -> None:
    n = ring_allreduce_balance_bytes(k, link)
    lat, bw = ring_allreduce_terms(k, n, link)
    assert lat == pytest.approx(bw, rel=1e-12)
    lat, bw = ring_allreduce_terms(k, n / 2, link)
    assert lat > bw
    lat, bw = ring_allreduce_terms(k, n * 2, link)
    assert lat < bw
    with pytest.raises(ValueError):
        ring_allreduce_balance_bytes(1, link)


def test_notes_four_rank_example() -> None:
    link = Link(5e-6, 50 * 2**30)
    lat, bw = ring_allreduce_terms(4, 64 * 2**20, link)
    assert lat == pytest.approx(30e-6)
    assert bw == pytest.approx(1.875e-3, rel=1e-12)  # not 1.92: MiB / GiB is 1/1024
    assert ring_allreduce_balance_bytes(4, link) == pytest.approx(4 * 5e-6 * 50 * 2**30)


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
def test_zero_traffic_against_simulated_collectives(k: int) -> None:
    p_bytes, link = 600 * k, Link(2e-6, 5e9)
    ar = col.ring_allreduce(buffers(k, p_bytes))
    rs, ag = col.reduce_scatter(buffers(k, p_bytes)), col.all_gather(pieces(k, p_bytes))
    for stage in ("DDP", "ZeRO-1", "ZeRO-2"):
        assert zero_step_bytes_per_device(stage, k, p_bytes) == ar.busiest_sent
    assert rs.busiest_sent + ag.busiest_sent == ar.busiest_sent  # RS then AG is the all-reduce
    z3 = zero_step_bytes_per_device("ZeRO-3", k, p_bytes)
    assert z3 == 2 * ag.busiest_sent + rs.busiest_sent == pytest.approx(1.5 * ar.busiest_sent)
    # ZeRO-3 layer by layer: L calls of P/L each move the same bytes, with L times the start-ups.
    layers = 6
    calls = zero_step_collectives("ZeRO-3", p_bytes, layers=layers)
    per_layer = col.all_gather(pieces(k, p_bytes // layers))
    assert sum(c.calls for c in calls) == 3 * layers
    assert sum(c.calls * c.ring.busiest_bytes(k, c.nbytes) for c in calls) == pytest.approx(z3)
    expected = 3 * layers * per_layer.time(link)  # RS and AG of the same size take the same rounds
    assert sum(c.calls * c.ring.time(k, c.nbytes, link) for c in calls) == pytest.approx(expected, rel=1e-12)
    ddp = zero_step_collectives("DDP", p_bytes)[0]
    assert ddp.ring.time(k, ddp.nbytes, link) == pytest.approx(ar.time(link), rel=1e-12)
    assert ddp.ring.rounds(k) == ar.n_rounds and calls[0].ring.rounds(k) == k - 1


@pytest.mark.parametrize("k", [2, 4, 8])
def test_tp_traffic_against_simulated_layers(k: int) -> None:
    layers, act = 5, 96 * k
    ag, rs = col.all_gather(pieces(k, act)), col.reduce_scatter(buffers(k, act))
    counted = layers * (ag.busiest_sent + rs.busiest_sent)
    assert tp_step_bytes_per_device(layers, act, k, per_call="all-gather") == counted
    ar = col.ring_allreduce(buffers(k, act))
    assert tp_step_bytes_per_device(layers, act, k) == 2 * layers * ar.busiest_sent
    with pytest.raises(ValueError):
        tp_step_bytes_per_device(layers, act, k, per_call="broadcast")


def test_pipeline_sends() -> None:
    link, act = Link(3e-6, 2e9), 1e6
    for m in (1, 2, 8, 32):
        by_hand = sum(link.alpha_s + act / m / link.beta_Bps for _ in range(2 * m))
        assert pp_step_send_time(m, act, link) == pytest.approx(by_hand)
    assert pp_step_bytes_per_device(act) == 2 * act
    with pytest.raises(ValueError):
        pp_step_send_time(0, act, link)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        zero_step_collectives("ZeRO-4", 1.0)
    with pytest.raises(ValueError):
        zero_step_collectives("ZeRO-3", 1.0, layers=0)
    with pytest.raises(ValueError):
        alpha_beta_time(-1, 10, CS336_NVLINK)
    with pytest.raises(ValueError):
        algorithm("ring reduce-scatter").time(0, 10, CS336_NVLINK)


# ---- the script ----------------------------------------------------------------------------------

EXPECTED_03 = {  # claim → status at the notes' settings; every 'differs' is an erratum the script explains
    "α·N_msg + S/B with counted messages and bytes = ring T": "agrees",
    "counted ring all-reduce: 2(p-1) rounds, 2(p-1)/p·S": "agrees",
    "α's share of T falls as S grows (Part 1's sweep)": "agrees",
    "latency term 6α": "agrees",
    "bandwidth term 1.5 × 64 MB / 50 GB/s": "agrees",  # a reading: MiB and GiB/s worked as MB and GB/s
    "the bandwidth term is close to 2 ms": "agrees",
    "NVLink 4.0 two-way (18 links × 25 GB/s each way)": "agrees",
    "InfiniBand NDR 400 Gb/s in GB/s": "agrees",
    "RoCE 100 Gb/s in GB/s": "agrees",
    "NVLink / InfiniBand, one way each": "differs",
    "InfiniBand / Ethernet 100G, one way each": "agrees",
    "PCIe 5.0 x16 two-way": "differs",
    "NVLink's 450 GB/s is 60-85 % of peak": "differs",
    "InfiniBand's 40 GB/s is 60-85 % of peak": "agrees",
    "InfiniBand's 5 µs (TP paragraph) in 1-2 µs": "differs",
    "gradients 13B × 2 B": "agrees",
    "ring volume per rank, 8 cards (ring model)": "differs",
    "39 GB / 450 GB/s (the conversion box)": "agrees",
    "39 GB / 40 GB/s (the conversion box)": "agrees",
    "ring volume per rank, p = --world-size (ring model)": "agrees",
    "all-reduce time, NVLink 450 GB/s": "agrees",
    "all-reduce time, InfiniBand 40 GB/s": "agrees",
    "all-reduce time, 100G Ethernet": "agrees",
    "NVLink's all-reduce / a 200 ms step's backward": "agrees",
    "TP activation A = 128 × 5120 × 2 B": "agrees",
    "TP collectives per step (2L)": "agrees",
    "DP collectives per step": "agrees",
    "DP per step per rank, in LW (p = 4)": "agrees",
    "TP per call per rank, in A (p = 4)": "differs",
    "TP per step per rank, in L·A (p = 4)": "differs",
    "TP a step per rank, 80 × (p-1)/p·A (ring model)": "differs",
    "TP's bytes / DP's a step": "agrees",
    "TP's bytes / DP's, 4096-token sequences": "differs",
    "TP start-ups, 80 calls × 1 µs (NVLink)": "agrees",
    "TP start-ups, 80 calls × 5 µs (InfiniBand)": "agrees",
    "activation A = 128 × 1024 × 2 B": "agrees",
    "a layer per rank: forward AG + backward RS (ring model)": "agrees",
    "parameters per layer d²": "agrees",
    "one layer's weights, fp16": "agrees",
    "parameters, 12 layers": "agrees",
    "training state 201M × 16 B": "agrees",  # a reading: GiB written for GB
    "activation 128 × 4096 × 2 B": "agrees",
}


def claims(path: Path) -> dict[str, dict]:
    return {c["what"]: c for c in json.loads(path.read_text(encoding="utf-8"))["claims"]}


@pytest.fixture(scope="module")
def quick_03(tmp_path_factory: pytest.TempPathFactory, quick_run) -> tuple[str, dict[str, dict]]:
    out = tmp_path_factory.mktemp("c03") / "o.json"
    proc = quick_run(S03, json_to=out)
    return proc.stdout, claims(out)


def test_03_claims_at_the_notes_settings(quick_03: tuple[str, dict[str, dict]]) -> None:
    out, found = quick_03
    assert {w: c["status"] for w, c in found.items()} == EXPECTED_03
    assert all(c["why"] and c["erratum"] for c in found.values() if c["status"] == "differs")
    assert all(c["rule"] for c in found.values())
    ours = {w: c["ours"] for w, c in found.items()}
    assert ours["bandwidth term 1.5 × 64 MB / 50 GB/s"] == pytest.approx(1.92)
    assert found["bandwidth term 1.5 × 64 MB / 50 GB/s"]["reading"]
    assert ours["NVLink / InfiniBand, one way each"] == 9
    assert ours["ring volume per rank, 8 cards (ring model)"] == pytest.approx(45.5)
    assert ours["all-reduce time, NVLink 450 GB/s"] == pytest.approx(39e9 / 450e9 * 1e3 + 6e-3)
    # the notes' MB is MiB (a reading): 1.25 MiB, ours in their unit
    act = found["TP activation A = 128 × 5120 × 2 B"]
    assert act["ours"] == pytest.approx(1.25) and act["unit"] == "MiB" and act["reading"]
    # 40 all-gathers and 40 reduce-scatters of (p-1)/p·A each: 75 MiB beside the notes' 150 (MiB, read so),
    # the notes inconsistent (all-gathers by name, all-reduces by volume)
    step = found["TP a step per rank, 80 × (p-1)/p·A (ring model)"]
    assert step["ours"] == pytest.approx(75) and step["unit"] == "MiB" and step["notes"] == 150
    assert step["error"] == "inconsistency" and step["reading"]
    assert "75 MiB" in step["why"] and "150 MiB" in step["why"]
    assert ours["TP per call per rank, in A (p = 4)"] == 0.75
    assert ours["TP per step per rank, in L·A (p = 4)"] == 1.5
    assert ours["a layer per rank: forward AG + backward RS (ring model)"] == 384
    state = found["training state 201M × 16 B"]
    assert state["ours"] == pytest.approx(3.221225472) and state["unit"] == "GB" and state["reading"]
    assert ours["NVLink 4.0 two-way (18 links × 25 GB/s each way)"] == 900
    assert found["PCIe 5.0 x16 two-way"]["erratum"] == found["NVLink / InfiniBand, one way each"]["erratum"]
    assert found["PCIe 5.0 x16 two-way"]["error"] == "inconsistency"
    assert ours["TP's bytes / DP's, 4096-token sequences"] == pytest.approx(8.26, abs=0.01)
    assert ours["PCIe 5.0 x16 two-way"] == pytest.approx(2 * 32 * 16 * 128 / 130 / 8)
    assert ours["NVLink's 450 GB/s is 60-85 % of peak"] == 100
    assert ours["InfiniBand's 40 GB/s is 60-85 % of peak"] == 80
    assert "same" in out and "DIFFERENT" not in out
    assert "1.88 ms" in out and "1.92 ms" in out  # in MiB and GiB/s, and as the notes worked it
    lines = [ln for ln in out.splitlines() if len(ln) > 100]
    assert not lines, lines


def test_03_other_world_size_voids_only_what_depends_on_it(tmp_path: Path) -> None:
    out = run_script(S03, "--world-size", "8", "--alpha-us", "2", "--beta-gbs", "25", "--size", "1MiB",
                     "--json", str(tmp_path / "o.json")).stdout
    found = claims(tmp_path / "o.json")
    for what in ("latency term 6α", "bandwidth term 1.5 × 64 MB / 50 GB/s",
                 "all-reduce time, NVLink 450 GB/s",
                 "a layer per rank: forward AG + backward RS (ring model)",
                 "TP a step per rank, 80 × (p-1)/p·A (ring model)"):
        assert found[what]["status"] == "other setting", what
    # the rows at a fixed setting keep their verdict: 39 GB is the 4-card figure whatever --world-size
    assert found["ring volume per rank, 8 cards (ring model)"]["status"] == "differs"
    assert found["TP per call per rank, in A (p = 4)"]["status"] == "differs"
    assert found["ring volume per rank, p = --world-size (ring model)"]["ours"] == pytest.approx(45.5)
    assert found["latency term 6α"]["ours"] == pytest.approx(14 * 2)  # 2(p-1)α with α = 2 µs
    assert found["the bandwidth term is close to 2 ms"]["ours"] == pytest.approx(1.75 * 2**20 / 25e9 * 1e3)
    assert "S = p·α·B = 390.6 KiB" in out  # 8 × 2 µs × 25 GB/s = 400,000 B


@pytest.mark.parametrize("p", ["2", "3", "13"])
def test_03_odd_world_sizes(p: str) -> None:
    out = run_script(S03, "--world-size", p, "--quick", "--micro-batches", "3").stdout
    assert "DIFFERENT" not in out and "Traceback" not in out
    if p == "13":
        assert "only 12 stages" in out


@pytest.mark.parametrize("args", [("--world-size", "0"), ("--world-size", "1"), ("--beta-gbs", "0"),
                                  ("--size", "12XB"), ("--alpha-us", "-1"), ("--micro-batches", "0"),
                                  ("--bogus",)])
def test_03_usage_errors(args: tuple[str, ...]) -> None:
    assert_usage_error(S03, *args)


def test_03_needs_no_torch() -> None:
    text = (Path(__file__).resolve().parents[2] / "code" / S03).read_text(encoding="utf-8")
    assert "import torch" not in text
