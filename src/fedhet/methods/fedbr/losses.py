"""FedBR's projection head P_θ (Guo et al., 2023, §4.3). Its losses are shared with other
methods: Component 1's soft cross-entropy is `fedhet.algorithms.base.task_loss`, Component 2's
contrastive loss `fedhet.algorithms.losses.contrastive_loss` (τ1, τ2)."""

from __future__ import annotations

import torch


def projection_head(dim_in: int, hidden: int, dim_out: int) -> torch.nn.Sequential:
    """P_θ: the three-layer MLP of FedBR App. A (hidden width 256, output 128)."""
    return torch.nn.Sequential(
        torch.nn.Linear(dim_in, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, dim_out),
    )
