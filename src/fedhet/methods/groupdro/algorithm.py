"""GroupDRO (Sagawa et al., 2019) with one group per client, as FedBR runs it."""

from __future__ import annotations

from typing import Any

import torch

from fedhet.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    ClientContext,
    ClientUpdate,
    StepOutput,
)


@ALGORITHMS.register("groupdro")
class GroupDRO(Algorithm):
    """Server-side exponentiated re-weighting of clients by their loss.

    Each round, for every returned client k:  q_k ← q_k·exp(η·ℓ_k)   (q_k = 1 at the start),
    then  w = Σ_{k∈S} q_k w_k / Σ_{k∈S} q_k  (buffers alike): sample counts play no part, so
    η = 0 is the uniform average over the round's clients. q is kept per client id (FedBR's
    code keys it by sampling slot, a bug) as log q, so the weights are a softmax over the
    round's log q and never overflow. ℓ_k is read from the task loss of the local steps
    (`loss`: the first step's, i.e. the received model's, or the mean over the round).
    """

    name = "groupdro"

    def setup(self, global_params: torch.Tensor) -> None:
        self.log_q = torch.zeros(self.num_clients, dtype=global_params.dtype,
                                 device=global_params.device)

    @property
    def q(self) -> torch.Tensor:
        """The clients' weights q_k = exp(log q_k)."""
        return self.log_q.exp()

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> None:
        """Records the step's task loss on the device (no host sync); adds nothing."""
        loss = out.loss.detach().to(self.log_q.dtype)
        if ctx.steps == 0:
            ctx.extra["dro_loss"] = loss
        elif self.hp["loss"] == "mean":
            ctx.extra["dro_loss"] = ctx.extra["dro_loss"] + loss
        return None

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        loss = ctx.extra["dro_loss"]
        update.extra["loss"] = loss / ctx.steps if self.hp["loss"] == "mean" else loss

    def aggregate(
        self, round: int, global_params: torch.Tensor, global_buffers: torch.Tensor,
        updates: list[ClientUpdate],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for u in updates:
            # log q_k ← log q_k + η·ℓ_k
            self.log_q[u.client].add_(u.extra["loss"], alpha=self.hp["eta"])
        # q_k / Σ_{j∈S} q_j
        weights = torch.softmax(torch.stack([self.log_q[u.client] for u in updates]), 0)
        return self._average(updates, "params", weights), self._average(updates, "buffers", weights)

    @staticmethod
    def _average(updates: list[ClientUpdate], attr: str, weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(getattr(updates[0], attr))
        for u, w in zip(updates, weights):
            out.addcmul_(getattr(u, attr), w.to(out.dtype))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"log_q": self.log_q}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.log_q.copy_(state["log_q"])
