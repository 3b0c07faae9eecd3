"""The compute models calibrated to the notes' §3 steps: the targets read from the notes' table here,
handed to the pure simulator (ddp_sim.calibrated_to_step), which reads no table.

    compute = notes_resnet_compute()   # ResNet-50's backward scaled so the §3 step is the notes' 37.75 ms
"""

from __future__ import annotations

import functools

from common import checker
from lecture15.ddp_sim import ComputeModel, calibrated_to_step
from lecture15.models import bert_large, resnet50

# The notes' rows (code/lecture15/notes.toml, basis "calibration target"): nothing here retypes them.
# ResNet-50: §3 Part 3's 37.75 ms step (their most precise ResNet figure); BERT-large: §3 Part 4's
# reversed-order 444.7 ms step.
RESNET_TARGET = "L15-3.2-step-no-first-cap"   # ResNet-50, batch 32, 25 MB buckets, overlapped: 37.75 ms
BERT_TARGET = "L15-3.2-order-reversed"        # BERT-large, 25 MB buckets, registered reversed: 444.7 ms


def calibration_target_s(row_id: str) -> float:
    """The notes' step (in the row's ms) that a compute model is calibrated to, in seconds."""
    row = checker.row(row_id)
    assert row.basis == checker.CALIBRATION and row.unit == "ms", row
    return float(row.notes) * 1e-3


@functools.cache
def notes_resnet_compute() -> ComputeModel:
    """ResNet-50 (batch 32) calibrated to the notes' 37.75 ms step (see ddp_sim.NOTES_S3)."""
    return calibrated_to_step(resnet50(batch=32), calibration_target_s(RESNET_TARGET))


@functools.cache
def notes_bert_compute() -> ComputeModel:
    """BERT-large (4 × 512 tokens) calibrated to the notes' reversed-order 444.7 ms step (see NOTES_S3)."""
    return calibrated_to_step(bert_large(), calibration_target_s(BERT_TARGET), registration="reversed")
