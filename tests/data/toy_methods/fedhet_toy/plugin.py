"""The toy plug-in: a penalty on the size of the logits of every local step."""

from __future__ import annotations

import torch

from fedhet.algorithms.base import ClientContext, StepOutput
from fedhet.plugins import PLUGINS, Plugin


@PLUGINS.register("logitpen")
class LogitPenalty(Plugin):
    """Adds weight · mean(logits²) to the loss."""

    name = "logitpen"

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor | None:
        return float(self.hp["weight"]) * out.logits.pow(2).mean()
