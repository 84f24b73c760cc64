"""Compact Convolutional Transformer CCT-7/3×1 (Hassani et al., 2021; FedBR's CIFAR-100 model).

The reference is SHI-Labs/Compact-Transformers ``cct_7_3x1_32_c100``, which FedBR's code runs as
its featurizer (``networks.ViT``, final ``fc`` disabled, its own linear classifier on top):

- tokenizer: conv 3×3, stride 1, padding 1, no bias, to ``dim`` channels → ReLU → max-pool 3,
  stride 2, padding 1; the map is flattened into ⌈H/2⌉² tokens (256 at 32 px), then a learnable
  positional embedding (truncated normal, std 0.2) is added;
- 7 encoder layers with 4 heads, MLP ratio 2, GELU, attention dropout 0.1, no other dropout,
  stochastic depth rising linearly from 0 to 0.1. As in the reference, a layer is
  ``x = x + drop_path(attn(pre_norm(x))); x = norm1(x); x = x + drop_path(mlp(x))``: pre-norm
  attention, then the residual stream itself is normalised before the MLP;
- a final LayerNorm and sequence pooling: softmax(Linear(dim, 1)) over the tokens weights their sum.

``dim`` = 256 at width 1 (``width`` scales it, rounded to a multiple of the 4 heads). Linear layers
are initialised truncated-normal (std 0.02) with zero bias, the tokenizer's convolution Kaiming
normal, as in the reference. 3,783,269 parameters for 3×32×32 inputs and 100 classes (the
reference's README lists 3.760 M for its 10-class CIFAR-10 variant).

Split points: ``tokens`` (``[N, dim]`` after the tokenizer and positional embedding), ``block1`` …
``block7`` (after each encoder layer) and ``penultimate`` (the pooled ``dim``-vector).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedhet.models.base import FedModel, probe_shapes

LAYERS = 7
HEADS = 4
DIM = 256
MLP_RATIO = 2
ATTENTION_DROPOUT = 0.1
STOCHASTIC_DEPTH = 0.1
POS_EMB_STD = 0.2
LINEAR_STD = 0.02


class Tokenizer(nn.Module):
    """Conv → ReLU → max-pool flattened to ``[B, N, dim]`` tokens, plus a positional embedding."""

    def __init__(self, in_channels: int, image_size: int, dim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, dim, 3, stride=1, padding=1, bias=False),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        (shape,) = probe_shapes([self.conv], in_channels, image_size)
        self.pos_emb = nn.Parameter(torch.zeros(1, shape[1] * shape[2], dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x).flatten(2).transpose(1, 2) + self.pos_emb


class Attention(nn.Module):
    """Multi-head self-attention: fused q/k/v map (no bias), softmax(qkᵀ/√d)·v, output map."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = self.drop((q @ k.transpose(-2, -1) * self.scale).softmax(dim=-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class DropPath(nn.Module):
    """Stochastic depth: in training, zero a sample's residual branch with probability ``p`` and
    scale the kept ones by 1/(1−p)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty(x.shape[0], *([1] * (x.dim() - 1)), dtype=x.dtype, device=x.device)
        return x * keep.bernoulli_(1.0 - self.p) / (1.0 - self.p)


class EncoderLayer(nn.Module):
    """One CCT encoder layer (the reference's ``TransformerEncoderLayer`` with dropout 0)."""

    def __init__(self, dim: int, heads: int, hidden: int, drop_path: float) -> None:
        super().__init__()
        self.pre_norm = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, ATTENTION_DROPOUT)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm1(x + self.drop_path(self.attn(self.pre_norm(x))))
        return x + self.drop_path(self.mlp(x))


class SeqPool(nn.Module):
    """Final LayerNorm, then the token average weighted by softmax(Linear(dim, 1)) over tokens."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attention_pool = nn.Linear(dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm(x)
        weights = self.attention_pool(x).softmax(dim=1)
        return (weights.transpose(1, 2) @ x).squeeze(1)


class CCT(FedModel):
    """CCT-7/3×1 with split points ``tokens``, ``block1`` … ``block7``, ``penultimate``."""

    def __init__(self, num_classes: int, in_channels: int, image_size: int, width: float) -> None:
        super().__init__()
        dim = HEADS * max(1, round(DIM * width / HEADS))
        self.tokenizer = Tokenizer(in_channels, image_size, dim)
        rates = torch.linspace(0, STOCHASTIC_DEPTH, LAYERS).tolist()
        self.blocks = nn.ModuleList(
            EncoderLayer(dim, HEADS, MLP_RATIO * dim, rate) for rate in rates
        )
        self.pool = SeqPool(dim)
        self._set_stages(
            [
                ("tokens", self.tokenizer),
                *((f"block{i + 1}", block) for i, block in enumerate(self.blocks)),
                ("penultimate", self.pool),
            ],
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=image_size,
        )
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=LINEAR_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.kaiming_normal_(self.tokenizer.conv[0].weight)
        nn.init.trunc_normal_(self.tokenizer.pos_emb, std=POS_EMB_STD)


def cct(num_classes: int, in_channels: int, image_size: int, width: float) -> CCT:
    """CCT-7/3×1 (``cct_7_3x1_32_c100``, FedBR's CIFAR-100 model): 3.78 M parameters at 32 px,
    100 classes, width 1."""
    return CCT(num_classes, in_channels, image_size, width)
