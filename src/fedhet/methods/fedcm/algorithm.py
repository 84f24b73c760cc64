"""FedCM (Xu et al., 2021): client-level momentum towards the global update direction."""

from __future__ import annotations

from typing import Any

import torch

from fedhet.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    ClientContext,
    ClientUpdate,
    weighted_average,
)


@ALGORITHMS.register("fedcm")
class FedCM(Algorithm):
    """Client momentum with the server's last update direction Δ (Xu et al., 2021, Alg. 1).

    Client step:  g ← α·g + (1−α)·Δ_t   (α weighs the local gradient; FedBR's code: α = 0.1).
    Server:       w_{t+1} = Σ_k (n_k/Σn) w_k,   Δ_{t+1} = (w_t − w_{t+1}) / (η·K),
    with η the round's learning rate and K the mean number of local steps, so Δ is the mean
    local gradient of the round. Round 1 has no Δ yet and is plain local SGD, gradient
    unscaled (the code skips the mix while Δ = 0, not g ← α·g). The mix enters before
    the engine's weight decay and client momentum (the code mixes after both; the same
    without them, as in FedBR's runs). Δ is sent to every sampled client with the model.
    """

    name = "fedcm"

    def setup(self, global_params: torch.Tensor) -> None:
        self.delta = torch.zeros_like(global_params)

    def correct_gradient(self, ctx: ClientContext) -> None:
        if ctx.round == 1:
            return
        alpha = self.hp["alpha"]
        ctx.grads.mul_(alpha).add_(self.delta, alpha=1.0 - alpha)

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        update.extra["lr"] = ctx.lr

    def aggregate(
        self, round: int, global_params: torch.Tensor, global_buffers: torch.Tensor,
        updates: list[ClientUpdate],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        params = weighted_average(updates, "params")
        lr = updates[0].extra["lr"]
        steps = sum(u.steps for u in updates) / len(updates)
        # Δ_{t+1} = (w_t − avg_k w_k) / (η·K)
        torch.sub(global_params, params, out=self.delta).div_(lr * steps)
        return params, weighted_average(updates, "buffers")

    def broadcast_tensors(self) -> list[torch.Tensor]:
        return [self.delta]

    def state_dict(self) -> dict[str, Any]:
        return {"delta": self.delta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.delta.copy_(state["delta"])
