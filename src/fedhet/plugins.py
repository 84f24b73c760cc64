"""Plug-ins: methods that change a client's data or objective on top of any base algorithm.

A plug-in may take over the forward pass of a local step (e.g. append virtual samples to
the batch, or continue from a split point on synthetic features), add loss terms, and keep
state across rounds. Hooks run in the order the plug-ins are listed in the run; base
algorithm hooks (FedProx's gradient, SCAFFOLD's correction, ...) run after them, so
VHL × SCAFFOLD is the SCAFFOLD update applied to VHL's objective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fedhet.algorithms.base import ClientContext, ClientUpdate, StepOutput
from fedhet.engine.server import ClientData, ServerView
from fedhet.registry import Registry


class Plugin:
    """Does nothing; subclasses override the hooks their method needs."""

    name = "plugin"

    def __init__(self, params: dict[str, Any]) -> None:
        # complete and checked by the declaration (`fedhet.catalog.plugins_of` resolves them)
        self.hp = dict(params)

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Change a model's own forward pass (clsnorm's normalised head). Called on every model
        the engine builds and on every model read back from a saved run (`fedhet.saved`)."""

    def setup(self, server: ServerView) -> None:
        """Called once the federation (data, models, algorithm) is built."""

    def round_begin(self, round: int, clients: list[int]) -> None:
        """Called on the server before the round's clients train (pseudo-data of the round,
        re-distillation at chosen rounds)."""

    def client_data(self, client: int, round: int, data: ClientData) -> ClientData | None:
        """The tensors `client` trains on this round (None: keep `data`, the partition or what
        an earlier plug-in supplied), e.g. distilled images with soft labels."""
        return None

    def client_begin(self, ctx: ClientContext) -> None:
        """Called after the working model received the global model."""

    def transform_batch(self, ctx: ClientContext, x: torch.Tensor,
                        y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A local batch before the forward pass (augmented, normalised) → the batch trained
        on; `y` may become soft targets (N×C floats), e.g. Mixup."""
        return x, y

    def forward(self, ctx: ClientContext, x: torch.Tensor, y: torch.Tensor) -> StepOutput | None:
        """Replace the default forward pass and task loss (None: keep the default)."""
        return None

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor | None:
        """A term added to the loss of a local step."""
        return None

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        """Called when the client finished local training."""

    def round_end(self, round: int, updates: list[ClientUpdate]) -> None:
        """Called after aggregation, with the round's client updates."""

    def broadcast_tensors(self) -> list[torch.Tensor]:
        """What the server sends each sampled client besides the model (communication cost)."""
        return []

    def upload_tensors(self, update: ClientUpdate) -> list[torch.Tensor]:
        """What a client sends besides its model (communication cost)."""
        return []

    @classmethod
    def extra_classes(cls, num_classes: int, params: dict[str, Any]) -> int:
        """Classifier outputs this plug-in needs beyond the dataset's classes (VHL: C_v)."""
        return 0

    def eval_logits(self, logits: torch.Tensor, num_classes: int) -> torch.Tensor:
        """Test logits → logits whose argmax is the prediction on the dataset's classes."""
        return logits

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


PLUGINS: Registry[type[Plugin]] = Registry("plug-in")


def eval_logit_map(plugins: list[Plugin], num_classes: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Test logits → what the plug-ins score (VHL: natural classes only, or all outputs)."""

    def apply(logits: torch.Tensor) -> torch.Tensor:
        for plugin in plugins:
            logits = plugin.eval_logits(logits, num_classes)
        return logits

    return apply

