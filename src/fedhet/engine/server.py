"""What a plug-in sees of the federation: a narrow, typed view handed to `Plugin.setup`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from fedhet.engine.augment import Augmenter
from fedhet.engine.flat import FlatModel


@dataclass(frozen=True)
class ClientData:
    """What one client trains on in one round. A batch is `x[rows]`, `y[rows]` with `rows`
    the batch's positions mapped through `index` (all rows when `index` is None);
    `angles` and `domains` are aligned with those positions (0 … size − 1)."""

    x: torch.Tensor  # uint8 images N×C×H×W, or normalised float images when `normalized`
    y: torch.Tensor  # class labels (long, N) or soft targets (float, N×C)
    index: torch.Tensor | None = None  # the client's rows of x and y
    angles: torch.Tensor | None = None  # per-position rotation in degrees (rotated clients)
    domains: torch.Tensor | None = None  # per-position domain id (DANN, GroupDRO)
    normalized: bool = False  # x is already augmented and normalised: used as it is

    @property
    def size(self) -> int:
        return int(self.index.numel() if self.index is not None else self.y.shape[0])

    def rows(self, take: torch.Tensor) -> torch.Tensor:
        return take if self.index is None else self.index[take]


@dataclass(frozen=True)
class EvalSet:
    """A named evaluation set besides the run's test set (a transformed copy of it, such as
    FedBR's rotated test sets, or another domain's images); its accuracy is logged under
    `test_sets.<name>` in metrics.jsonl."""

    name: str
    x: torch.Tensor  # uint8 images on the device
    y: torch.Tensor
    angles: torch.Tensor | None = None  # per-image rotation in degrees


@dataclass(frozen=True)
class ServerView:
    """The parts of a federation a plug-in may read or change: the run, the models, the
    clients' data and the test-time scoring. The models are flat (`FlatModel`): changing
    `global_model.params` changes the global model."""

    run: Mapping[str, Any]
    seed: int
    device: torch.device
    num_classes: int  # the dataset's classes
    num_clients: int
    global_model: FlatModel
    work_model: FlatModel  # a scratch model of the same architecture
    augmenter: Augmenter  # the run's training augmentation and normalisation
    autocast: AbstractContextManager
    channels_last: bool
    x_train: torch.Tensor  # every training image (uint8, on the device)
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    domain_train: torch.Tensor | None
    client_indices: list[torch.Tensor]
    client_angles: list[torch.Tensor] | None  # per-row rotation (degrees) of rotated clients
    logit_map: Callable[[torch.Tensor], torch.Tensor]  # logits → what the test accuracy scores
    new_model: Callable[[], FlatModel]  # a freshly initialised model of the run (prepared)
    plugin_modules: torch.nn.ModuleDict | None = None  # the global copies of plug-in modules
