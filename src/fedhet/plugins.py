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
from fedhet.registry import Registry


class Plugin:
    """Does nothing; subclasses override the hooks their method needs."""

    name = "plugin"

    def __init__(self, params: dict[str, Any]) -> None:
        from fedhet.catalog import method
        from fedhet.declare import resolve_params

        # the declared defaults under what is given, checked (a run's params are complete)
        self.hp = resolve_params(method(self.name).params, params, f"plugins({self.name}).params.")

    def setup(self, federation: Any) -> None:
        """Called once the federation (data, model, algorithm) is built."""

    def client_begin(self, ctx: ClientContext) -> None:
        """Called after the working model received the global model."""

    def forward(self, ctx: ClientContext, x: torch.Tensor, y: torch.Tensor) -> StepOutput | None:
        """Replace the default forward pass and task loss (None: keep the default)."""
        return None

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor | None:
        """A term added to the loss of a local step."""
        return None

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        """Called when the client finished local training."""

    def round_end(self, round: int) -> None:
        """Called after aggregation."""

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


def model_classes(run: dict[str, Any], num_classes: int) -> int:
    """Classifier outputs of a run's model: the dataset's classes plus its plug-ins' extra."""
    from fedhet.catalog import implementation

    return num_classes + sum(implementation(p["name"]).extra_classes(num_classes, p["params"])
                             for p in run["plugins"])


def eval_logit_map(plugins: list[Plugin], num_classes: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Test logits → what the plug-ins score (VHL: natural classes only, or all outputs)."""

    def apply(logits: torch.Tensor) -> torch.Tensor:
        for plugin in plugins:
            logits = plugin.eval_logits(logits, num_classes)
        return logits

    return apply

