"""Model registry: every model is a `FedModel` with named split points and a linear ``head``.

``build_model(name, num_classes, in_channels, image_size, width, **options)`` looks the name up in
`MODELS`, checks the options against the builder's keyword-only parameters and the generic options
of every model, and builds the model. ``width`` multiplies channel and hidden-layer counts
(rounded, at least 4), so narrow variants of every architecture can run on a CPU.

Generic option (`GENERIC_OPTIONS`; a model declaring an option of the same name keeps its own):
``projection`` null (default) or ``{hidden: 256, dim: 128, layers: 2}`` (each key optional, these
its defaults, not scaled by ``width``) appends the MLP projection of
`FedModel.add_projection`: the head then reads its ``dim``-vector and the former penultimate
feature becomes split point ``representation`` (MOON's projection inside the feature extractor, as
FedBR runs it; FedBR Fig. 6a). ``simplecnn`` keeps its own boolean ``projection``.

| name | papers | split points | feature_dim (width 1) | options |
|---|---|---|---|---|
| resnet10/18/34 | VHL, FedImpro, FedLGD | layer1-4, penultimate | 512 | |
| resnet50 | VHL, FedImpro (CIFAR-100) | layer1-4, penultimate | 2048 | |
| resnet18in | FedLGD (instance norm, avg-pool 4; 4608 → 512 MLP at 96 px) | layer1-4, penultimate | 512 | |
| vgg9 | VHL, FedImpro (ModerateCNN) | block1-2, conv, penultimate | 512 | |
| vgg11 | FedImpro, FedBR | block1-4, conv, penultimate (fc false: no conv) | 512 | fc |
| simplecnn | CCVR, MOON | conv, hidden, penultimate | proj_dim (256) | projection, proj_dim |
| cnn4 | FedBR (rotated MNIST) | block1-4, penultimate | 128 | |
| convnet | FedLGD | block1-3, penultimate | 128·(H/8)² | depth |
| mobilenetv2 | CCVR | layer1-4, penultimate | 1280 | stem_stride |
| cct | FedBR (CIFAR-100) | tokens, block1-7, penultimate | 256 | |
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
    ("resnet", ("resnet10", "resnet18", "resnet18in", "resnet34", "resnet50")),
    ("vgg", ("vgg9", "vgg11")),
    ("cnn", ("simplecnn", "cnn4", "convnet")),
    ("mobilenet", ("mobilenetv2",)),
    ("cct", ("cct",)),
):
    for _name in _names:
        MODELS.add_lazy(_name, f"fedhet.models.{_module}:{_name}")
del _module, _names, _name

# Options every model accepts, applied by `build_model` after the builder: name → default.
GENERIC_OPTIONS: dict[str, Any] = {"projection": None}
PROJECTION_DEFAULTS = {"hidden": 256, "dim": 128, "layers": 2}


def _own_options(name: str) -> dict[str, Any]:
    """The keyword-only parameters of model ``name``'s builder, with their defaults."""
    signature = inspect.signature(MODELS.get(name))
    return {
        p.name: p.default
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def model_options(name: str) -> dict[str, Any]:
    """The options model ``name`` accepts, with their defaults (its own, then the generic ones)."""
    return {**GENERIC_OPTIONS, **_own_options(name)}


def _projection_sizes(name: str, value: Any) -> dict[str, int]:
    """The ``projection`` option's mapping completed with `PROJECTION_DEFAULTS`, checked."""
    where = f"setting 'model.options.projection' of model '{name}'"
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be null or a mapping with keys hidden, dim, layers; "
                          f"got {value!r}")
    unknown = sorted(set(value) - set(PROJECTION_DEFAULTS))
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {', '.join(unknown)}; "
                          "valid: hidden, dim, layers")
    sizes = {**PROJECTION_DEFAULTS, **value}
    for key, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"{where}: '{key}' must be a positive integer, got {size!r}")
    return sizes


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
    own = _own_options(name)
    valid = {**GENERIC_OPTIONS, **own}
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
    generic = {k: options.pop(k) for k in GENERIC_OPTIONS if k in options and k not in own}
    projection = generic.get("projection")
    sizes = None if projection is None else _projection_sizes(name, projection)
    builder = MODELS.get(name)
    model = builder(int(num_classes), int(in_channels), int(image_size), float(width), **options)
    if sizes is not None:
        model.add_projection(**sizes)
    return model


def __getattr__(name: str) -> Any:
    """`FedModel`, `CLASSIFIER_PREFIX` and `PENULTIMATE` from `fedhet.models.base` (imports
    torch on first use)."""
    if name in ("FedModel", "CLASSIFIER_PREFIX", "PENULTIMATE"):
        from fedhet.models import base

        return getattr(base, name)
    raise AttributeError(f"module 'fedhet.models' has no attribute '{name}'")


__all__ = [
    "CLASSIFIER_PREFIX",
    "GENERIC_OPTIONS",
    "MODELS",
    "PENULTIMATE",
    "FedModel",
    "ModelBuilder",
    "build_model",
    "model_options",
]
