"""Test-set evaluation of a model on device-resident uint8 tensors."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.engine.augment import Augmenter


@torch.no_grad()
def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor, augmenter: Augmenter,
                   batch_size: int = 512,
                   autocast: AbstractContextManager | None = None,
                   logit_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   angles: torch.Tensor | None = None,
                   ) -> tuple[float, float]:
    """Accuracy and mean cross-entropy over (x, y) (images rotated by `angles` degrees, if
    given); one device sync at the end."""
    acc, loss, _ = evaluate_groups(model, x, y, augmenter, batch_size, autocast, logit_map,
                                   angles=angles)
    return acc, loss


@torch.no_grad()
def evaluate_groups(model: nn.Module, x: torch.Tensor, y: torch.Tensor, augmenter: Augmenter,
                    batch_size: int = 512,
                    autocast: AbstractContextManager | None = None,
                    logit_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    groups: torch.Tensor | None = None,
                    angles: torch.Tensor | None = None,
                    ) -> tuple[float, float, dict[int, float]]:
    """`evaluate_model`, plus the accuracy within each group (a per-sample id such as the
    domain) from the same forward passes: (accuracy, mean loss, {group: accuracy})."""
    model.eval()
    autocast = autocast or nullcontext()
    correct = torch.zeros((), device=x.device, dtype=torch.long)
    loss = torch.zeros((), device=x.device)
    hits = [] if groups is not None else None
    for start in range(0, y.numel(), batch_size):
        xb = augmenter.test(x[start:start + batch_size],
                            None if angles is None else angles[start:start + batch_size])
        yb = y[start:start + batch_size]
        with autocast:
            logits = model(xb)
            if logit_map is not None:
                logits = logit_map(logits)
        loss += F.cross_entropy(logits.float(), yb, reduction="sum")
        right = logits.argmax(1) == yb
        correct += right.sum()
        if hits is not None:
            hits.append(right)
    n = y.numel()
    per_group: dict[int, float] = {}
    if hits is not None:
        right = torch.cat(hits)
        ids = groups.to(right.device)
        for g in torch.unique(ids).tolist():
            per_group[int(g)] = (right[ids == g].float().mean()).item()
    return correct.item() / n, loss.item() / n, per_group
