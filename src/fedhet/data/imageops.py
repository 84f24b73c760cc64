"""Image conversions done once at prepare time: channel count, size, statistics.

All functions take and return uint8 tensors `[N, C, H, W]` and work in chunks so that
large datasets (Tiny-ImageNet, CINIC-10) do not need a float copy of everything at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# ITU-R BT.601 luma weights, as PIL's "L" conversion uses.
LUMA = (0.299, 0.587, 0.114)
CHUNK = 4096


def to_channels(x: torch.Tensor, channels: int) -> torch.Tensor:
    """Replicate grayscale to 3 channels, or reduce RGB to luma for 1 channel."""
    have = x.shape[1]
    if have == channels:
        return x
    if have == 1 and channels == 3:
        return x.expand(-1, 3, -1, -1).contiguous()
    if have == 3 and channels == 1:
        weights = torch.tensor(LUMA, dtype=torch.float32).view(1, 3, 1, 1)
        parts = [_to_uint8((c.float() * weights).sum(1, keepdim=True)) for c in x.split(CHUNK)]
        return torch.cat(parts)
    raise ValueError(f"cannot convert {have}-channel images to {channels} channels")


def resize(x: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize to `size`×`size` (antialiased when shrinking)."""
    if x.shape[2] == size and x.shape[3] == size:
        return x
    shrink = size < max(x.shape[2], x.shape[3])
    parts = [
        _to_uint8(
            F.interpolate(
                c.float(), size=(size, size), mode="bilinear", align_corners=False, antialias=shrink
            )
        )
        for c in x.split(CHUNK)
    ]
    return torch.cat(parts)


def conform(x: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """Images with the requested channel count and size."""
    return resize(to_channels(x, channels), size)


def channel_stats(x: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (population) std of uint8 images, in [0, 1] pixel units."""
    channels = x.shape[1]
    total = torch.zeros(channels, dtype=torch.float64)
    squares = torch.zeros(channels, dtype=torch.float64)
    for c in x.split(CHUNK):
        v = c.to(torch.float64).div_(255.0)
        total += v.sum(dim=(0, 2, 3))
        squares += v.square().sum(dim=(0, 2, 3))
    count = x.shape[0] * x.shape[2] * x.shape[3]
    mean = total / count
    std = (squares / count - mean.square()).clamp_min(0).sqrt()
    return tuple(round(float(m), 6) for m in mean), tuple(round(float(s), 6) for s in std)


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    return x.round().clamp_(0, 255).to(torch.uint8)
