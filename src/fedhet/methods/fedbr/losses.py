"""FedBR's losses: the soft cross-entropy of Component 1 and the contrastive loss of
Component 2 (Guo et al., 2023, §4.2-4.3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def soft_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """−Σ_c q_c log softmax(l)_c, mean over the batch; extra logit columns (VHL's virtual
    classes) get no target mass."""
    if targets.shape[1] < logits.shape[1]:
        targets = F.pad(targets, (0, logits.shape[1] - targets.shape[1]))
    return -(targets * F.log_softmax(logits.float(), dim=1)).sum(1).mean()


def contrastive_loss(a: Tensor, g: Tensor, b: Tensor, tau1: float, tau2: float) -> Tensor:
    """L_con = mean_j −log( e^{cos(a_j,g_j)/τ1} / (e^{cos(a_j,g_j)/τ1} + e^{cos(a_j,b_j)/τ2}) )
    (Eq. 6-7), with a, g, b already projected: a = P(z_p) (local features of the pseudo-data),
    g = P(z_g) (the global model's), b = P(z_x) (local features of the local batch)."""
    pos = F.cosine_similarity(a, g, dim=1) / tau1
    neg = F.cosine_similarity(a, b, dim=1) / tau2
    logits = torch.stack([pos, neg], 1).float()
    return F.cross_entropy(logits, torch.zeros(a.shape[0], dtype=torch.long, device=a.device))


def projection_head(dim_in: int, hidden: int, dim_out: int) -> torch.nn.Sequential:
    """P_θ: the three-layer MLP of FedBR App. A (hidden width 256, output 128)."""
    return torch.nn.Sequential(
        torch.nn.Linear(dim_in, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, dim_out),
    )
