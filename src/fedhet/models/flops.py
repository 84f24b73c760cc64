"""FLOPs and parameters of a model, counted without computing: `flops_per_image` (what `fedhet
cost`, the benchmarks and the leaderboard's training work multiply by images), `step_flops` of the
steps in `STEPS`, `parameter_count`.

Convention: `torch.utils.flop_counter.FlopCounterMode` on a copy of the model on the meta device
(nothing is computed). It counts 2 FLOPs per multiply–accumulate of every matrix product and
convolution, in the forward pass and in each backward product it takes part in (gradient with
respect to the input, to the weight, and the products of a double backward). Normalisation,
activations, pooling, the loss, elementwise distances, augmentation and the optimiser update count
0. A backward pass computes only the gradients it needs: training differentiates the weights (not
the real images), distribution matching the synthetic images (not the weights). Per-image costs are
exact and linear in the batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from fedhet.models import build_model
from fedhet.models.base import FedModel

UNIT_FLOPS = "FLOPs (FlopCounterMode: 2 per multiply-accumulate of matmul/conv)"


def parameter_count(
    model_name: str, image_size: int, num_classes: int, channels: int = 3, width: float = 1.0
) -> int:
    """Number of trainable values of the model, what a client uploads each round."""
    model = build_model(model_name, num_classes, channels, image_size, width)
    return sum(p.numel() for p in model.parameters())


@lru_cache(maxsize=64)
def meta_model(
    model_name: str, image_size: int, num_classes: int, channels: int = 3, width: float = 1.0,
    options: str = "{}",
) -> FedModel:
    """The model on the meta device, where its FLOPs can be counted without computing: built
    there (no weights initialised) unless its construction reads a tensor's values, then built
    on the CPU and moved. `options`: the model's options as a JSON object (a string, for the
    cache)."""
    settings = (model_name, num_classes, channels, image_size, width)
    try:
        with torch.device("meta"):
            return build_model(*settings, **json.loads(options))
    except NotImplementedError:  # e.g. `.tolist()` of a meta tensor
        return build_model(*settings, **json.loads(options)).to("meta")


def _batch(model: FedModel, size: int, requires_grad: bool = False) -> tuple[Tensor, Tensor]:
    """A meta batch of ``size`` images and labels for ``model``.

    Images that require a gradient are a non-leaf clone: `FlopCounterMode`'s module hooks reject
    ``autograd.grad`` with respect to a leaf.
    """
    shape = (size, model.in_channels, model.image_size, model.image_size)
    x = torch.empty(shape, device="meta", requires_grad=requires_grad)
    return (x.clone() if requires_grad else x), torch.zeros(size, dtype=torch.long, device="meta")


def _weights(model: nn.Module) -> list[Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def _forward(model: FedModel, size: int) -> None:
    """Logits of a batch, no gradient."""
    with torch.no_grad():
        model(_batch(model, size)[0])


def _train(model: FedModel, size: int) -> None:
    """Forward, cross-entropy and backward to the weights: one SGD step's products."""
    x, y = _batch(model, size)
    torch.autograd.grad(nn.functional.cross_entropy(model(x), y), _weights(model))


def _features_train(model: FedModel, size: int) -> None:
    """Feature extractor forward and backward to its weights (the regulariser's h(S̃))."""
    x, _ = _batch(model, size)
    torch.autograd.grad(model.features(x).sum(), list(model.feature_parameters()))


def _features(model: FedModel, size: int) -> None:
    """Feature extractor forward, no gradient (DM's real batch)."""
    with torch.no_grad():
        model.features(_batch(model, size)[0])


def _features_to_images(model: FedModel, size: int) -> None:
    """Feature extractor forward and backward to the images only (DM's synthetic batch)."""
    x, _ = _batch(model, size, requires_grad=True)
    torch.autograd.grad(model.features(x).mean(0).square().sum(), [x])


def _gradient_matching(model: FedModel, size: int) -> None:
    """CE gradient with ``create_graph``, then a function of it differentiated to the images.

    Any elementwise function of the gradient (here its squared norm; GM uses a per-row cosine
    distance) gives the same products, so the count equals a GM step's.
    """
    x, y = _batch(model, size, requires_grad=True)
    grads = torch.autograd.grad(
        nn.functional.cross_entropy(model(x), y), _weights(model), create_graph=True
    )
    torch.autograd.grad(sum(g.square().sum() for g in grads), [x])


STEPS: dict[str, Callable[[FedModel, int], None]] = {
    "forward": _forward,
    "train": _train,
    "features": _features,
    "features_train": _features_train,
    "features_to_images": _features_to_images,
    "gradient_matching": _gradient_matching,
}


def step_flops(model: FedModel, step: str, batch: int) -> int:
    """FLOPs of ``STEPS[step]`` on a batch of ``batch`` images (``model`` on the meta device)."""
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    if batch == 0:
        return 0
    with FlopCounterMode(display=False) as counter:
        STEPS[step](model, batch)
    return int(counter.get_total_flops())


@lru_cache(maxsize=256)
def _image_flops(model_name: str, image_size: int, num_classes: int, channels: int,
                 width: float, options: str) -> tuple[int, int]:
    """(forward, training) FLOPs of one image, counted from one forward and one backward pass
    (the training step's products: `_train`'s, with the forward's counted apart). In eval mode,
    whose normalisation the counter decomposes faster; its products are the same (normalisation
    and dropout count 0)."""
    model = meta_model(model_name, image_size, num_classes, channels, width, options)
    x, y = _batch(model, 1)
    mode = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as forward:
            loss = nn.functional.cross_entropy(model(x), y)
        with FlopCounterMode(display=False) as backward:
            torch.autograd.grad(loss, _weights(model))
    finally:
        model.train(mode)
    ahead = int(forward.get_total_flops())
    return ahead, ahead + int(backward.get_total_flops())


def flops_per_image(
    model_name: str,
    image_size: int,
    num_classes: int,
    channels: int = 3,
    backward: bool = True,
    width: float = 1.0,
    options: Mapping[str, Any] | None = None,
) -> int:
    """FLOPs of one image: forward, cross-entropy and backward to the weights (not the input)
    when ``backward``, else the forward alone; see the module docstring for the convention.
    `options`: the model's options (run setting ``model.options``)."""
    forward, train = _image_flops(model_name, image_size, num_classes, channels, width,
                                  json.dumps(dict(options or {}), sort_keys=True))
    return train if backward else forward
