"""DANN — domain-adversarial training (Ganin & Lempitsky, ICML 2015) as a plug-in, with each
client as its own domain (FedBR's comparison set).

A discriminator D (MLP d → 256 → 256 → K, ReLU between; K = the run's clients) reads the
penultimate features z of every local step and predicts the client id k. Through a
gradient-reversal layer R_λ (identity forward, −λ_d × the gradient backward: Ganin's
simultaneous update of D and the features) one step adds

    CE(D(R_λ(z)), k)

to the loss: D descends its cross-entropy while the feature extractor ascends λ_d times it,
i.e. learns features from which the client cannot be told. D is a plug-in module
(`Plugin.modules`): the engine averages it over the round's clients like the model, counts it
in the bytes, checkpoints it and steps it by SGD at the round's learning rate (FedBR's code
uses Adam for D and alternates whole D and G steps; not reproduced). With λ_d = 0 the
reversed gradient is exactly zero, so the model trains as its base algorithm's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedhet.algorithms.base import ClientContext, StepOutput
from fedhet.engine.server import ServerView
from fedhet.plugins import PLUGINS, Plugin


class _ReverseGradient(torch.autograd.Function):
    """Identity forward; the backward pass multiplies the gradient by −scale."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return -ctx.scale * grad, None


def reverse_gradient(x: Tensor, scale: float) -> Tensor:
    """R_λ(x): x, with gradient −scale · ∂/∂x flowing back (Ganin's gradient reversal layer)."""
    return _ReverseGradient.apply(x, scale)


def discriminator(dim: int, width: int, domains: int) -> nn.Sequential:
    """The three-layer MLP dim → width → width → domains (FedBR App. A)."""
    return nn.Sequential(nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, domains))


@PLUGINS.register("dann")
class DANN(Plugin):
    """A federated client discriminator trained adversarially against the features."""

    name = "dann"

    def modules(self, model: nn.Module) -> dict[str, nn.Module]:
        return {"discriminator": discriminator(model.feature_dim, int(self.hp["width"]),
                                               self.num_clients)}

    def setup(self, server: ServerView) -> None:
        if server.num_clients != self.num_clients:
            raise ValueError(f"dann: the discriminator has {self.num_clients} outputs but the "
                             f"federation has {server.num_clients} clients")
        self.key = self.module_key("discriminator")
        self.lam = float(self.hp["lam"])

    def client_begin(self, ctx: ClientContext) -> None:
        # the client's id as a tensor, held: a step replayed as a CUDA graph reads it
        client = torch.tensor(ctx.client, dtype=torch.long, device=ctx.params.device)
        ctx.extra["dann.client"] = ctx.hold("dann.client", client)

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> Tensor | None:
        z = reverse_gradient(out.features, self.lam)
        logits = ctx.modules[self.key](z)
        domain = ctx.extra["dann.client"].expand(len(z))  # every sample's domain: its client
        return F.cross_entropy(logits.float(), domain)
