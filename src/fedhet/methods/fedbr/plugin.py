"""FedBR (Guo et al., ICML 2023) as a plug-in: local learning bias reduction.

Each local step of client i (Alg. 1, Eqs. 2-7), with x the local batch and x̃_p the round's
pseudo-data (`fedhet.methods.fedbr.pseudo`):

    z_x = φ_i(x),  z_p = φ_i(x̃_p),  z_g = φ_g(x̃_p)          φ_g: the received model, eval mode
    max step:  θ ← θ + η ∇_θ L_con(θ; z_p, z_g, z_x)          features detached, plain SGD ascent
    min step:  CE(h(z_x), y) + λ·softCE(h(z_p), ỹ_p) + μ·L_con(θ; z_p, z_g, z_x)   θ frozen

Component 1 is the λ term, Component 2 the max step with the μ term. P_θ, the projection, is a
plug-in module (`Plugin.modules`): the engine sends it with the model, averages it over the
round's clients and saves it. Only the max step moves it (the min step reads θ detached), so
a base algorithm's corrections (FedProx, SCAFFOLD, FedCM) never apply to it; a run with weight
decay would also decay θ in the engine's step (FedBR uses none).

Pseudo-data is drawn on the server from a (seed, round)-keyed generator, so every client of a
round gets the same D_p and a resumed run draws it again; RSM reads the clients' images as they
train on them (rotation applied, normalised), a simulated upload. Pairs of pseudo and local
samples are cut to the shorter of the two batches (the code pairs them by index).

The returned `StepOutput` holds the local batch only (pseudo terms are already in its loss), so
plug-ins that read features or logits (FedDecorr, FedNTD) act on local data, as in the code.
λ = μ = 0 leaves the step to the engine: the run is its base algorithm's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call

from fedhet.algorithms.base import ClientContext, StepOutput, as_soft, task_loss
from fedhet.algorithms.losses import contrastive_loss
from fedhet.engine.seeding import generator
from fedhet.engine.server import ServerView
from fedhet.methods.fedbr.losses import projection_head
from fedhet.methods.fedbr.pseudo import Groups, mixture, rsm, uniform_labels
from fedhet.plugins import PLUGINS, Plugin


@PLUGINS.register("fedbr")
class FedBR(Plugin):
    """Pseudo-data with uniform labels (Component 1) and an adversarially trained contrastive
    projection (Component 2) on top of any base algorithm."""

    name = "fedbr"

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        hp = self.hp
        self.active = hp["lam"] > 0 or hp["mu"] > 0
        self.contrast = hp["mu"] > 0
        self.projected = self.contrast and hp["projection"] == "mlp"
        self.z_g: Tensor | None = None  # φ_g(x̃_p), kept while x̃_p and φ_g stay the same

    def modules(self, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
        if not self.projected:
            return {}
        return {"proj": projection_head(model.feature_dim, self.hp["proj_hidden"],
                                        self.hp["proj_dim"])}

    # -- pseudo-data ----------------------------------------------------------------------
    def setup(self, server: ServerView) -> None:
        self.server = server
        if not self.active:
            return
        hp = self.hp
        self.size = int(hp["pseudo_size"] or server.run["training"]["batch_size"])
        self.groups, self.load = (self._local_source(server) if hp["pseudo"] == "rsm"
                                  else self._proxy_source(server))
        if hp["refresh"] == "once":
            self.x_p, self.q_p = self._draw(0)

    def _local_source(self, server: ServerView) -> tuple[Groups, Callable[[Tensor], Tensor]]:
        """The clients' images, grouped by client or (balanced) by class over all clients."""
        angles = None
        if server.client_angles is not None:
            angles = torch.zeros(server.y_train.shape[0], device=server.device)
            for rows, a in zip(server.client_indices, server.client_angles):
                angles[rows] = a
        if self.hp["rsm_source"] == "client":
            groups = Groups(server.client_indices)
        else:
            rows = torch.cat(server.client_indices)
            labels = server.y_train[rows]
            groups = Groups([rows[labels == c] for c in range(server.num_classes)])

        def load(take: Tensor) -> Tensor:
            return server.augmenter.test(server.x_train[take],
                                         None if angles is None else angles[take])

        return groups, load

    def _proxy_source(self, server: ServerView) -> tuple[Groups, Callable[[Tensor], Tensor]]:
        """Mixture's proxy dataset, conformed to the run's images, normalised like them."""
        from fedhet.data import load_dataset
        from fedhet.data.imageops import conform

        data = load_dataset(self.hp["proxy"], server.run["dataset"]["root"],
                            dict(self.hp["proxy_options"] or {}))
        x = conform(data.x_train, int(server.x_train.shape[1]),
                    int(server.x_train.shape[-1])).to(server.device)
        groups = Groups([torch.arange(x.shape[0], device=server.device)])
        return groups, lambda take: server.augmenter.test(x[take])

    def _draw(self, round: int) -> tuple[Tensor, Tensor]:
        gen = generator(self.server.device, self.server.seed, "fedbr", "pseudo", round)
        x = rsm(self.groups, self.load, self.size, int(self.hp["rsm_samples"]), gen)
        return x, uniform_labels(self.size, self.server.num_classes, self.server.device)

    def round_begin(self, round: int, clients: list[int]) -> None:
        if self.active and self.hp["refresh"] == "round":
            self.x_p, self.q_p = self._draw(round)
        self.z_g = None  # φ_g changed

    def client_begin(self, ctx: ClientContext) -> None:
        if not self.active:
            return
        self.gen = generator(self.server.device, self.server.seed, "fedbr", "mix", ctx.round,
                             ctx.client)
        if self.mixes:
            self.z_g = None  # Mixture: a new x̃_p every step

    @property
    def mixes(self) -> bool:
        return self.hp["pseudo"] == "mixture" and self.hp["mixture_k"] > 0

    def pseudo_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """This step's (x̃_p, ỹ_p): the round's D_p, mixed with the local batch (Eq. 4)."""
        if not self.mixes:
            return self.x_p, self.q_p
        q_local = as_soft(y, self.server.num_classes)[:, :self.server.num_classes]
        return mixture(self.x_p, self.q_p, x, q_local, int(self.hp["mixture_k"]), self.gen)

    def global_features(self, x_p: Tensor) -> Tensor:
        """z_g = φ_g(x̃_p) from the received model (eval mode, no gradient); recomputed only
        when x̃_p changed (Mixture, per step) or the global model did (a new round)."""
        if self.z_g is None or (self.mixes and self.hp["global_feature"] == "per_step"):
            module = self.server.global_model.module
            module.eval()
            with torch.no_grad():
                self.z_g = module.features(x_p)
        return self.z_g

    # -- one local step -------------------------------------------------------------------
    def forward(self, ctx: ClientContext, x: Tensor, y: Tensor) -> StepOutput | None:
        if not self.active:
            return None
        hp = self.hp
        model = ctx.model
        z_x = model.features(x)
        logits = model.head(z_x)
        loss = task_loss(logits, y)
        x_p, q_p = self.pseudo_batch(x, y)
        z_p = model.features(x_p)
        if hp["lam"] > 0:  # Component 1 (Eq. 3)
            loss = loss + hp["lam"] * task_loss(model.head(z_p), q_p)
        if self.contrast:  # Component 2 (Eqs. 5-7)
            n = min(x_p.shape[0], x.shape[0])
            a, g, b = z_p[:n], self.global_features(x_p)[:n], z_x[:n]
            project = self.projection(ctx, a.detach(), g, b.detach())
            loss = loss + hp["mu"] * contrastive_loss(project(a), project(g), project(b),
                                                      hp["tau1"], hp["tau2"])
        return StepOutput(z_x, logits, y, loss, inputs=x)

    def projection(self, ctx: ClientContext, a: Tensor, g: Tensor,
                   b: Tensor) -> Callable[[Tensor], Tensor]:
        """P_θ for the min step, after the max step moved θ on the detached features."""
        if not self.projected:
            return lambda z: z
        head = ctx.modules[self.module_key("proj")]
        if self.hp["max_step"]:
            params = list(head.parameters())
            with torch.enable_grad():
                ascent = contrastive_loss(head(a), head(g), head(b), self.hp["tau1"],
                                          self.hp["tau2"])
                grads = torch.autograd.grad(ascent, params)
            with torch.no_grad():  # θ ← θ + η ∇_θ L_con (no momentum: the code's disc_opt)
                for p, grad in zip(params, grads):
                    p.add_(grad, alpha=ctx.lr)
        frozen = {name: p.detach() for name, p in head.named_parameters()}
        return lambda z: functional_call(head, frozen, (z,))

    def broadcast_tensors(self) -> list[Tensor]:
        """Pseudo-data drawn every round goes to each client with the model (the one batch of
        `once` is sent at the start and not counted)."""
        if self.active and self.hp["refresh"] == "round":
            return [self.x_p]
        return []
