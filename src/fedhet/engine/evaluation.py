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
                   ) -> tuple[float, float]:
    """Accuracy and mean cross-entropy over (x, y); one device sync at the end."""
    model.eval()
    autocast = autocast or nullcontext()
    correct = torch.zeros((), device=x.device, dtype=torch.long)
    loss = torch.zeros((), device=x.device)
    for start in range(0, y.numel(), batch_size):
        xb = augmenter.test(x[start:start + batch_size])
        yb = y[start:start + batch_size]
        with autocast:
            logits = model(xb)
            if logit_map is not None:
                logits = logit_map(logits)
        loss += F.cross_entropy(logits.float(), yb, reduction="sum")
        correct += (logits.argmax(1) == yb).sum()
    n = y.numel()
    return correct.item() / n, loss.item() / n
