"""Small convolutional networks: MOON's simple CNN, DomainBed's 4-layer MNIST CNN, DM's ConvNet.

``simplecnn`` (CCVR's CIFAR-10 model, from MOON's ``ModelFedCon`` with the ``simple-cnn`` base):
conv 6@5×5 → ReLU → max-pool 2 → conv 16@5×5 → ReLU → max-pool 2 → flatten (400 at 32 px, 16·w at
16 px, 256·w at 28 px) → fc 120 → ReLU → fc 84 → ReLU, then MOON's projection head fc 84 → ReLU →
fc ``proj_dim`` (no activation); the classifier reads the projection, as in MOON.
Split points: ``conv`` (4-D conv output), ``hidden`` (the 84-d representation), ``penultimate``
(the ``proj_dim``-d projection). With ``projection=False`` the head reads the 84-d representation
and the split points are ``conv``, ``penultimate``.

``cnn4`` (FedBR's rotated-MNIST model): FedBR runs DomainBed, whose 28×28 featurizer is
``MNIST_CNN``: conv 64@3×3 → conv 128@3×3 stride 2 → conv 128@3×3 → conv 128@3×3, each followed by
ReLU then GroupNorm(8 groups), then a global average pool: a 128·w-d feature.
Split points: ``block1`` … ``block4`` and ``penultimate``.

``convnet`` (FedLGD and dataset distillation by distribution matching, DM): ``depth`` blocks of
conv 128@3×3 (padding 1) → instance norm (GroupNorm(C, C, affine=True)) → ReLU → avg-pool 2, then
flatten: 128·w·(H/2^depth)² features, 2048 at 32 px and 1152 at 28 px (28 → 14 → 7 → 3).
Split points: ``block1`` … ``block<depth>`` and ``penultimate``.
"""

from __future__ import annotations

import math

from torch import nn

from fedhet.models.base import FedModel, probe_shapes, scaled


class SimpleCNN(FedModel):
    """MOON's simple CNN with an optional 2-layer projection head."""

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        image_size: int,
        width: float,
        projection: bool,
        proj_dim: int,
    ) -> None:
        super().__init__()
        c1, c2 = scaled(6, width), scaled(16, width)
        h1, h2 = scaled(120, width), scaled(84, width)
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, c1, 5),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(c1, c2, 5),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
        )
        try:
            (conv_shape,) = probe_shapes([self.conv], in_channels, image_size)
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"simplecnn cannot take {image_size} px inputs: {err}") from err
        self.fc = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(conv_shape), h1),
            nn.ReLU(),
            nn.Linear(h1, h2),
            nn.ReLU(),
        )
        if projection:
            self.proj = nn.Sequential(nn.Linear(h2, h2), nn.ReLU(), nn.Linear(h2, proj_dim))
            stages = [("conv", self.conv), ("hidden", self.fc), ("penultimate", self.proj)]
        else:
            stages = [("conv", self.conv), ("penultimate", self.fc)]
        self._set_stages(
            stages, num_classes=num_classes, in_channels=in_channels, image_size=image_size
        )


class CNN4(FedModel):
    """DomainBed's ``MNIST_CNN``: four conv → ReLU → GroupNorm blocks and a global average pool."""

    def __init__(self, num_classes: int, in_channels: int, image_size: int, width: float) -> None:
        super().__init__()
        c1, c2 = scaled(64, width), scaled(128, width)
        specs = ((in_channels, c1, 1), (c1, c2, 2), (c2, c2, 1), (c2, c2, 1))
        self.block1, self.block2, self.block3, self.block4 = (
            nn.Sequential(
                nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1),
                nn.ReLU(),
                nn.GroupNorm(math.gcd(8, c_out), c_out),
            )
            for c_in, c_out, stride in specs
        )
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self._set_stages(
            [
                ("block1", self.block1),
                ("block2", self.block2),
                ("block3", self.block3),
                ("block4", self.block4),
                ("penultimate", self.pool),
            ],
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=image_size,
        )


class ConvNet(FedModel):
    """DM/FedLGD ConvNet: conv → instance norm → ReLU → avg-pool blocks, then flatten."""

    def __init__(
        self, num_classes: int, in_channels: int, image_size: int, width: float, depth: int
    ) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"convnet depth must be >= 1, got {depth}")
        channels = scaled(128, width)
        self.blocks = nn.ModuleList()
        c_in = in_channels
        for _ in range(depth):
            self.blocks.append(
                nn.Sequential(
                    nn.Conv2d(c_in, channels, 3, padding=1),
                    nn.GroupNorm(channels, channels, affine=True),
                    nn.ReLU(),
                    nn.AvgPool2d(2, 2),
                )
            )
            c_in = channels
        self.flatten = nn.Flatten()
        stages = [(f"block{i + 1}", block) for i, block in enumerate(self.blocks)]
        self._set_stages(
            [*stages, ("penultimate", self.flatten)],
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=image_size,
        )


def simplecnn(
    num_classes: int,
    in_channels: int,
    image_size: int,
    width: float,
    *,
    projection: bool = True,
    proj_dim: int = 256,
) -> SimpleCNN:
    """MOON's simple CNN; ``projection`` adds the 84 → 84 → ``proj_dim`` projection."""
    if proj_dim < 1:
        raise ValueError(f"proj_dim must be >= 1, got {proj_dim}")
    return SimpleCNN(num_classes, in_channels, image_size, width, bool(projection), int(proj_dim))


def cnn4(num_classes: int, in_channels: int, image_size: int, width: float) -> CNN4:
    """4-layer CNN for rotated MNIST (DomainBed's MNIST_CNN, as run by FedBR); 128·w-d feature."""
    return CNN4(num_classes, in_channels, image_size, width)


def convnet(
    num_classes: int, in_channels: int, image_size: int, width: float, *, depth: int = 3
) -> ConvNet:
    """DM/FedLGD ConvNet (width 128, instance norm, avg-pool); ``depth`` conv blocks."""
    return ConvNet(num_classes, in_channels, image_size, width, int(depth))
