"""FedAvg, FedProx, SCAFFOLD, FedNova, FedAvgM, FedDyn and MOON as flat-vector update rules
(FedAvg is the `Algorithm` base class itself)."""

from __future__ import annotations

from typing import Any

import torch

from fedhet.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    ClientContext,
    ClientUpdate,
    StackedStep,
    StepOutput,
    weighted_average,
)
from fedhet.algorithms.losses import contrastive_loss
from fedhet.engine.sgd import descend

ALGORITHMS.add("fedavg", Algorithm)


def uniform_average(updates: list[ClientUpdate], attr: str) -> torch.Tensor:
    """(1/|S|) Σ_k v_k over the returned clients."""
    return torch.stack([getattr(u, attr) for u in updates]).mean(0)


class PerClientState:
    """One flat tensor per client, created as zeros on first use, checkpointable."""

    def __init__(self) -> None:
        self.values: dict[int, torch.Tensor] = {}
        self.like: torch.Tensor | None = None

    def get(self, client: int) -> torch.Tensor:
        if client not in self.values:
            assert self.like is not None, "setup() must run first"
            self.values[client] = torch.zeros_like(self.like)
        return self.values[client]

    def state_dict(self) -> dict[int, torch.Tensor]:
        return dict(self.values)

    def load_state_dict(self, state: dict[int, torch.Tensor]) -> None:
        self.values = {int(k): v for k, v in state.items()}


@ALGORITHMS.register("fedprox")
class FedProx(Algorithm):
    """Local objective F_k(w) + (μ/2)‖w − w_g‖²  (Li et al., 2020, Eq. 2)."""

    name = "fedprox"

    def correct_gradient(self, ctx: ClientContext) -> None:
        # ∇ (μ/2)‖w − w_g‖² = μ (w − w_g)
        ctx.grads.add_(ctx.params - ctx.global_params, alpha=self.hp["mu"])


@ALGORITHMS.register("scaffold")
class Scaffold(Algorithm):
    """SCAFFOLD with option-II control variates (Karimireddy et al., 2020, Alg. 1).

    Local step: y ← y − η (g(y) − c_i + c). The correction −η(c − c_i) is applied after
    the optimizer step, outside client momentum (as the VHL/FedImpro code does): through
    the momentum buffer it would be amplified 1/(1−ρ)-fold on top of c_i, which already
    carries the momentum-amplified step, and runs diverge. Without momentum both coincide.
    Client:     c_i⁺ = c_i − c + (x − y)/(K η),   Δc_i = c_i⁺ − c_i.
    Server:     x ← x + η_g · avg(y_i − x),       c ← c + (|S|/N) · (1/|S|) Σ Δc_i.
    `paper_server_update: false` drops the |S|/N factor, as the VHL/FedImpro code does.
    avg is weighted by sample count (`model_average: samples`, as in the VHL/FedImpro code and
    every other algorithm here) or the plain mean over the sampled clients (`mean`, Alg. 1).
    """

    name = "scaffold"

    def setup(self, global_params: torch.Tensor) -> None:
        self.c = torch.zeros_like(global_params)
        self.c_i = PerClientState()
        self.c_i.like = global_params

    def client_begin(self, ctx: ClientContext) -> None:
        # held: a step replayed as a CUDA graph reads this client's c − c_i where it read the
        # first client's
        ctx.extra["correction"] = ctx.hold("scaffold.correction", self.c - self.c_i.get(ctx.client))

    def after_step(self, ctx: ClientContext) -> None:
        descend(ctx.params, ctx.extra["correction"], ctx.step_lr)  # y ← y − η(c − c_i)

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        c_i = self.c_i.get(ctx.client)
        new_c_i = c_i - self.c + (ctx.global_params - update.params) / (update.steps * ctx.lr)
        update.extra["delta_c"] = new_c_i - c_i
        c_i.copy_(new_c_i)

    def aggregate(self, round, global_params, global_buffers, updates):
        if self.hp["model_average"] == "mean":
            avg = torch.stack([u.params for u in updates]).mean(0)
        else:
            avg = weighted_average(updates, "params")
        params = global_params + self.hp["global_lr"] * (avg - global_params)
        delta_c = torch.stack([u.extra["delta_c"] for u in updates]).mean(0)
        factor = len(updates) / self.num_clients if self.hp["paper_server_update"] else 1.0
        self.c.add_(delta_c, alpha=factor)
        return params, weighted_average(updates, "buffers")

    def broadcast_tensors(self) -> list[torch.Tensor]:
        return [self.c]

    def upload_tensors(self, update: ClientUpdate) -> list[torch.Tensor]:
        return [update.params, update.buffers, update.extra["delta_c"]]

    def state_dict(self) -> dict[str, Any]:
        return {"c": self.c, "c_i": self.c_i.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.c.copy_(state["c"])
        self.c_i.load_state_dict(state["c_i"])


@ALGORITHMS.register("fednova")
class FedNova(Algorithm):
    """Normalised averaging (Wang et al., 2020).

    With client momentum ρ and τ local steps the normaliser is
    a_i = [τ − ρ(1 − ρ^τ)/(1 − ρ)] / (1 − ρ)  (a_i = τ for plain SGD);
    d_i = (w_g − w_i)/a_i and w_g ← w_g − (Σ p_i a_i) Σ p_i d_i with p_i = n_i/Σn.
    """

    name = "fednova"

    def normaliser(self, steps: int) -> float:
        rho = self.momentum
        if rho == 0:
            return float(steps)
        return (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        a = self.normaliser(update.steps)
        update.extra["a"] = a
        update.extra["d"] = (ctx.global_params - update.params) / a

    def aggregate(self, round, global_params, global_buffers, updates):
        total = float(sum(u.num_samples for u in updates))
        tau_eff = sum(u.num_samples / total * u.extra["a"] for u in updates)
        direction = torch.zeros_like(global_params)
        for u in updates:
            direction.add_(u.extra["d"], alpha=u.num_samples / total)
        return global_params - tau_eff * direction, weighted_average(updates, "buffers")


@ALGORITHMS.register("fedavgm")
class FedAvgM(Algorithm):
    """Server momentum (Hsu et al., 2019): v ← βv + Δ, w_g ← w_g − η_s v, Δ = w_g − avg(w_i)."""

    name = "fedavgm"

    def setup(self, global_params: torch.Tensor) -> None:
        self.velocity = torch.zeros_like(global_params)

    def aggregate(self, round, global_params, global_buffers, updates):
        delta = global_params - weighted_average(updates, "params")
        self.velocity.mul_(self.hp["server_momentum"]).add_(delta)
        params = global_params - self.hp["server_lr"] * self.velocity
        return params, weighted_average(updates, "buffers")

    def state_dict(self) -> dict[str, Any]:
        return {"velocity": self.velocity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.velocity.copy_(state["velocity"])


@ALGORITHMS.register("feddyn")
class FedDyn(Algorithm):
    """Dynamic regularisation (Acar et al., 2021, Alg. 1).

    Client k minimises L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)‖θ − θ^{t−1}‖², then
    ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1}).
    Server: h ← h − α (1/m) Σ_{k∈P}(θ_k^t − θ^{t−1}),  θ^t = (1/|P|) Σ_{k∈P} θ_k^t − h/α.
    """

    name = "feddyn"

    def setup(self, global_params: torch.Tensor) -> None:
        self.h = torch.zeros_like(global_params)
        self.grad_state = PerClientState()
        self.grad_state.like = global_params

    def client_begin(self, ctx: ClientContext) -> None:
        # ∇L_k(θ_k^{t−1}), held: a step replayed as a CUDA graph reads it where it read the
        # first client's
        ctx.extra["grad_state"] = ctx.hold("feddyn.grad_state", self.grad_state.get(ctx.client))

    def correct_gradient(self, ctx: ClientContext) -> None:
        alpha = self.hp["alpha"]
        ctx.grads.sub_(ctx.extra["grad_state"])
        ctx.grads.add_(ctx.params - ctx.global_params, alpha=alpha)

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        self.grad_state.get(ctx.client).sub_(update.params - ctx.global_params, alpha=self.hp["alpha"])

    def aggregate(self, round, global_params, global_buffers, updates):
        alpha = self.hp["alpha"]
        drift = torch.stack([u.params - global_params for u in updates]).sum(0)
        self.h.sub_(drift, alpha=alpha / self.num_clients)
        params = uniform_average(updates, "params") - self.h / alpha
        return params, weighted_average(updates, "buffers")

    def state_dict(self) -> dict[str, Any]:
        return {"h": self.h, "grad_state": self.grad_state.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.h.copy_(state["h"])
        self.grad_state.load_state_dict(state["grad_state"])


@ALGORITHMS.register("moon")
class Moon(Algorithm):
    """Model-contrastive learning (Li et al., 2021, Eq. 3–4).

    ℓ_con = −log( e^{sim(z, z_glob)/τ} / (e^{sim(z, z_glob)/τ} + e^{sim(z, z_prev)/τ}) ),
    loss = CE + μ ℓ_con, with z the representation fed to the classifier, z_glob from the
    received global model and z_prev from this client's previous local model (the
    received model on a client's first round). Reference models run in eval mode.
    """

    name = "moon"
    needs_reference_models = True

    def setup(self, global_params: torch.Tensor) -> None:
        self.prev_params: dict[int, torch.Tensor] = {}
        self.prev_buffers: dict[int, torch.Tensor] = {}

    def attach(self, global_model) -> None:
        """The server's model, holding w_g during local training (read only)."""
        self.global_model = global_model

    def client_begin(self, ctx: ClientContext) -> None:
        if ctx.reference is None:  # stacked training: `stacked_inputs` carries w_prev
            return
        params = self.prev_params.get(ctx.client, ctx.global_params)
        buffers = self.prev_buffers.get(ctx.client, ctx.global_buffers)
        ctx.reference.load(params, buffers)  # the client's own spare model
        self.global_model.module.eval()
        ctx.reference.module.eval()

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor:
        with torch.no_grad():
            z_glob = self.global_model.module.features(out.inputs)
            z_prev = ctx.reference.module.features(out.inputs)
        tau = self.hp["temperature"]
        return self.hp["mu"] * contrastive_loss(out.features, z_glob, z_prev, tau, tau)

    def stacked_inputs(self, ctx: ClientContext) -> dict[str, torch.Tensor]:
        return {"w_prev": self.prev_params.get(ctx.client, ctx.global_params),
                "b_prev": self.prev_buffers.get(ctx.client, ctx.global_buffers)}

    def stacked_loss(self, step: StackedStep) -> torch.Tensor:
        z_glob = step.forward_with(step.global_params, step.global_buffers)[0].detach()
        z_prev = step.forward_with(step.inputs["w_prev"], step.inputs["b_prev"])[0].detach()
        tau = self.hp["temperature"]
        return self.hp["mu"] * contrastive_loss(step.features, z_glob, z_prev, tau, tau)

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        self.prev_params[ctx.client] = update.params
        self.prev_buffers[ctx.client] = update.buffers

    def state_dict(self) -> dict[str, Any]:
        return {"prev_params": self.prev_params, "prev_buffers": self.prev_buffers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prev_params = {int(k): v for k, v in state["prev_params"].items()}
        self.prev_buffers = {int(k): v for k, v in state["prev_buffers"].items()}
