"""FedImpro's shared feature distribution: per-class diagonal Gaussians at the split point.

Pure tensor functions, one per equation of the method (the paper's Eqs. 5-7 lost their bodies
in its text; the readings are said next to each function and in the declaration):

- `update_estimate`: a client's moving average of its class statistics (Eq. 6);
- `Merger`: the server's merge of the sampled clients' estimates (Eq. 7), streamed client by
  client so that no copy per client is kept (a CIFAR-100 / ResNet-50 layer2 estimate is 52 MB);
- `sample_features`: features drawn from the shared Gaussians with cycling labels;
- `feature_weight` and `combine_losses`: the loss of real and sampled features (Eq. 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

CODE_WEIGHT_DIVISOR = 5000.0  # the authors' code: w = min(1, D / 5000), D the feature dimension


@dataclass
class Estimate:
    """Per-class mean and std of flattened split features, `[C, D]` each."""

    mu: Tensor
    sigma: Tensor

    def clone(self) -> Estimate:
        return Estimate(self.mu.clone(), self.sigma.clone())


def class_batch_statistics(h: Tensor, y: Tensor, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per-class count `[C]`, mean `[C, D]` and unbiased std `[C, D]` of a batch `h` `[B, D]`
    with labels `y`, without a loop over classes. The std of a class with fewer than two
    samples is NaN (undefined), the mean of an absent class is NaN."""
    onehot = F.one_hot(y, num_classes).to(h.dtype)  # [B, C]
    counts = onehot.sum(0)
    mean = onehot.t() @ h / counts[:, None]
    centred = h - mean[y]
    var = onehot.t() @ centred.pow(2) / (counts[:, None] - 1)
    return counts, mean, var.sqrt()


def estimator_weights(counts: Tensor, class_sizes: Tensor, dim: int,
                      reading: str | float) -> Tensor:
    """Weight w_c of this batch in the moving average of class c, per class `[C]`.

    `paper`: min(1, n_c / N_c), the class's share of its training-set size; `code`:
    min(1, D / 5000) for every class (the authors' code, where D is the feature dimension);
    a number: that constant (1 − β)."""
    if reading == "paper":
        return (counts / class_sizes.clamp(min=1)).clamp(max=1.0)
    if reading == "code":
        return torch.full_like(counts, min(1.0, dim / CODE_WEIGHT_DIVISOR))
    return torch.full_like(counts, float(reading))


def update_estimate(est: Estimate, h: Tensor, y: Tensor, class_sizes: Tensor,
                    reading: str | float, std_cap: float | None) -> None:
    """Eq. 6 (reconstructed), in place: for each class c present in the batch,
    μ_c ← (1−w_c)·μ_c + w_c·mean(h | y=c) and, when it has two samples or more,
    σ_c ← (1−w_c)·σ_c + w_c·std(h | y=c); then σ ← min(σ, std_cap) for every class."""
    counts, mean, std = class_batch_statistics(h, y, est.mu.shape[0])
    w = estimator_weights(counts, class_sizes, h.shape[1], reading)[:, None]
    present = counts[:, None] > 0
    est.mu.copy_(torch.where(present, torch.lerp(est.mu, mean, w), est.mu))
    has_std = counts[:, None] > 1
    est.sigma.copy_(torch.where(has_std, torch.lerp(est.sigma, std, w), est.sigma))
    if std_cap is not None:
        est.sigma.clamp_(max=std_cap)


class Merger:
    """Eq. 7 (reconstructed): the server's new estimate from the round's client estimates,
    accumulated one client at a time (only running sums are kept).

    `uniform` (code default): μ = mean_m μ_m, σ = mean_m σ_m (stds, not variances, averaged);
    `samples`: the same weighted by the clients' sample counts n_m / Σn; `pooled`: class-count
    weights n_mc and the between-client spread, μ_c = Σ n_mc μ_mc / n_c and
    σ_c² = Σ n_mc (σ_mc² + μ_mc²) / n_c − μ_c² (the pooled population variance); a class no
    client holds keeps its previous estimate."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.reset()

    def reset(self) -> None:
        self.weight: Tensor | float = 0.0
        self.sum_mu: Tensor | None = None
        self.sum_second: Tensor | None = None  # Σ w (σ or σ² + μ²)

    def add(self, est: Estimate, num_samples: int, class_counts: Tensor | None = None) -> None:
        if self.mode == "pooled":
            if class_counts is None:
                raise ValueError("fedimpro: the pooled merge needs each client's class counts")
            w = class_counts.to(est.mu.dtype)[:, None]
            second = est.sigma.pow(2) + est.mu.pow(2)
        else:
            w = 1.0 if self.mode == "uniform" else float(num_samples)
            second = est.sigma
        if self.sum_mu is None:
            self.sum_mu, self.sum_second = w * est.mu, w * second
        else:
            self.sum_mu.add_(w * est.mu)
            self.sum_second.add_(w * second)
        self.weight = self.weight + w

    def result(self, previous: Estimate) -> Estimate:
        """The merged estimate (σ ≥ 0); `previous` fills classes without weight (pooled)."""
        if self.sum_mu is None:
            return previous.clone()
        if self.mode != "pooled":
            return Estimate(self.sum_mu / self.weight, (self.sum_second / self.weight).clamp(min=0))
        held = self.weight > 0
        total = self.weight.clamp(min=1)
        mu = self.sum_mu / total
        var = (self.sum_second / total - mu.pow(2)).clamp(min=0)
        return Estimate(torch.where(held, mu, previous.mu),
                        torch.where(held, var.sqrt(), previous.sigma))


def add_noise(est: Estimate, std: float, gen: torch.Generator) -> Estimate:
    """The estimate a client uploads with Gaussian noise N(0, std²) on every element of μ and
    σ (Table 7; one σ_ε for both, as the code); no draw at all when `std` is 0."""
    if std == 0:
        return est
    noise_mu = torch.randn(est.mu.shape, generator=gen, device=est.mu.device)
    noise_sigma = torch.randn(est.sigma.shape, generator=gen, device=est.sigma.device)
    return Estimate(est.mu + std * noise_mu, est.sigma + std * noise_sigma)


def fake_labels(per_class: int, num_classes: int, device: torch.device) -> Tensor:
    """Labels of the sampled features: 0, 1, …, C−1 repeated `per_class` times (every class,
    also those the client lacks)."""
    return torch.arange(per_class * num_classes, device=device) % num_classes


def sample_features(est: Estimate, labels: Tensor, shape: tuple[int, ...],
                    gen: torch.Generator) -> Tensor:
    """ĥ = μ[ŷ] + σ[ŷ] ⊙ ε, ε ~ N(0, I), shaped like the split activation; no gradient."""
    eps = torch.randn((labels.numel(), est.mu.shape[1]), generator=gen, device=est.mu.device)
    return (est.mu[labels] + est.sigma[labels] * eps).view(labels.numel(), *shape).detach()


def feature_weight(schedule: str, epochs_elapsed: float, ramp_epochs: float,
                   cap: float | None, constant: float) -> float:
    """Weight of the sampled features' loss at a round whose local training starts after
    `epochs_elapsed` epochs: t / T_w (gradual2half, uncapped by default; gradual ≤ 1),
    t / (2 T_w) ≤ 0.5 (gradualhalfhalf), `constant`, or 0 for concat (weighted by sizes)."""
    ramp = epochs_elapsed / ramp_epochs
    own_cap = {"gradual2half": None, "gradual": 1.0, "gradualhalfhalf": 0.5}.get(schedule)
    if schedule == "gradualhalfhalf":
        ramp = 0.5 * ramp
    elif schedule == "constant":
        ramp = constant
    elif schedule == "concat":
        return 0.0
    for bound in (own_cap, cap):
        if bound is not None:
            ramp = min(ramp, bound)
    return float(ramp)


def combine_losses(schedule: str, real: Tensor, fake: Tensor, weight: float,
                   n_real: int, n_fake: int) -> Tensor:
    """Eq. 5 under `schedule`: CE_r + w·CE_f (gradual2half, constant); (1−w)·CE_r + w·CE_f
    (gradual, gradualhalfhalf); (S·CE_r + Ŝ·CE_f) / (S + Ŝ), the CE over the concatenation
    (concat)."""
    if schedule == "concat":
        return (n_real * real + n_fake * fake) / (n_real + n_fake)
    if schedule in ("gradual", "gradualhalfhalf"):
        return (1 - weight) * real + weight * fake
    return real + weight * fake
