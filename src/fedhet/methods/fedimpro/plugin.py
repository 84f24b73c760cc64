"""FedImpro — shared feature distributions for decoupled high-level training (Tang et al.,
ICLR 2024) as a plug-in.

The model splits at a point p into a low-level network φ (input → h) and a high-level network θ
(h → logits). Every client keeps per-class Gaussian estimates (μ_c, σ_c) of its features h by a
moving average (`statistics.update_estimate`, Eq. 6); the server merges the sampled clients'
estimates, optionally with noise σ_ε (`statistics.Merger`, Eq. 7) and broadcasts them with the
model. A local step trains θ on the real features and on features sampled from the shared
Gaussians (Eq. 5):

    L = CE(θ(φ(x)), y) + w_f(t) · CE(θ(ĥ), ŷ),   ĥ ~ N(μ_ŷ, σ_ŷ²) detached,  w_f(t) = t / T_w

with t the local epochs elapsed before the round (schedule `gradual2half`, the code's; the
others are in the declaration). ĥ carries no gradient into φ. With `forward: joint` (the
code) real and sampled features go through θ in one pass, so BatchNorm layers in θ normalise
them together and the sampled features' loss still reaches φ through the batch statistics;
`forward: separate` runs two passes and isolates φ fully.

With `fake_per_class: 0` the plug-in does nothing (no sampling, no random draws, no
statistics), so the run equals its base algorithm's run.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet import declare
from fedhet.algorithms.base import ClientContext, ClientUpdate, StepOutput, hard_labels, task_loss
from fedhet.catalog import method
from fedhet.engine.seeding import generator
from fedhet.engine.server import ServerView
from fedhet.methods.fedimpro.statistics import (
    Estimate, Merger, add_noise, combine_losses, fake_labels, feature_weight, sample_features,
    update_estimate,
)
from fedhet.plugins import PLUGINS, Plugin


def resolve_params(params: dict[str, Any]) -> dict[str, Any]:
    """The declared defaults with `params` checked and filled in, plus the checks a Param
    cannot state (`estimator_weight` is a word or a number)."""
    hp = declare.resolve_params(method("fedimpro").params, params, "plugins(fedimpro).params.")
    weight = hp["estimator_weight"]
    if weight not in ("paper", "code"):
        declare.Param(0.5, "", kind="number", above=0, at_most=1).check(
            weight, "plugins(fedimpro).params.estimator_weight (paper, code or a number)")
    split = hp["split"]
    if isinstance(split, bool) or not isinstance(split, (int, str)):
        raise declare.ConfigError(
            f"setting 'plugins(fedimpro).params.split' is {split!r}; allowed: a split-point "
            "name or a 1-based position")
    return hp


@PLUGINS.register("fedimpro")
class FedImpro(Plugin):
    """Per-class Gaussian feature statistics shared through the server; θ trains on samples."""

    name = "fedimpro"

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.hp = resolve_params(self.hp)
        self.active = self.hp["fake_per_class"] != 0

    # -- setup -------------------------------------------------------------------------------
    def setup(self, server: ServerView) -> None:
        if not self.active:
            return
        hp = self.hp
        self.server = server
        module = server.global_model.module
        self.split = module.split_point(hp["split"])
        self.shape = tuple(module.split_shapes[self.split])
        self.num_classes = server.num_classes
        dim = math.prod(self.shape)
        self.class_sizes = torch.bincount(hard_labels(server.y_train),
                                          minlength=self.num_classes).float()
        batch = int(server.run["training"]["batch_size"])
        per_class = hp["fake_per_class"]
        self.per_class = batch // self.num_classes + 1 if per_class is None else int(per_class)
        self.epochs = float(server.run["training"]["local_epochs"])
        self.std_cap = hp["std_cap"]
        gen = generator(torch.device("cpu"), server.seed, "fedimpro", "init")
        init_sigma = 0.1 if self.std_cap is None else float(self.std_cap)  # code: σ = 0.1
        mu = torch.rand(self.num_classes, dim, generator=gen)  # code: μ ~ U[0, 1)
        self.shared = Estimate(mu.to(server.device),
                               torch.full((self.num_classes, dim), init_sigma, device=server.device))
        self.merger = Merger(hp["aggregate"])
        self.weight = 0.0

    def round_begin(self, round: int, clients: list[int]) -> None:
        if self.active:
            hp = self.hp
            self.weight = feature_weight(hp["schedule"], (round - 1) * self.epochs,
                                         hp["weight_ramp_epochs"], hp["weight_cap"], hp["weight"])

    # -- local training ----------------------------------------------------------------------
    def client_begin(self, ctx: ClientContext) -> None:
        if not self.active:
            return
        self.local = self.shared.clone()  # the received estimate, updated by local batches
        self.gen = generator(self.server.device, self.server.seed, "fedimpro", ctx.round,
                             ctx.client)
        self.labels = fake_labels(self.per_class, self.num_classes, self.server.device)

    def forward(self, ctx: ClientContext, x: Tensor, y: Tensor) -> StepOutput | None:
        if not self.active:
            return None
        model = ctx.model
        source = self.shared if self.hp["sample_from"] == "global" else self.local
        fake = sample_features(source, self.labels, self.shape, self.gen)
        captured: list[Tensor] = []
        hook = model.head.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
        try:
            h = model.forward_to(x, self.split)
            fake = fake.to(h.dtype)
            if self.server.channels_last and fake.dim() == 4:
                fake = fake.contiguous(memory_format=torch.channels_last)
            if self.hp["forward"] == "joint":
                logits = model.forward_from(torch.cat([h, fake]), self.split)
                real_logits, fake_logits = logits[:len(h)], logits[len(h):]
                features = captured[0][:len(h)]
            else:
                real_logits = model.forward_from(h, self.split)
                fake_logits = model.forward_from(fake, self.split)
                features = captured[0]
        finally:
            hook.remove()
        real_loss = task_loss(real_logits, y)
        fake_loss = F.cross_entropy(fake_logits, self.labels)
        loss = combine_losses(self.hp["schedule"], real_loss, fake_loss, self.weight,
                              len(h), len(self.labels))
        with torch.no_grad():
            update_estimate(self.local, h.detach().flatten(1).float(), hard_labels(y),
                            self.class_sizes, self.hp["estimator_weight"], self.std_cap)
        return StepOutput(features, real_logits, y, loss, inputs=x)

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        """The client's upload (with noise σ_ε) goes straight into the server's running sums."""
        if not self.active:
            return
        noise_gen = generator(self.server.device, self.server.seed, "fedimpro", "noise",
                              ctx.round, ctx.client)
        upload = add_noise(self.local, float(self.hp["noise"]), noise_gen)
        counts = None
        if self.hp["aggregate"] == "pooled":
            labels = hard_labels(self.server.y_train[self.server.client_indices[ctx.client]])
            counts = torch.bincount(labels, minlength=self.num_classes)
        self.merger.add(upload, update.num_samples, counts)
        self.local = None

    def round_end(self, round: int, updates: list[ClientUpdate]) -> None:
        if not self.active:
            return
        merged = self.merger.result(self.shared)
        if self.std_cap is not None:
            merged.sigma.clamp_(max=self.std_cap)
        self.shared = merged
        self.merger.reset()

    # -- communication, state, outputs -------------------------------------------------------
    def broadcast_tensors(self) -> list[Tensor]:
        return [self.shared.mu, self.shared.sigma] if self.active else []

    def upload_tensors(self, update: ClientUpdate) -> list[Tensor]:
        return [self.shared.mu, self.shared.sigma] if self.active else []  # same shapes

    def state_dict(self) -> dict[str, Any]:
        if not self.active:
            return {}
        return {"mu": self.shared.mu, "sigma": self.shared.sigma}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.active and state:
            self.shared = Estimate(state["mu"].clone(), state["sigma"].clone())

    def files(self) -> dict[str, Any]:
        """The final shared statistics, for the inversion figures and for inspection."""
        if not self.active:
            return {}
        return {"shared_statistics.pt": {
            "mu": self.shared.mu.cpu(), "sigma": self.shared.sigma.cpu(),
            "split": self.split, "shape": list(self.shape)}}
