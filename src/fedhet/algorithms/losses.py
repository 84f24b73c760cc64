"""Loss terms several methods share: temperature-scaled distillation (FedDF, FedNTD), the
two-pair contrastive loss on cosine similarities (MOON, FedBR) and the supervised contrastive
loss (VHL, FedLGD)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def at_least_float32(x: Tensor) -> Tensor:
    """`x` in float32 if it is of a narrower float type (bf16 or fp16 under autocast), else as it
    is: a loss summed over a batch keeps float32 precision, and a float64 model stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def distillation_loss(student_logits: Tensor, teacher_logits: Tensor,
                      temperature: float = 1.0) -> Tensor:
    """KL(p_teacher ‖ p_student) at temperature T, times T² (mean over the batch)."""
    t = temperature
    log_p = F.log_softmax(at_least_float32(student_logits) / t, dim=1)
    q = F.softmax(at_least_float32(teacher_logits) / t, dim=1)
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


def supcon_loss(features: Tensor, labels: Tensor, temperature: float = 0.07,
                base_temperature: float | None = None) -> Tensor:
    """Supervised contrastive loss (Khosla et al., 2020), one view per sample, mode "all".

    `features` `[N, D]` are L2-normalised. For each anchor i with at least one positive
    (another sample of its label), ℓ_i = −(τ/τ_b) · mean_{p ∈ P(i)} log softmax_{a ≠ i}(z_i·z_a/τ)_p;
    the loss is the mean of ℓ_i over those anchors (0 when no anchor has a positive).
    """
    base = temperature if base_temperature is None else base_temperature
    n = features.shape[0]
    sim = features @ features.t() / temperature
    sim = sim - sim.max(dim=1, keepdim=True).values.detach()  # stability; cancels out
    not_self = ~torch.eye(n, dtype=torch.bool, device=features.device)
    denom = (sim.exp() * not_self).sum(dim=1, keepdim=True)
    log_prob = sim - denom.log()
    positive = (labels[:, None] == labels[None, :]) & not_self
    counts = positive.sum(dim=1)
    has = counts > 0
    # masked means, not boolean indexing: no host sync on a GPU (the number of anchors stays
    # on the device); anchors without a positive weigh 0, and no anchor at all gives 0
    mean_log_prob_pos = (log_prob * positive).sum(dim=1) / counts.clamp(min=1)
    anchors = has.sum().clamp(min=1)
    return -(temperature / base) * (mean_log_prob_pos * has).sum() / anchors
