"""CIFAR-style ResNets (VHL's and FedImpro's ``resnet*_v2``).

The CIFAR variant replaces ImageNet's 7×7 stride-2 stem and max-pool by one 3×3 stride-1
convolution, so a 32 px image keeps 32×32 maps in ``layer1`` and 4×4 in ``layer4``. Stages have
64·w, 128·w, 256·w, 512·w base channels with strides 1, 2, 2, 2; an adaptive average pool makes
the penultimate feature 512·w (BasicBlock) or 2048·w (Bottleneck) wide for any input size.

Split points: ``layer1`` … ``layer4`` (the 4-D output of each stage; ``layer1`` includes the
stem) and ``penultimate`` (the pooled, flattened feature). FedImpro's default split ``layer2`` is
128×16×16 = 32768 values per sample at 32 px.

``resnet18in`` is ResNet-18 as FedLGD's code builds it (networks.py ``ResNet18``): the same CIFAR
stem and stages, but affine instance norm (``GroupNorm(C, C)``, as fedhet's ``convnet``) in place of
batch norm, and a fixed ``avg_pool2d(4)`` then flatten instead of the adaptive pool. At 28 or 32 px
``layer4`` is 4×4, so the pooled feature is 512·w wide; at 96 px it is 12×12, the pooled map 3×3
and the flattened feature 4608·w, which a Linear(4608·w, 512·w)–ReLU maps back to 512·w. That MLP
is the first half of the authors' classifier; here it belongs to the ``penultimate`` stage, so the
``head`` is Linear(512·w, num_classes) at every size. Parameters at width 1: 11 173 962 (28 px, 10
classes), 13 529 666 (96 px, 2 classes), FedLGD Table 7. The authors' model takes only 28, 32 and
96 px; here a ``layer4`` map smaller than 4×4 (inputs under 25 px) is averaged whole, and the MLP
appears whenever the pooled map is larger than 1×1.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from fedhet.models.base import FedModel, probe_shapes, scaled

Norm = Callable[[int], nn.Module]


def instance_norm(channels: int) -> nn.GroupNorm:
    """Affine instance norm written as FedLGD's code writes it: one group per channel."""
    return nn.GroupNorm(channels, channels, affine=True)


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with ``norm`` (batch norm by default) and an identity (or 1×1
    projection) shortcut."""

    expansion = 1

    def __init__(
        self, in_planes: int, planes: int, stride: int, norm: Norm = nn.BatchNorm2d
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = norm(planes)
        self.relu = nn.ReLU()
        self.shortcut = _shortcut(in_planes, planes * self.expansion, stride, norm)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3, 1×1 expand (×4) convolutions with ``norm`` and a shortcut."""

    expansion = 4

    def __init__(
        self, in_planes: int, planes: int, stride: int, norm: Norm = nn.BatchNorm2d
    ) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = norm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = norm(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = norm(out_planes)
        self.relu = nn.ReLU()
        self.shortcut = _shortcut(in_planes, out_planes, stride, norm)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


def _shortcut(in_planes: int, out_planes: int, stride: int, norm: Norm) -> nn.Module:
    """Identity when shapes match, else a strided 1×1 convolution with ``norm``."""
    if stride == 1 and in_planes == out_planes:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False),
        norm(out_planes),
    )


class ResNet(FedModel):
    """CIFAR ResNet with split points ``layer1`` … ``layer4``, ``penultimate``."""

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        num_blocks: tuple[int, int, int, int],
        num_classes: int,
        in_channels: int,
        image_size: int,
        width: float,
        norm: Norm = nn.BatchNorm2d,
    ) -> None:
        super().__init__()
        planes = [scaled(c, width) for c in (64, 128, 256, 512)]
        self.conv1 = nn.Conv2d(in_channels, planes[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = norm(planes[0])
        self.relu = nn.ReLU()
        in_planes = planes[0]
        layers = []
        for stage_planes, blocks, stride in zip(planes, num_blocks, (1, 2, 2, 2), strict=True):
            strides = [stride] + [1] * (blocks - 1)
            stage = []
            for s in strides:
                stage.append(block(in_planes, stage_planes, s, norm))
                in_planes = stage_planes * block.expansion
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        trunk = [
            nn.Sequential(self.conv1, self.bn1, self.relu, self.layer1),
            self.layer2,
            self.layer3,
            self.layer4,
        ]
        penultimate = self._penultimate(trunk, in_channels, image_size)
        self._set_stages(
            [*zip(("layer1", "layer2", "layer3", "layer4"), trunk), ("penultimate", penultimate)],
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=image_size,
        )

    def _penultimate(self, trunk: list[nn.Module], in_channels: int, image_size: int) -> nn.Module:
        """The stage from ``layer4``'s map to the penultimate feature: a global average pool."""
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        return self.pool


class InstanceNormResNet(ResNet):
    """FedLGD's ResNet: instance norm, ``avg_pool2d(4)``, and a Linear–ReLU back to ``layer4``'s
    width when the pooled map is larger than 1×1 (96 px)."""

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        num_blocks: tuple[int, int, int, int],
        num_classes: int,
        in_channels: int,
        image_size: int,
        width: float,
    ) -> None:
        super().__init__(
            block, num_blocks, num_classes, in_channels, image_size, width, norm=instance_norm
        )

    def _penultimate(self, trunk: list[nn.Module], in_channels: int, image_size: int) -> nn.Module:
        """``avg_pool2d(4)`` (the whole map when it is smaller), flatten, then the MLP if needed."""
        channels, side, _ = probe_shapes(trunk, in_channels, image_size)[-1]
        kernel = min(4, side)
        self.pool = nn.Sequential(nn.AvgPool2d(kernel), nn.Flatten())
        pooled = side // kernel
        if pooled == 1:
            return self.pool
        self.mlp = nn.Sequential(nn.Linear(channels * pooled * pooled, channels), nn.ReLU())
        return nn.Sequential(self.pool, self.mlp)


def resnet10(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-10: BasicBlock, [1, 1, 1, 1] (VHL's capacity study)."""
    return ResNet(BasicBlock, (1, 1, 1, 1), num_classes, in_channels, image_size, width)


def resnet18(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-18: BasicBlock, [2, 2, 2, 2]; 11.17M parameters with 10 classes at width 1."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, in_channels, image_size, width)


def resnet18in(
    num_classes: int, in_channels: int, image_size: int, width: float
) -> InstanceNormResNet:
    """FedLGD's ResNet-18: instance norm, ``avg_pool2d(4)``; 11 173 962 parameters at 28 px with 10
    classes, 13 529 666 at 96 px with 2 classes (the 4608 → 512 MLP included)."""
    return InstanceNormResNet(BasicBlock, (2, 2, 2, 2), num_classes, in_channels, image_size, width)


def resnet34(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-34: BasicBlock, [3, 4, 6, 3]."""
    return ResNet(BasicBlock, (3, 4, 6, 3), num_classes, in_channels, image_size, width)


def resnet50(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-50: Bottleneck, [3, 4, 6, 3]; 2048-d penultimate feature, 23.5M parameters."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, in_channels, image_size, width)
