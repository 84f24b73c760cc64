"""The SGD step every local update uses (the engine's clients, server-side plug-in training)."""

from __future__ import annotations

import torch


@torch.no_grad()
def sgd_step(params: torch.Tensor, grads: torch.Tensor, lr: float, momentum: float = 0.0,
             weight_decay: float = 0.0, buffer: torch.Tensor | None = None) -> None:
    """One step of torch.optim.SGD (dampening 0, no Nesterov) on flat vectors, in place:

        d = g + λw;   b ← μb + d;   w ← w − η·(b if μ > 0 else d)

    `grads` receives the weight-decay term; `buffer` (the momentum state) is needed when
    `momentum` > 0."""
    step = grads.add_(params, alpha=weight_decay) if weight_decay else grads
    if momentum:
        if buffer is None:
            raise ValueError("sgd_step: momentum > 0 needs a momentum buffer")
        step = buffer.mul_(momentum).add_(step)
    params.sub_(step, alpha=lr)
