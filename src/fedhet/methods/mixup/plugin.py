"""Mixup (Zhang et al., ICLR 2018) on every local batch, as a plug-in.

Each local step trains on (Zhang et al., Eq. 1)

    x̃ = λ·x + (1−λ)·x[π],   ỹ = λ·y + (1−λ)·y[π],   λ ~ Beta(α, α),

with one λ per batch, π a random permutation of the batch and y the one-hot rows of the labels
(soft targets, e.g. from an earlier plug-in, are mixed as they are). The engine's task loss
takes the soft targets ỹ, so the step minimises CE(f(x̃), ỹ).

λ and π come from generators keyed by (seed, round, client, step), never from the global torch
RNG: adding Mixup shifts no other random draw of the run, and a resumed run replays the same
draws. λ is drawn on the host (numpy's Beta), so no step waits for the device.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedhet.algorithms.base import ClientContext, as_soft
from fedhet.engine.seeding import derive_seed, generator
from fedhet.engine.server import ServerView
from fedhet.plugins import PLUGINS, Plugin


def mix(x: Tensor, targets: Tensor, lam: float, perm: Tensor) -> tuple[Tensor, Tensor]:
    """(λ·x + (1−λ)·x[π], λ·t + (1−λ)·t[π]) for soft targets t (N×C)."""
    return lam * x + (1 - lam) * x[perm], lam * targets + (1 - lam) * targets[perm]


@PLUGINS.register("mixup")
class Mixup(Plugin):
    """Local batches replaced by their Mixup combinations, with soft targets."""

    name = "mixup"

    def setup(self, server: ServerView) -> None:
        self.seed = server.seed
        self.device = server.device
        self.num_classes = server.num_classes
        self.alpha = float(self.hp["alpha"])

    def draw(self, ctx: ClientContext, n: int) -> tuple[float, Tensor]:
        """λ ~ Beta(α, α) and a permutation π of n rows for this client's current step."""
        key = (self.seed, "mixup", ctx.round, ctx.client, ctx.steps)
        lam = float(np.random.default_rng(derive_seed(*key)).beta(self.alpha, self.alpha))
        perm = torch.randperm(n, device=self.device, generator=generator(self.device, *key))
        return lam, perm

    def transform_batch(self, ctx: ClientContext, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        lam, perm = self.draw(ctx, len(x))
        return mix(x, as_soft(y, self.num_classes), lam, perm)
