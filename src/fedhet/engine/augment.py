"""Batched on-device augmentation: random crop with padding, horizontal flip, rotation.

The whole batch is augmented with a few tensor ops on the training device, instead of
per-sample PIL transforms in DataLoader workers. Crops pad with zeros in pixel space
before normalisation, as torchvision's RandomCrop(padding=p) does on images. A batch's random
draws (`Augmenter.draw`) are made apart from the augmentation that uses them (`Augmenter.apply`),
in the same order as ever, so a CUDA graph can replay the augmentation on draws made outside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def crop_offsets(n: int, padding: int, gen: torch.Generator) -> torch.Tensor:
    """Random crop offsets of `n` samples, `[2, n]` (rows, columns), each in 0 … 2·padding."""
    return torch.randint(0, 2 * padding + 1, (2, n), device=gen.device, generator=gen)


def crop(x: torch.Tensor, padding: int, offsets: torch.Tensor) -> torch.Tensor:
    """Pad by `padding` and crop back to the input size at each sample's `offsets`."""
    b, c, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    rows = offsets[0][:, None] + torch.arange(h, device=x.device)
    cols = offsets[1][:, None] + torch.arange(w, device=x.device)
    out = padded.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * padding))
    return out.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def random_crop(x: torch.Tensor, padding: int, gen: torch.Generator) -> torch.Tensor:
    """Pad by `padding` and crop back to the input size at a random offset per sample."""
    if padding <= 0:
        return x
    return crop(x, padding, crop_offsets(x.shape[0], padding, gen))


def flip_mask(n: int, gen: torch.Generator) -> torch.Tensor:
    """Which of `n` samples to flip: each with probability 1/2."""
    return torch.rand(n, device=gen.device, generator=gen) < 0.5


def flip(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The samples of `mask` flipped horizontally."""
    return torch.where(mask[:, None, None, None], x.flip(3), x)


def random_flip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Flip each sample horizontally with probability 1/2."""
    return flip(x, flip_mask(x.shape[0], gen))


@dataclass(frozen=True)
class Draws:
    """The random draws of one batch's augmentation, made before it is augmented (outside a
    CUDA graph, which then reads them): crop offsets `[2, B]` and flips `[B]`, None where the
    augmentation does not crop or flip."""

    offsets: torch.Tensor | None = None
    flips: torch.Tensor | None = None

    def held(self, hold: Callable[[str, torch.Tensor], torch.Tensor], name: str) -> Draws:
        """These draws through `hold` (`ClientContext.hold`), as `name.offsets`, `name.flips`."""
        return Draws(*(None if t is None else hold(f"{name}.{field}", t)
                       for field, t in (("offsets", self.offsets), ("flips", self.flips))))


def rotate(x: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
    """Rotate each sample by its own angle (degrees, counter-clockwise), zero fill."""
    theta = degrees.to(x.dtype) * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    zeros = torch.zeros_like(cos)
    mat = torch.stack([torch.stack([cos, -sin, zeros], 1), torch.stack([sin, cos, zeros], 1)], 1)
    grid = F.affine_grid(mat, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, align_corners=False, padding_mode="zeros")


class Augmenter:
    """Turns a batch of images into a normalised float batch, augmenting it if asked.

    Images are uint8 (0 to 255, as every dataset of the package caches them) or floats already
    in [0, 1] (a dataset a user brings): see `to_float`.
    `mode`: `none`, `crop`, `crop_flip` (CIFAR-style) — rotation is applied separately
    from per-sample angles that the partition assigns.
    """

    MODES = ("none", "crop", "crop_flip")

    def __init__(self, mode: str, mean: tuple[float, ...], std: tuple[float, ...],
                 image_size: int, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown augmentation '{mode}'; valid: {', '.join(self.MODES)}")
        self.mode = mode
        # RandomCrop(32, padding=4) at CIFAR size; the same fraction for other sizes.
        self.padding = max(1, round(image_size / 8))
        self.mean = torch.tensor(mean, device=device, dtype=dtype).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=device, dtype=dtype).view(1, -1, 1, 1)
        self.dtype = dtype

    def to_float(self, x: torch.Tensor) -> torch.Tensor:
        """`x` as floats in [0, 1] of the augmenter's dtype: uint8 pixels divided by 255; float
        images, taken to be in [0, 1] already, only converted to that dtype (`x` itself if it
        has it), never rescaled. The caller's tensor (a slice of a test set) is never changed."""
        if x.dtype == torch.uint8:
            return x.to(self.dtype).div_(255.0)  # a new tensor: divided in place
        if x.is_floating_point():
            return x.to(self.dtype)
        raise TypeError(f"images must be uint8 (0 to 255) or floats in [0, 1], not {x.dtype}: "
                        "convert them where the dataset is loaded")

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def draw(self, n: int, gen: torch.Generator) -> Draws:
        """The random draws of augmenting `n` images (crop offsets, then flips), from `gen`."""
        offsets = crop_offsets(n, self.padding, gen) if self.mode in ("crop", "crop_flip") else None
        flips = flip_mask(n, gen) if self.mode == "crop_flip" else None
        return Draws(offsets, flips)

    def apply(self, x: torch.Tensor, draws: Draws,
              angles: torch.Tensor | None = None) -> torch.Tensor:
        """Augment (with `draws`) and normalise a training batch (uint8, or floats in [0, 1])."""
        x = self.to_float(x)
        if angles is not None:
            x = rotate(x, angles)
        if draws.offsets is not None:
            x = crop(x, self.padding, draws.offsets)
        if draws.flips is not None:
            x = flip(x, draws.flips)
        return self.normalize(x)

    def train(self, x: torch.Tensor, gen: torch.Generator,
              angles: torch.Tensor | None = None) -> torch.Tensor:
        """Augment and normalise a training batch (uint8, or floats in [0, 1])."""
        return self.apply(x, self.draw(x.shape[0], gen), angles)

    def test(self, x: torch.Tensor, angles: torch.Tensor | None = None) -> torch.Tensor:
        """Normalise an evaluation batch (uint8, or floats in [0, 1]; rotated when the test set
        is)."""
        x = self.to_float(x)
        if angles is not None:
            x = rotate(x, angles)
        return self.normalize(x)
