"""VGG-9 (VHL/FedImpro's ``ModerateCNN``) and VGG-11 (FedImpro's ``vggmodel.vgg11``), no batch norm.

Both are a stack of 3×3 convolutions (padding 1) + ReLU, grouped into blocks that end in a 2×2
max-pool, then a fully connected part whose output (512·w) is the penultimate feature.

- ``vgg9`` = ModerateCNN: blocks [32, 64, M] [128, 128, M, Dropout2d(0.05)] [256, 256, M];
  flatten (4096 at 32 px, 256·w·(H/8)² in general); Dropout(0.1) → Linear(·, 512) → ReLU →
  Linear(512, 512) → ReLU → Dropout(0.1). Default PyTorch initialisation, as in the reference.
- ``vgg11`` = configuration "A": blocks [64, M] [128, M] [256, 256, M] [512, 512, M] [512, 512, M];
  Dropout(0.5) → Linear(512, 512) → ReLU → Dropout(0.5) → Linear(512, 512) → ReLU. Convolutions are
  initialised N(0, 2/(k²·C_out)) with zero bias, as in the reference.

Small inputs: a max-pool is skipped when the map is already 1×1, and ``vgg11`` ends its conv stack
with an adaptive average pool to 1×1, which changes nothing at 32 px (five pools already give 1×1)
and keeps the flattened conv output 512·w wide at 16, 28 or 64 px.

``vgg11(fc=False)`` is FedBR's VGG-11 "without its FC layers" (its code's ``CIFAR_Vgg``:
torchvision's ``vgg11().features`` + adaptive average pool to 1×1): the conv stack above, whose
pooled 512·w output is the penultimate feature, so the head is Linear(512·w, classes). Its
parameters without the head are 9,220,480 for 3 input channels at width 1 (FedBR T7: 9.2 M).

Split points: ``block1``, ``block2``, … (4-D output of each block but the last), ``conv`` (the
flattened output of the whole conv stack: FedImpro's VGG-11 split, 512·w) and ``penultimate``.
Without the fully connected part the flattened conv output is itself the penultimate feature:
``block1`` … ``block4``, ``penultimate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import nn

from fedhet.models.base import FedModel, scaled

POOL = "M"
VGG9_BLOCKS: tuple[tuple[int | str, ...], ...] = (
    (32, 64, POOL),
    (128, 128, POOL),
    (256, 256, POOL),
)
VGG11_BLOCKS: tuple[tuple[int | str, ...], ...] = (
    (64, POOL),
    (128, POOL),
    (256, 256, POOL),
    (512, 512, POOL),
    (512, 512, POOL),
)


class VGG(FedModel):
    """Plain VGG: conv blocks, flatten, a fully connected part, linear head."""

    def __init__(
        self,
        blocks: tuple[tuple[int | str, ...], ...],
        make_fc: Callable[[int], nn.Sequential] | None,
        *,
        num_classes: int,
        in_channels: int,
        image_size: int,
        width: float,
        block_dropout: dict[int, float],
        global_pool: bool,
    ) -> None:
        """Build a VGG.

        Args:
            blocks: per block, conv widths (before scaling) and ``"M"`` for a max-pool.
            make_fc: flattened conv size → fully connected part (ending at the penultimate feature);
                None: the flattened conv output is the penultimate feature.
            block_dropout: block index → Dropout2d probability appended to that block.
            global_pool: end the conv stack with an adaptive average pool to 1×1.
        """
        super().__init__()
        convs: list[nn.Sequential] = []
        channels, size = in_channels, image_size
        for index, spec in enumerate(blocks):
            layers: list[nn.Module] = []
            for item in spec:
                if item == POOL:
                    if size >= 2:
                        layers.append(nn.MaxPool2d(2, 2))
                        size //= 2
                else:
                    out = scaled(int(item), width)
                    layers += [nn.Conv2d(channels, out, 3, padding=1), nn.ReLU()]
                    channels = out
            if index in block_dropout:
                layers.append(nn.Dropout2d(block_dropout[index]))
            convs.append(nn.Sequential(*layers))
        if global_pool:
            convs[-1].append(nn.AdaptiveAvgPool2d(1))
            size = 1
        convs[-1].append(nn.Flatten())
        self.conv = nn.Sequential(*convs)
        stages = [(f"block{i + 1}", block) for i, block in enumerate(convs[:-1])]
        if make_fc is None:
            stages.append(("penultimate", convs[-1]))
        else:
            self.fc = make_fc(channels * size * size)
            stages += [("conv", convs[-1]), ("penultimate", self.fc)]
        self._set_stages(
            stages, num_classes=num_classes, in_channels=in_channels, image_size=image_size
        )


def vgg9(num_classes: int, in_channels: int, image_size: int, width: float) -> VGG:
    """VGG-9 = ModerateCNN (VHL, FedImpro appendix F.4): 3.5M parameters at 32 px, width 1."""
    hidden = scaled(512, width)

    def make_fc(flat: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Dropout(0.1),
            nn.Linear(flat, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
        )

    return VGG(
        VGG9_BLOCKS,
        make_fc,
        num_classes=num_classes,
        in_channels=in_channels,
        image_size=image_size,
        width=width,
        block_dropout={1: 0.05},
        global_pool=False,
    )


def vgg11(
    num_classes: int, in_channels: int, image_size: int, width: float, *, fc: bool = True
) -> VGG:
    """VGG-11 without batch norm: FedImpro's with its fully connected part; ``fc=False``:
    FedBR's conv stack + average pool, read directly by the head (rotated CIFAR-10, PACS)."""
    hidden = scaled(512, width)

    def make_fc(flat: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(flat, hidden),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )

    model = VGG(
        VGG11_BLOCKS,
        make_fc if fc else None,
        num_classes=num_classes,
        in_channels=in_channels,
        image_size=image_size,
        width=width,
        block_dropout={},
        global_pool=True,
    )
    for module in model.conv.modules():
        if isinstance(module, nn.Conv2d):
            fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
            nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
            nn.init.zeros_(module.bias)
    return model
