"""Differentiable Siamese augmentation (Zhao & Bilen, 2021), as FedLGD's distribution matching
uses it: strategy `color_crop_cutout_flip_scale_rotate`, mode "S" (one group per call).

A call draws one group uniformly and one set of parameters for it, and that one draw applies to
every image it is given: the real and the synthetic images of a class in one matching step get
the same transform (Siamese), and so does every image within a batch. Every operation is
differentiable in the images. Images are normalised `[B, C, H, W]` tensors.

| group | parameter (ratio) | operation |
|---|---|---|
| color | brightness 1.0, saturation 2.0, contrast 0.5 | x + (r - 0.5); (x - m_px)·2r + m_px; (x - m_img)·(r + 0.5) + m_img, in turn |
| crop | 0.125 | shift by integers in U{-s..s}, s = int(0.125·H + 0.5), zero fill |
| cutout | 0.5 | zero a square of side int(0.5·H + 0.5) at a random centre |
| flip | 0.5 | horizontal flip with probability 0.5 |
| scale | 1.2 | s_x, s_y ~ U[1/1.2, 1.2], bilinear resampling, zero fill |
| rotate | 15 | θ ~ U[-15°, 15°], bilinear resampling, zero fill |
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

GROUPS = ("color", "crop", "cutout", "flip", "scale", "rotate")

# The ratios of the DM/FedLGD code's ParamDiffAug.
DEFAULT_RATIOS = {"brightness": 1.0, "saturation": 2.0, "contrast": 0.5, "crop": 0.125,
                  "cutout": 0.5, "flip": 0.5, "scale": 1.2, "rotate": 15.0}


@dataclass(frozen=True)
class Draw:
    """One augmentation: its group and the random numbers it was drawn with."""

    group: str
    values: dict[str, float] = field(default_factory=dict)


def draw(gen: torch.Generator, size: int, ratios: Mapping[str, float] | None = None,
         groups: tuple[str, ...] = GROUPS) -> Draw:
    """Draw one group of `groups` uniformly, then its parameters, for images of `size`×`size`."""
    r = {**DEFAULT_RATIOS, **(ratios or {})}

    def uniform() -> float:
        return float(torch.rand((), generator=gen))

    def integer(low: int, high: int) -> int:  # U{low, ..., high - 1}
        return int(torch.randint(low, high, (), generator=gen))

    group = groups[integer(0, len(groups))]
    if group == "color":  # the offset and factors themselves
        values = {"brightness": (uniform() - 0.5) * r["brightness"],
                  "saturation": uniform() * r["saturation"],
                  "contrast": uniform() + r["contrast"]}
    elif group == "crop":
        s = int(size * r["crop"] + 0.5)
        values = {"dx": integer(-s, s + 1), "dy": integer(-s, s + 1)}
    elif group == "cutout":
        side = int(size * r["cutout"] + 0.5)
        values = {"side": side, "cx": integer(0, size + (1 - side % 2)),
                  "cy": integer(0, size + (1 - side % 2))}
    elif group == "flip":
        values = {"flip": float(uniform() < r["flip"])}
    elif group == "scale":
        low = 1.0 / r["scale"]
        values = {"sx": uniform() * (r["scale"] - low) + low,
                  "sy": uniform() * (r["scale"] - low) + low}
    elif group == "rotate":
        values = {"theta": (uniform() - 0.5) * 2 * r["rotate"] / 180 * math.pi}
    else:
        raise ValueError(f"unknown augmentation group '{group}'; valid: {', '.join(GROUPS)}")
    return Draw(group, values)


def augment(x: torch.Tensor, d: Draw) -> torch.Tensor:
    """`x` transformed by the draw `d` (the same transform for every image)."""
    v = d.values
    if d.group == "color":
        x = x + v["brightness"]
        m = x.mean(dim=1, keepdim=True)
        x = (x - m) * v["saturation"] + m
        m = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - m) * v["contrast"] + m
    if d.group == "crop":
        return _shift(x, int(v["dx"]), int(v["dy"]))
    if d.group == "cutout":
        return x * _cutout_mask(x, int(v["side"]), int(v["cx"]), int(v["cy"]))
    if d.group == "flip":
        return x.flip(3) if v["flip"] else x
    if d.group == "scale":
        return _affine(x, [[v["sx"], 0.0], [0.0, v["sy"]]])
    if d.group == "rotate":
        c, s = math.cos(v["theta"]), math.sin(v["theta"])
        return _affine(x, [[c, s], [-s, c]])
    raise ValueError(f"unknown augmentation group '{d.group}'; valid: {', '.join(GROUPS)}")


def _shift(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """out[..., i, j] = x[..., i + dx, j + dy], zero where that lies outside the image."""
    h, w = x.shape[-2:]
    padded = F.pad(x, (abs(dy), abs(dy), abs(dx), abs(dx)))
    return padded[..., abs(dx) + dx:abs(dx) + dx + h, abs(dy) + dy:abs(dy) + dy + w]


def _cutout_mask(x: torch.Tensor, side: int, cx: int, cy: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    mask = torch.ones(h, w, dtype=x.dtype, device=x.device)
    top, left = max(cx - side // 2, 0), max(cy - side // 2, 0)
    mask[top:max(cx - side // 2 + side, 0), left:max(cy - side // 2 + side, 0)] = 0
    return mask


def _affine(x: torch.Tensor, matrix: list[list[float]]) -> torch.Tensor:
    theta = torch.tensor([[*matrix[0], 0.0], [*matrix[1], 0.0]], dtype=x.dtype, device=x.device)
    grid = F.affine_grid(theta.expand(x.shape[0], 2, 3), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
