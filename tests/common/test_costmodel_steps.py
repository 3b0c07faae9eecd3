"""CS336 lecture 8's per-step traffic (common/costmodel/steps.py)
against counts from lecture14.collectives' simulator, and the arguments it refuses."""

from __future__ import annotations

import pytest
from costmodel_buffers import buffers, pieces

from common.costmodel.collectives import algorithm
from common.costmodel.link import CS336_NVLINK, Link
from common.costmodel.steps import (
    pp_step_bytes_per_device,
    pp_step_send_time,
    tp_step_bytes_per_device,
    zero_step_bytes_per_device,
    zero_step_collectives,
)
from lecture14 import collectives as col


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
        algorithm("ring reduce-scatter").time(0, 10, CS336_NVLINK)
