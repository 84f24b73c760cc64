"""Model registry: every model is a `FedModel` with named split points and a linear ``head``.

``build_model(name, num_classes, in_channels, image_size, width, **options)`` looks the name up in
`MODELS`, checks the options against the builder's keyword-only parameters and builds the model.
``width`` multiplies channel and hidden-layer counts (rounded, at least 4), so narrow variants of
every architecture can run on a CPU.

| name | papers | split points | feature_dim (width 1) | options |
|---|---|---|---|---|
| resnet10/18/34 | VHL, FedImpro, FedLGD | layer1-4, penultimate | 512 | |
| resnet50 | VHL, FedImpro (CIFAR-100) | layer1-4, penultimate | 2048 | |
| vgg9 | VHL, FedImpro (ModerateCNN) | block1-2, conv, penultimate | 512 | |
| vgg11 | FedImpro, FedBR | block1-4, conv, penultimate | 512 | |
| simplecnn | CCVR, MOON | conv, hidden, penultimate | proj_dim (256) | projection, proj_dim |
| cnn4 | FedBR (rotated MNIST) | block1-4, penultimate | 128 | |
| convnet | FedLGD | block1-3, penultimate | 128·(H/8)² | depth |
| mobilenetv2 | CCVR | layer1-4, penultimate | 1280 | stem_stride |
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedhet.declare import ConfigError
from fedhet.registry import Registry

if TYPE_CHECKING:
    from fedhet.models.base import FedModel

ModelBuilder = Callable[..., "FedModel"]

# Registered lazily: the names are listable without torch (the workflow's DAG checks them).
MODELS: Registry[ModelBuilder] = Registry("model")
for _module, _names in (
    ("resnet", ("resnet10", "resnet18", "resnet34", "resnet50")),
    ("vgg", ("vgg9", "vgg11")),
    ("cnn", ("simplecnn", "cnn4", "convnet")),
    ("mobilenet", ("mobilenetv2",)),
):
    for _name in _names:
        MODELS.add_lazy(_name, f"fedhet.models.{_module}:{_name}")
del _module, _names, _name


def model_options(name: str) -> dict[str, Any]:
    """The options model ``name`` accepts, with their defaults."""
    signature = inspect.signature(MODELS.get(name))
    return {
        p.name: p.default
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def build_model(
    name: str,
    num_classes: int,
    in_channels: int,
    image_size: int,
    width: float = 1.0,
    **options: Any,
) -> FedModel:
    """Build model ``name`` for ``in_channels``×``image_size``×``image_size`` inputs.

    Raises `fedhet.registry.UnknownNameError` (listing the valid names) for an unknown model,
    ConfigError naming any option the model does not take, and ValueError for bad sizes.
    """
    valid = model_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        accepted = ", ".join(sorted(valid)) or "none"
        raise ConfigError(
            f"setting 'model.options' of model '{name}' has unknown option(s) {', '.join(unknown)}; valid options: {accepted}"
        )
    for label, value in (
        ("num_classes", num_classes),
        ("in_channels", in_channels),
        ("image_size", image_size),
    ):
        if int(value) != value or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if not width > 0:
        raise ValueError(f"width must be > 0, got {width!r}")
    builder = MODELS.get(name)
    return builder(int(num_classes), int(in_channels), int(image_size), float(width), **options)


def __getattr__(name: str) -> Any:
    """`FedModel`, `CLASSIFIER_PREFIX` and `PENULTIMATE` from `fedhet.models.base` (imports
    torch on first use)."""
    if name in ("FedModel", "CLASSIFIER_PREFIX", "PENULTIMATE"):
        from fedhet.models import base

        return getattr(base, name)
    raise AttributeError(f"module 'fedhet.models' has no attribute '{name}'")


__all__ = [
    "CLASSIFIER_PREFIX",
    "MODELS",
    "PENULTIMATE",
    "FedModel",
    "ModelBuilder",
    "build_model",
    "model_options",
]
