"""Local-only training: every client keeps and trains its own model, never averaged."""

from __future__ import annotations

from typing import Any

import torch

from fedhet.algorithms.base import ALGORITHMS, Algorithm, ClientContext, ClientUpdate


@ALGORITHMS.register("local")
class Local(Algorithm):
    """Each client continues from its own model of its last round (from the common initial
    model on its first), so no client ever sees another's update.

    The server still returns the sample-weighted average of the round's models, only so the
    engine has a global model to log and save; it reaches no client. The meaningful metric is
    the accuracy of the client models (`eval.client_models`).
    """

    name = "local"
    scores_client_models = True  # the paper's "Local" row: each client's own model

    def setup(self, global_params: torch.Tensor) -> None:
        self.initial: tuple[torch.Tensor, torch.Tensor] | None = None
        self.params: dict[int, torch.Tensor] = {}
        self.buffers: dict[int, torch.Tensor] = {}

    def client_begin(self, ctx: ClientContext) -> None:
        if self.initial is None:
            # the first client of the run receives the common initial model
            if ctx.round != 1:
                raise RuntimeError("local: the initial model is unknown after round 1 "
                                   "(resume from a checkpoint, which holds it)")
            self.initial = (ctx.global_params.clone(), ctx.global_buffers.clone())
        params, buffers = self.initial
        # ctx.params/buffers are the flat views backing the working model
        ctx.params.copy_(self.params.get(ctx.client, params))
        ctx.buffers.copy_(self.buffers.get(ctx.client, buffers))

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        self.params[ctx.client] = update.params.clone()
        self.buffers[ctx.client] = update.buffers.clone()

    def state_dict(self) -> dict[str, Any]:
        assert self.initial is not None, "a checkpoint follows at least one round"
        return {"initial_params": self.initial[0], "initial_buffers": self.initial[1],
                "params": self.params, "buffers": self.buffers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.initial = (state["initial_params"], state["initial_buffers"])
        self.params = {int(k): v for k, v in state["params"].items()}
        self.buffers = {int(k): v for k, v in state["buffers"].items()}
