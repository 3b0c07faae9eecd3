"""Parameter inventories of ResNet-50 and BERT-large, built from the architectures (nothing downloaded).

    from lecture15.models import resnet50, bert_large
    spec = resnet50(batch=32)      # spec.params: 161 Param, in registration (forward) order

A `Param` is what DDP's bucketing and lecture 15's timeline need about one parameter tensor: its
name, shape, bytes (fp32) and the forward FLOPs of the operation that produces its gradient in
backward. Those FLOPs are a model, stated here once:

  - convolution / linear weight: 2 · MACs of that layer for the whole batch (a conv counted at its
    output resolution); the bias, BatchNorm and LayerNorm parameters get 0 — elementwise work that
    a matmul-centred FLOP count leaves out;
  - embeddings get 0 (a lookup forward, a scatter-add backward: memory-bound, no matmul);
  - BERT's attention scores (Q·Kᵀ and A·V, 2·s²·d FLOPs each per sequence and layer) have no
    parameter of their own: they are put on the value and key weights, the first parameters whose
    gradients wait for them in backward.

Pure Python: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FP32_BYTES = 4


@dataclass(frozen=True)
class Param:
    """One parameter tensor: `forward_flops` is the forward cost of the op its gradient waits for."""

    name: str
    shape: tuple[int, ...]
    forward_flops: float = 0.0
    bytes_per_element: int = FP32_BYTES

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.bytes_per_element


@dataclass
class ModelSpec:
    """A model as DDP sees it: parameters in registration order (= forward order here)."""

    name: str
    params: list[Param] = field(default_factory=list)
    description: str = ""

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.params)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.params)

    @property
    def forward_flops(self) -> float:
        return sum(p.forward_flops for p in self.params)

    def param_bytes(self) -> list[int]:
        return [p.nbytes for p in self.params]


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _conv(name: str, c_in: int, c_out: int, kernel: int, out_size: int, batch: int) -> Param:
    """A bias-free conv's weight; its forward FLOPs are 2 × MACs at its output resolution."""
    macs = batch * out_size * out_size * c_out * c_in * kernel * kernel
    return Param(f"{name}.weight", (c_out, c_in, kernel, kernel), 2.0 * macs)


def _batchnorm(name: str, channels: int) -> list[Param]:
    """A BatchNorm's weight and bias (FLOPs ≈ 0)."""
    return [Param(f"{name}.weight", (channels,)), Param(f"{name}.bias", (channels,))]


def _bottleneck(prefix: str, c_in: int, width: int, stride: int, size: int, batch: int
                ) -> tuple[list[Param], int]:
    """One v1.5 bottleneck's tensors in registration order, and its output resolution."""
    out = _conv_out(size, 3, stride, 1)
    params = [_conv(f"{prefix}.conv1", c_in, width, 1, size, batch),   # v1.5: 1×1 at the input resolution
              *_batchnorm(f"{prefix}.bn1", width),
              _conv(f"{prefix}.conv2", width, width, 3, out, batch),   # the stride sits here
              *_batchnorm(f"{prefix}.bn2", width),
              _conv(f"{prefix}.conv3", width, 4 * width, 1, out, batch),
              *_batchnorm(f"{prefix}.bn3", 4 * width)]
    if stride != 1 or c_in != 4 * width:
        params += [_conv(f"{prefix}.downsample.0", c_in, 4 * width, 1, out, batch),
                   *_batchnorm(f"{prefix}.downsample.1", 4 * width)]
    return params, out


def resnet50(batch: int = 32, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    """ResNet-50 in torchvision's v1.5 layout (stride 2 in the 3×3 conv): 161 tensors, 25,557,032 parameters.

    Registration order as torchvision's: conv1, bn1, then per bottleneck conv1, bn1, conv2, bn2,
    conv3, bn3, downsample.0 (1×1 conv), downsample.1 (BN); fc last.
    """
    if batch < 1 or image_size < 32 or num_classes < 1:
        raise ValueError("batch and num_classes must be >= 1 and image_size >= 32")
    size = _conv_out(image_size, 7, 2, 3)           # 224 -> 112
    params = [_conv("conv1", 3, 64, 7, size, batch), *_batchnorm("bn1", 64)]
    size = _conv_out(size, 3, 2, 1)                 # max-pool 3×3 stride 2: 112 -> 56
    c_in = 64
    stages = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]  # (width, blocks, first stride)
    for stage, (width, blocks, first_stride) in enumerate(stages, start=1):
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            block_params, out = _bottleneck(f"layer{stage}.{block}", c_in, width, stride, size, batch)
            params += block_params
            c_in, size = 4 * width, out
    params.append(Param("fc.weight", (num_classes, c_in), 2.0 * batch * c_in * num_classes))
    params.append(Param("fc.bias", (num_classes,)))
    return ModelSpec("ResNet-50", params,
                     f"torchvision v1.5 layout, batch {batch}, {image_size}×{image_size}")


def bert_large(batch: int = 4, seq_len: int = 512, layers: int = 24, hidden: int = 1024,
               intermediate: int = 4096, vocab: int = 30522, max_positions: int = 512,
               type_vocab: int = 2) -> ModelSpec:
    """BERT-large as Hugging Face's BertModel with pooler: 391 tensors, 335,141,888 parameters.

    FLOPs for `batch` sequences of `seq_len` tokens: each weight matrix 2 · tokens · (its size),
    attention scores 4 · s² · d per sequence and layer, the pooler on one token per sequence.
    """
    if min(batch, seq_len, layers, hidden, intermediate, vocab, max_positions, type_vocab) < 1:
        raise ValueError("every BERT dimension must be >= 1")
    tokens = batch * seq_len
    params: list[Param] = []

    def linear(name: str, d_in: int, d_out: int, rows: int, extra_flops: float = 0.0) -> None:
        params.append(Param(f"{name}.weight", (d_out, d_in), 2.0 * rows * d_in * d_out + extra_flops))
        params.append(Param(f"{name}.bias", (d_out,)))

    def layernorm(name: str) -> None:
        params.extend([Param(f"{name}.weight", (hidden,)), Param(f"{name}.bias", (hidden,))])

    params.append(Param("embeddings.word_embeddings.weight", (vocab, hidden)))
    params.append(Param("embeddings.position_embeddings.weight", (max_positions, hidden)))
    params.append(Param("embeddings.token_type_embeddings.weight", (type_vocab, hidden)))
    layernorm("embeddings.LayerNorm")
    scores = 2.0 * batch * seq_len * seq_len * hidden   # one of Q·Kᵀ or A·V, all heads together
    for layer in range(layers):
        prefix = f"encoder.layer.{layer}"
        linear(f"{prefix}.attention.self.query", hidden, hidden, tokens)
        linear(f"{prefix}.attention.self.key", hidden, hidden, tokens, extra_flops=scores)    # Q·Kᵀ
        linear(f"{prefix}.attention.self.value", hidden, hidden, tokens, extra_flops=scores)  # A·V
        linear(f"{prefix}.attention.output.dense", hidden, hidden, tokens)
        layernorm(f"{prefix}.attention.output.LayerNorm")
        linear(f"{prefix}.intermediate.dense", hidden, intermediate, tokens)
        linear(f"{prefix}.output.dense", intermediate, hidden, tokens)
        layernorm(f"{prefix}.output.LayerNorm")
    linear("pooler.dense", hidden, hidden, batch)       # the [CLS] token of each sequence only
    return ModelSpec("BERT-large", params, f"BertModel with pooler, batch {batch} × {seq_len} tokens")
