"""FedMix (Yoon et al., ICLR 2021) as a plug-in: the loss of Mixup with the mean images of
other clients, approximated to first order so no client's raw images leave it.

Mean images. In `setup` every client averages its (test-normalised, rotated where its images
are) images in groups of M (a seeded shuffle of its positions; a remainder smaller than M is
left out, a client with fewer than M images sends one mean of all) and sends the means x̄ with
their mean one-hot labels ȳ — a simulated upload, made once (FedBR's code redraws B means every
step, each from M random images of a uniformly drawn client; not reproduced). The pool is built
again identically when a run resumes. Its transfer is not counted in the bytes of a round.

One local step (batch x, y of size B; B_p = B pool entries drawn uniformly with replacement
from a (seed, round, client)-keyed generator), FedMix's global-Mixup loss

    ℓ(f((1−λ)x + λx̄), (1−λ)y + λȳ)
      ≈ (1−λ)·CE(f(x_in), y) + λ·CE(f(x_in), ȳ) + λ·⟨∂[(1−λ)·CE(f(x_in), y)]/∂x_in, x̄⟩ / B,

x_in = (1−λ)x: CE is linear in the target, and the first-order Taylor term in the input
(FedMix Eq. 4-5) drops O(λ²). CE is the batch mean, as in FedBR's code and in its reference
re-implementations, so the input gradient of row i is ∂CE_i/∂x_i / B and the Taylor term is
(λ/B²)·Σ_i ⟨∂[(1−λ)CE_i]/∂x_i, x̄_i⟩. The input gradient is taken with `create_graph=True`, so
the step's backward pass differentiates the Taylor term too (a second-order pass).

With λ = 0 the plug-in does nothing (no pool, no draws): the run is its base algorithm's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedhet.algorithms.base import ClientContext, StepOutput, as_soft, task_loss
from fedhet.engine.seeding import generator
from fedhet.engine.server import ServerView
from fedhet.plugins import PLUGINS, Plugin


def client_means(x: Tensor, soft_y: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Means of consecutive groups of `size` rows of x and soft_y (a remainder smaller than
    `size` left out; fewer rows than `size`: one mean of all)."""
    groups = max(len(x) // size, 1)
    size = min(size, len(x))
    used = groups * size
    return (x[:used].view(groups, size, *x.shape[1:]).mean(1),
            soft_y[:used].view(groups, size, -1).mean(1))


def fedmix_loss(model: torch.nn.Module, x: Tensor, y: Tensor, x_bar: Tensor, y_bar: Tensor,
                lam: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """FedMix's approximated loss of one batch (module docstring); returns (loss, features,
    logits, x_in) with x_in = (1−λ)x, the input the model saw."""
    x_in = ((1 - lam) * x).detach().requires_grad_()  # x_in = (1−λ)x
    features = model.features(x_in)
    logits = model.head(features)
    own = (1 - lam) * task_loss(logits, y)  # (1−λ)·CE(f(x_in), y)
    mean = lam * task_loss(logits, y_bar)  # λ·CE(f(x_in), ȳ), ȳ soft
    # λ·⟨∂own/∂x_in, x̄⟩/B: the first-order term; its graph is kept so the backward pass
    # reaches the parameters through the input gradient
    (grad,) = torch.autograd.grad(own, x_in, create_graph=True)
    taylor = lam * (grad * x_bar).sum() / len(x)
    return own + mean + taylor, features, logits, x_in


@PLUGINS.register("fedmix")
class FedMix(Plugin):
    """Local steps on FedMix's first-order approximation of Mixup with shared mean images."""

    name = "fedmix"

    def setup(self, server: ServerView) -> None:
        self.lam = float(self.hp["lam"])
        if self.lam == 0:
            return
        self.seed, self.device = server.seed, server.device
        size = int(self.hp["mean_size"])
        xs, ys = [], []
        for k, idx in enumerate(server.client_indices):
            if len(idx) == 0:
                continue
            cpu = generator(torch.device("cpu"), server.seed, "fedmix", "pool", k)
            pos = torch.randperm(len(idx), generator=cpu).to(idx.device)
            angles = None if server.client_angles is None else server.client_angles[k][pos]
            rows = idx[pos]
            x = server.augmenter.test(server.x_train[rows], angles)
            x_bar, y_bar = client_means(x, as_soft(server.y_train[rows], server.num_classes),
                                        size)
            xs.append(x_bar)
            ys.append(y_bar)
        self.pool_x, self.pool_y = torch.cat(xs), torch.cat(ys)

    def client_begin(self, ctx: ClientContext) -> None:
        if self.lam:
            self.gen = generator(self.device, self.seed, "fedmix", ctx.round, ctx.client)

    def forward(self, ctx: ClientContext, x: Tensor, y: Tensor) -> StepOutput | None:
        if self.lam == 0:
            return None
        draw = torch.randint(len(self.pool_x), (len(x),), device=self.device, generator=self.gen)
        loss, features, logits, x_in = fedmix_loss(ctx.model, x, y, self.pool_x[draw],
                                                   self.pool_y[draw], self.lam)
        return StepOutput(features, logits, y, loss, inputs=x_in.detach())
