"""MobileNetV2 (CCVR's CIFAR-100 / CINIC-10 model), built from torchvision's implementation.

torchvision's ``mobilenet_v2(weights=None, width_mult=width)`` supplies the layers (random
initialisation, never pretrained weights); its ``features`` become ``body`` and its classifier
(Dropout(0.2) → Linear) is replaced by ``head`` alone, so the penultimate feature is the pooled
output of the final 1×1 convolution: 1280-d (torchvision keeps 1280 for width ≤ 1 and scales it
above). The stem convolution is rebuilt to take ``in_channels`` inputs; its stride is
``stem_stride``, by default 1 for inputs up to 64 px (CIFAR/CINIC: 32 px keeps a 2×2 map before
pooling instead of 1×1) and torchvision's 2 above.

Split points, cut where the resolution is about to halve: ``layer1`` = stem + blocks with 16 and 24
channels, ``layer2`` = 32, ``layer3`` = 64 and 96, ``layer4`` = 160, 320 and the 1×1 convolution to
1280; ``penultimate`` = global average pool, flattened.

torchvision is imported inside `mobilenetv2` only: importing ``fedhet.models`` stays cheap.
"""

from __future__ import annotations

from torch import nn

from fedhet.models.base import FedModel

# Indices into torchvision's ``features`` where each split stage ends (exclusive).
STAGE_ENDS = {"layer1": 4, "layer2": 7, "layer3": 14, "layer4": 19}
CIFAR_MAX_SIZE = 64


class MobileNetV2(FedModel):
    """torchvision MobileNetV2 body with split points ``layer1`` … ``layer4``, ``penultimate``."""

    def __init__(
        self,
        body: nn.Sequential,
        num_classes: int,
        in_channels: int,
        image_size: int,
    ) -> None:
        super().__init__()
        self.body = body
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        stages: list[tuple[str, nn.Module]] = []
        start = 0
        for name, end in STAGE_ENDS.items():
            stages.append((name, body[start:end]))
            start = end
        stages.append(("penultimate", self.pool))
        self._set_stages(
            stages, num_classes=num_classes, in_channels=in_channels, image_size=image_size
        )


def mobilenetv2(
    num_classes: int,
    in_channels: int,
    image_size: int,
    width: float,
    *,
    stem_stride: int | None = None,
) -> MobileNetV2:
    """MobileNetV2 with ``width_mult=width``; ``stem_stride`` None = 1 up to 64 px, else 2."""
    from torchvision.models import mobilenet_v2

    if stem_stride is None:
        stem_stride = 1 if image_size <= CIFAR_MAX_SIZE else 2
    if stem_stride not in (1, 2):
        raise ValueError(f"stem_stride must be 1 or 2, got {stem_stride}")
    body = mobilenet_v2(weights=None, width_mult=width).features
    if len(body) != max(STAGE_ENDS.values()):
        raise RuntimeError(f"unexpected torchvision MobileNetV2 layout: {len(body)} feature blocks")
    old = body[0][0]
    stem = nn.Conv2d(in_channels, old.out_channels, 3, stride=stem_stride, padding=1, bias=False)
    nn.init.kaiming_normal_(stem.weight, mode="fan_out")  # torchvision's initialisation
    body[0][0] = stem
    return MobileNetV2(body, num_classes, in_channels, image_size)
