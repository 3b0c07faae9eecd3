"""Lecture 15 script 02 (buckets): the buckets real DDP records against ddp_sim's bucket rule, and a
smoke run."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch._dynamo  # noqa: F401 - DDP() needs it; imported before the ranks fork, as the scripts do
from conftest import load_script
from lecture15_shared import _quick_claims

from common.launch import launch
from common.units import MiB
from lecture15.ddp_sim import DEFAULT_FIRST_BUCKET_BYTES, assign_buckets


@pytest.fixture(scope="module")
def buckets() -> ModuleType:
    return load_script("lecture15/02_buckets.py")


# ---- 02: buckets recorded from real DDP = ddp_sim --------------------------------------------
def test_recorded_buckets_equal_ddp_sim(buckets: ModuleType) -> None:
    caps = [1.0, 2.5, None]
    runs = launch(buckets.bucket_worker, 2, caps, 3)
    model = buckets.linear_stack()
    names = [n for n, _ in model.named_parameters()]
    sizes = [p.numel() * 4 for p in model.parameters()]
    counts = {}
    for run in [r for r in runs[0] if not r["flags"]]:   # the flagged runs are checked by the script
        cap = run["cap"]
        cap_bytes = int((25 if cap is None else cap) * MiB)
        first = DEFAULT_FIRST_BUCKET_BYTES if cap is None else cap_bytes
        log = run["log"]
        first_iteration = [entry for entry in log if entry[0] == 1]
        assert len(first_iteration) == 1 and sorted(first_iteration[0][3]) == sorted(names)
        predicted = assign_buckets(sizes, cap_bytes, first)
        for it in (2, 3):
            recorded = sorted((index, [names.index(n) for n in ns], nbytes) for i, index, nbytes, ns in log
                              if i == it)
            assert [r[1] for r in recorded] == predicted
            assert [r[2] for r in recorded] == [sum(sizes[i] for i in b) for b in predicted]
        counts[cap] = len(predicted)
    assert counts == {1.0: 6, 2.5: 2, None: 2}  # as checked on this build (facts file)
    assert runs[1][0]["log"] == runs[0][0]["log"]  # every rank launches the same buckets


def test_smoke_02(tmp_path: Path, quick_run) -> None:
    out, claims = _quick_claims("lecture15/02_buckets.py", tmp_path, quick_run)
    assert claims["L15-2.2-rule"]["ours"] is True and claims["L15-2.2-rule"]["status"] == "agrees"
    assert claims["L15-2.2-first-iteration-one-bucket"]["ours"] == 1
    assert claims["L15-2.2-first-iteration-one-bucket"]["kind"] == "observed on real ranks"
    data = json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))
    models = {row[0]: row for row in data["parts"]["Part 2"]["tables"]["models"]["rows"]}
    # tensors, parameters, tensors under 16 KiB, then the buckets at 25 MB, the default and 25 MiB
    resnet, bert = models["ResNet-50"], models["BERT-large"]
    assert resnet[1:4] == [161, 25557032, "107 (66.5 %)"] and resnet[5:] == [4, 5, 4]
    assert bert[1:3] == [391, 335141888] and bert[5:] == [48, 38, 37]
    assert claims["L15-2.2-rule-torch-function"]["ours"] is True      # all three readings
    sweep = [r for r in data["parts"]["Part 3"]["tables"]["sweep"]["rows"] if isinstance(r[0], int)]
    assert sweep[-1][0] == 256   # tensors of 1,024 float32 (the rows between are the notes' figures)
    # --quick all-reduces fewer floats: the notes' bounds on Part 3's timings are not compared
    timings = ("L15-2.1-many-small-slow", "L15-2.1-ratio-100")
    assert {claims[r]["status"] for r in timings} == {"other setting"}
