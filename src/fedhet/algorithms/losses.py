"""Loss terms several methods share: temperature-scaled distillation (FedDF, FedNTD) and the
two-pair contrastive loss on cosine similarities (MOON, FedBR)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def distillation_loss(student_logits: Tensor, teacher_logits: Tensor,
                      temperature: float = 1.0) -> Tensor:
    """KL(p_teacher ‖ p_student) at temperature T, times T² (mean over the batch)."""
    t = temperature
    log_p = F.log_softmax(student_logits.float() / t, dim=1)
    q = F.softmax(teacher_logits.float() / t, dim=1)
    return F.kl_div(log_p, q, reduction="batchmean") * (t * t)


def contrastive_loss(anchor: Tensor, positive: Tensor, negative: Tensor, tau_pos: float,
                     tau_neg: float) -> Tensor:
    """mean_j −log( e^{cos(a_j,p_j)/τ+} / (e^{cos(a_j,p_j)/τ+} + e^{cos(a_j,n_j)/τ−}) ): MOON's
    model-contrastive loss (Eq. 3, τ+ = τ− = τ) and FedBR's L_con (Eqs. 6-7, τ1 and τ2)."""
    pos = F.cosine_similarity(anchor, positive, dim=1) / tau_pos
    neg = F.cosine_similarity(anchor, negative, dim=1) / tau_neg
    logits = torch.stack([pos, neg], 1)
    target = torch.zeros(anchor.shape[0], dtype=torch.long, device=anchor.device)
    return F.cross_entropy(logits, target)
