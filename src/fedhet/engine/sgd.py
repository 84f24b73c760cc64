"""The SGD step every local update uses (the engine's clients, server-side plug-in training)."""

from __future__ import annotations

import torch

LearningRate = float | torch.Tensor  # a 0-dim tensor on the device: what a CUDA graph reads


@torch.no_grad()
def descend(w: torch.Tensor, d: torch.Tensor, lr: LearningRate) -> torch.Tensor:
    """w ← w − η·d in place. η is a float, or a 0-dim device tensor holding it: read from
    memory, it may change between replays of a CUDA graph (one kernel either way)."""
    if isinstance(lr, torch.Tensor):
        return w.addcmul_(d, lr, value=-1)
    return w.sub_(d, alpha=lr)


@torch.no_grad()
def sgd_step(params: torch.Tensor, grads: torch.Tensor, lr: LearningRate, momentum: float = 0.0,
             weight_decay: float = 0.0, buffer: torch.Tensor | None = None) -> None:
    """One step of torch.optim.SGD (dampening 0, no Nesterov) on flat vectors, in place:

        d = g + λw;   b ← μb + d;   w ← w − η·(b if μ > 0 else d)

    `grads` receives the weight-decay term; `buffer` (the momentum state) is needed when
    `momentum` > 0. `lr` as in `descend`."""
    step = grads.add_(params, alpha=weight_decay) if weight_decay else grads
    if momentum:
        if buffer is None:
            raise ValueError("sgd_step: momentum > 0 needs a momentum buffer")
        step = buffer.mul_(momentum).add_(step)
    descend(params, step, lr)
