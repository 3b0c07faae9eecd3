"""lecture15/models.py: the parameter inventories of ResNet-50 and BERT-large against a ResNet-50
built with torch.nn and counted by torch's FLOP counter, and against BERT-large's known counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from common.units import MB, MiB
from lecture15.ddp_sim import ComputeModel, assign_buckets
from lecture15.models import bert_large, resnet50


# ---- inventories -------------------------------------------------------------------------------
class _Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width)
        self.downsample = None
        if stride != 1 or c_in != 4 * width:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, 4 * width, 1, stride, bias=False),
                                            nn.BatchNorm2d(4 * width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv3(self.bn2(self.conv2(self.bn1(self.conv1(x))).relu()).relu()))
        return (out + (self.downsample(x) if self.downsample is not None else x)).relu()


class _ResNet50(nn.Module):
    """torchvision's resnet50 layout, written from the paper's table with torch.nn."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c_in = 64
        stages = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
        for stage, (width, blocks, stride) in enumerate(stages, 1):
            layers = []
            for b in range(blocks):
                layers.append(_Bottleneck(c_in, width, stride if b == 0 else 1))
                c_in = 4 * width
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.bn1(self.conv1(x)).relu())
        for stage in range(1, 5):
            x = getattr(self, f"layer{stage}")(x)
        return self.fc(x.mean((2, 3)))


def test_resnet50_inventory_matches_a_torch_built_model_and_its_flop_count() -> None:
    spec = resnet50(batch=32)
    assert len(spec.params) == 161 and spec.numel == 25_557_032
    with torch.device("meta"):
        net = _ResNet50()
        reference = [(name, tuple(p.shape)) for name, p in net.named_parameters()]
        assert [(p.name, p.shape) for p in spec.params] == reference
        counter = FlopCounterMode(display=False)
        with counter:
            net(torch.empty(32, 3, 224, 224))
    # torch counts conv and matmul FLOPs (2 per MAC); our per-parameter sum must be the same total.
    assert spec.forward_flops == pytest.approx(counter.get_total_flops(), rel=1e-9)
    backward_ms = 1e3 * ComputeModel().backward_s(spec)
    assert 32.0 < backward_ms < 33.5   # the notes' ≈ 32.9 ms at 16 TFLOP/s


def test_bert_large_inventory_counts() -> None:
    spec = bert_large()
    assert len(spec.params) == 391 and spec.numel == 335_141_888
    assert spec.params[0].name == "embeddings.word_embeddings.weight"
    assert spec.params[-1].name == "pooler.dense.bias"
    # bytes at 25 × 10^6 per bucket: the notes' 48; PyTorch's 25 MiB: 37 (facts file).
    assert len(assign_buckets(spec.param_bytes(), 25 * MB)) == 48
    assert len(assign_buckets(spec.param_bytes(), 25 * MiB)) == 37
    # matmul FLOPs = 2 · tokens · (encoder matrix parameters) + attention scores + pooler
    tokens, matrices = 4 * 512, 24 * (4 * 1024 * 1024 + 2 * 4096 * 1024)
    expected = 2 * tokens * matrices + 24 * 4 * 4 * 512 * 512 * 1024 + 2 * 4 * 1024 * 1024
    assert spec.forward_flops == expected
