"""`FedModel`: a network cut into named stages, followed by a linear classifier `head`.

Several algorithms need more than ``model(x)``: VHL and FedImpro act on intermediate features
(``forward_to`` / ``forward_from`` at a named split point), CCVR and MOON use the penultimate
feature (``features``), and CCVR retrains only the classifier (``classifier_parameters``). Every
model therefore declares an ordered list of ``(split-point name, stage module)`` pairs whose
composition maps an image batch to the penultimate feature; this class implements the split
mechanics once for all models.

Stages are *views*: each one is either a module the model registers itself (``self.layer2``) or an
``nn.Sequential`` grouping registered modules. The stage list itself is not registered, so
``state_dict()`` keys are the model's own attribute names (no duplicates), and ``train()``,
``eval()``, ``to()``, ``deepcopy`` and ``torch.func.functional_call`` reach every layer.

`FedModel.add_projection` appends an MLP ``projection`` to any model's feature extractor (MOON's
projection head, which the classifier reads; FedBR Fig. 6a): it becomes the ``penultimate`` stage
and the former penultimate stage keeps its output under the split point ``representation``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

PENULTIMATE = "penultimate"
REPRESENTATION = "representation"
CLASSIFIER_PREFIX = "head."
MIN_CHANNELS = 4


def scaled(channels: int, width: float) -> int:
    """Channel count ``channels`` multiplied by ``width``, rounded, and at least `MIN_CHANNELS`."""
    return max(MIN_CHANNELS, round(channels * width))


def probe_shapes(
    stages: Sequence[nn.Module], in_channels: int, image_size: int
) -> list[tuple[int, ...]]:
    """Per-sample output shape after each of ``stages`` applied in turn to one blank image.

    Runs in eval mode without gradients (so batch-norm statistics are untouched and a 1×1 map is
    accepted) and restores each module's own mode afterwards.
    """
    modes = {module: module.training for stage in stages for module in stage.modules()}
    for module in modes:
        module.training = False
    try:
        with torch.no_grad():
            h = torch.zeros(1, in_channels, image_size, image_size)
            shapes = []
            for stage in stages:
                h = stage(h)
                shapes.append(tuple(h.shape[1:]))
    finally:
        for module, mode in modes.items():
            module.training = mode
    return shapes


class FedModel(nn.Module):
    """Base class of all models: named stages up to the penultimate feature, then ``head``.

    Subclasses build their layers, then call `_set_stages`, which records the stages, checks
    that the input size works, records the shape at every split point and creates ``head``.

    Attributes:
        head: the classifier, ``nn.Linear(feature_dim, num_classes)``; its state-dict keys start
            with ``head.``.
        feature_dim: size of the penultimate feature (the input of ``head``).
        split_shapes: per-sample activation shape at every split point for the input size the model
            was built for, e.g. ``{"layer2": (128, 16, 16), ..., "penultimate": (512,)}``.
        in_channels, image_size: the input the model was built for.
    """

    head: nn.Linear
    feature_dim: int
    split_shapes: dict[str, tuple[int, ...]]
    in_channels: int
    image_size: int

    def _set_stages(
        self,
        stages: Sequence[tuple[str, nn.Module]],
        *,
        num_classes: int,
        in_channels: int,
        image_size: int,
    ) -> None:
        """Declare the ordered stages (the last named ``"penultimate"``) and build the head.

        Raises ValueError for a malformed stage list, for a stage that contains an unregistered
        layer (it would escape ``state_dict()`` and ``train()``/``eval()``), and for an input size
        the architecture cannot take.
        """
        names = [name for name, _ in stages]
        if not names or names[-1] != PENULTIMATE:
            raise ValueError(f"the last stage must be named '{PENULTIMATE}', got {names}")
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        registered = {id(module) for module in self.modules()}
        for name, stage in stages:
            for module in stage.modules():
                if id(module) not in registered and type(module) is not nn.Sequential:
                    raise ValueError(
                        f"stage '{name}' contains an unregistered {type(module).__name__}; "
                        "assign it to the model before declaring stages"
                    )
        self._stages = tuple((name, stage) for name, stage in stages)
        self._stage_index = {name: i for i, name in enumerate(names)}
        try:
            shapes = probe_shapes([stage for _, stage in stages], in_channels, image_size)
        except (RuntimeError, ValueError) as err:
            raise ValueError(
                f"{type(self).__name__} cannot take {in_channels}×{image_size}×{image_size} "
                f"inputs: {err}"
            ) from err
        if len(shapes[-1]) != 1:
            raise ValueError(f"the '{PENULTIMATE}' stage must output [B, D], got [B, {shapes[-1]}]")
        self.split_shapes = dict(zip(names, shapes, strict=True))
        self.feature_dim = shapes[-1][0]
        self.in_channels = in_channels
        self.image_size = image_size
        self.head = nn.Linear(self.feature_dim, num_classes)

    def add_projection(self, hidden: int, dim: int, layers: int = 2) -> None:
        """Append the MLP ``projection`` (``layers`` linear maps with ReLU between, ``hidden`` wide,
        ending at ``dim``) as the new ``penultimate`` stage, and rebuild ``head`` to read it.

        The stage that ended at the penultimate feature becomes the split point ``representation``;
        ``features(x)`` then returns the projected ``dim``-vector. The new head is drawn after the
        projection, so its state-dict keys stay last.
        """
        if min(hidden, dim, layers) < 1:
            raise ValueError(f"projection sizes must be >= 1, got {hidden=}, {dim=}, {layers=}")
        sizes = [self.feature_dim] + [hidden] * (layers - 1) + [dim]
        modules: list[nn.Module] = []
        for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
            modules += [nn.Linear(d_in, d_out), nn.ReLU()]
        self.projection = nn.Sequential(*modules[:-1])
        num_classes = self.num_classes
        del self.head
        *body, (_, last) = self._stages
        self._set_stages(
            [*body, (REPRESENTATION, last), (PENULTIMATE, self.projection)],
            num_classes=num_classes,
            in_channels=self.in_channels,
            image_size=self.image_size,
        )

    @property
    def split_points(self) -> tuple[str, ...]:
        """Names of the split points, shallow to deep, ending with ``"penultimate"``."""
        return tuple(name for name, _ in self._stages)

    @property
    def num_classes(self) -> int:
        """Number of outputs of the classifier."""
        return self.head.out_features

    def split_point(self, point: str | int) -> str:
        """The name of a split point given by name or by 1-based position, shallow to deep
        (``2`` or ``"2"``: the second block on every model)."""
        if isinstance(point, int) or (isinstance(point, str) and point.isdigit()):
            k = int(point)
            if not 1 <= k <= len(self._stages):
                raise ValueError(f"split point {k} out of range for {type(self).__name__}: "
                                 f"1 … {len(self._stages)} ({', '.join(self.split_points)})")
            return self._stages[k - 1][0]
        if point not in self._stage_index:
            valid = ", ".join(self.split_points)
            raise ValueError(
                f"unknown split point '{point}' for {type(self).__name__}; valid: {valid} "
                f"(or 1 … {len(self._stages)})"
            )
        return point

    def _index(self, point: str | int) -> int:
        return self._stage_index[self.split_point(point)]

    def forward_to(self, x: Tensor, point: str | int) -> Tensor:
        """Activation at split point ``point`` (the stages up to and including it)."""
        for _, stage in self._stages[: self._index(point) + 1]:
            x = stage(x)
        return x

    def forward_from(self, h: Tensor, point: str | int) -> Tensor:
        """Logits from an activation ``h`` taken at split point ``point``."""
        for _, stage in self._stages[self._index(point) + 1 :]:
            h = stage(h)
        return self.head(h)

    def features(self, x: Tensor) -> Tensor:
        """Penultimate feature ``[B, feature_dim]``, the input of ``head``."""
        return self.forward_to(x, PENULTIMATE)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, num_classes]``."""
        return self.head(self.features(x))

    @staticmethod
    def is_classifier_key(name: str) -> bool:
        """Whether a parameter or state-dict key belongs to the classifier ``head``."""
        return name.startswith(CLASSIFIER_PREFIX)

    def classifier_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters of the classifier ``head`` (what CCVR retrains)."""
        return self.head.parameters()

    def feature_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters of the feature extractor: everything except ``head``."""
        for name, param in self.named_parameters():
            if not self.is_classifier_key(name):
                yield param
