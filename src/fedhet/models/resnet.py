"""CIFAR-style ResNets (VHL's and FedImpro's ``resnet*_v2``).

The CIFAR variant replaces ImageNet's 7×7 stride-2 stem and max-pool by one 3×3 stride-1
convolution, so a 32 px image keeps 32×32 maps in ``layer1`` and 4×4 in ``layer4``. Stages have
64·w, 128·w, 256·w, 512·w base channels with strides 1, 2, 2, 2; an adaptive average pool makes
the penultimate feature 512·w (BasicBlock) or 2048·w (Bottleneck) wide for any input size.

Split points: ``layer1`` … ``layer4`` (the 4-D output of each stage; ``layer1`` includes the
stem) and ``penultimate`` (the pooled, flattened feature). FedImpro's default split ``layer2`` is
128×16×16 = 32768 values per sample at 32 px.
"""

from __future__ import annotations

from torch import Tensor, nn

from fedhet.models.base import FedModel, scaled


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with batch norm and an identity (or 1×1 projection) shortcut."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.shortcut = _shortcut(in_planes, planes * self.expansion, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3, 1×1 expand (×4) convolutions with batch norm and a shortcut."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.relu = nn.ReLU()
        self.shortcut = _shortcut(in_planes, out_planes, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


def _shortcut(in_planes: int, out_planes: int, stride: int) -> nn.Module:
    """Identity when shapes match, else a strided 1×1 convolution with batch norm."""
    if stride == 1 and in_planes == out_planes:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False),
        nn.BatchNorm2d(out_planes),
    )


class ResNet(FedModel):
    """CIFAR ResNet with split points ``layer1`` … ``layer4``, ``penultimate``."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        num_blocks: tuple[int, int, int, int],
        num_classes: int,
        in_channels: int,
        image_size: int,
        width: float,
    ) -> None:
        super().__init__()
        planes = [scaled(c, width) for c in (64, 128, 256, 512)]
        self.conv1 = nn.Conv2d(in_channels, planes[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes[0])
        self.relu = nn.ReLU()
        in_planes = planes[0]
        layers = []
        for stage_planes, blocks, stride in zip(planes, num_blocks, (1, 2, 2, 2), strict=True):
            strides = [stride] + [1] * (blocks - 1)
            stage = []
            for s in strides:
                stage.append(block(in_planes, stage_planes, s))
                in_planes = stage_planes * block.expansion
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self._set_stages(
            [
                ("layer1", nn.Sequential(self.conv1, self.bn1, self.relu, self.layer1)),
                ("layer2", self.layer2),
                ("layer3", self.layer3),
                ("layer4", self.layer4),
                ("penultimate", self.pool),
            ],
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=image_size,
        )


def resnet10(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-10: BasicBlock, [1, 1, 1, 1] (VHL's capacity study)."""
    return ResNet(BasicBlock, (1, 1, 1, 1), num_classes, in_channels, image_size, width)


def resnet18(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-18: BasicBlock, [2, 2, 2, 2]; 11.17M parameters with 10 classes at width 1."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, in_channels, image_size, width)


def resnet34(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-34: BasicBlock, [3, 4, 6, 3]."""
    return ResNet(BasicBlock, (3, 4, 6, 3), num_classes, in_channels, image_size, width)


def resnet50(num_classes: int, in_channels: int, image_size: int, width: float) -> ResNet:
    """ResNet-50: Bottleneck, [3, 4, 6, 3]; 2048-d penultimate feature, 23.5M parameters."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, in_channels, image_size, width)
