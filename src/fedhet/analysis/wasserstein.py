"""Sliced Wasserstein distances (Kolouri et al., 2019) in torch, for CCVR's Fig. 6.

CCVR measures how separable the class Gaussians N(μ_c, Σ_c) of its feature mixture are by the
mean sliced Wasserstein distance over all pairs of classes. Projected on a unit direction θ a
Gaussian is the 1-D Gaussian N(θᵀμ, θᵀΣθ), and the 2-Wasserstein distance between two 1-D
Gaussians is closed form, √((m₁−m₂)² + (s₁−s₂)²). So

    SW₂(N₁, N₂) = ( mean_θ [ (θᵀ(μ₁−μ₂))² + (√(θᵀΣ₁θ) − √(θᵀΣ₂θ))² ] )^{1/2}

over `num_projections` random directions drawn uniformly on the sphere from a seeded generator
(the same directions for every pair). `sliced_wasserstein` does the same for two sets of samples
(sorted projections, i.e. the 1-D optimal transport), as POT's `sliced_wasserstein_distance`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedhet.engine.seeding import derive_seed


def random_directions(dim: int, num: int, seed: int = 0, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`num` directions uniform on the unit sphere of R^dim, as the columns of a [dim, num]
    matrix; the same for a given (dim, num, seed) on every device."""
    gen = torch.Generator().manual_seed(derive_seed(seed, "sliced-wasserstein", dim, num))
    theta = torch.randn(dim, num, generator=gen, dtype=torch.float64)
    theta /= theta.norm(dim=0, keepdim=True)
    return theta.to(device=device, dtype=dtype)


def project_gaussian(mean: torch.Tensor, cov: torch.Tensor,
                     theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean θᵀμ and standard deviation √(θᵀΣθ) of N(μ, Σ) along every column θ of `theta`."""
    theta = theta.to(device=mean.device, dtype=torch.float64)
    m = mean.double() @ theta
    var = ((cov.double() @ theta) * theta).sum(0)
    return m, var.clamp_min(0).sqrt()


def pairwise_from_projections(means: torch.Tensor, stds: torch.Tensor) -> torch.Tensor:
    """[C, C] SW₂ distances between Gaussians given their projected means and stds [C, P]."""
    dm = means[:, None, :] - means[None, :, :]
    ds = stds[:, None, :] - stds[None, :, :]
    return (dm.pow(2) + ds.pow(2)).mean(-1).sqrt()


def sliced_wasserstein_gaussians(mean1: torch.Tensor, cov1: torch.Tensor, mean2: torch.Tensor,
                                 cov2: torch.Tensor, num_projections: int = 200,
                                 seed: int = 0) -> float:
    """SW₂ between N(mean1, cov1) and N(mean2, cov2) (closed form along each direction)."""
    theta = random_directions(mean1.numel(), num_projections, seed, mean1.device)
    m1, s1 = project_gaussian(mean1, cov1, theta)
    m2, s2 = project_gaussian(mean2, cov2, theta)
    return float(((m1 - m2).pow(2) + (s1 - s2).pow(2)).mean().sqrt())


def mean_sliced_wasserstein(means: torch.Tensor | Sequence[torch.Tensor],
                            covs: torch.Tensor | Sequence[torch.Tensor],
                            num_projections: int = 200, seed: int = 0) -> float:
    """Mean SW₂ over all unordered pairs of the Gaussians N(means[c], covs[c]) (CCVR Fig. 6)."""
    means = list(means)
    if len(means) < 2:
        raise ValueError("need at least two Gaussians")
    theta = random_directions(means[0].numel(), num_projections, seed, means[0].device)
    proj = [project_gaussian(m, c, theta) for m, c in zip(means, covs, strict=True)]
    dist = pairwise_from_projections(torch.stack([p[0] for p in proj]),
                                     torch.stack([p[1] for p in proj]))
    return mean_offdiagonal(dist)


def mean_offdiagonal(matrix: torch.Tensor) -> float:
    """Mean of the entries above the diagonal of a square matrix."""
    i, j = torch.triu_indices(matrix.shape[0], matrix.shape[1], offset=1)
    return float(matrix[i, j].mean())


def _quantiles(sorted_values: torch.Tensor, num: int) -> torch.Tensor:
    """Quantile function of an empirical 1-D distribution at `num` mid-point levels."""
    n = sorted_values.shape[0]
    if n == num:
        return sorted_values
    levels = (torch.arange(num, device=sorted_values.device, dtype=torch.float64) + 0.5) / num
    idx = (levels * n).floor().long().clamp_(0, n - 1)
    return sorted_values[idx]


def sliced_wasserstein(x: torch.Tensor, y: torch.Tensor, num_projections: int = 200,
                       p: int = 2, seed: int = 0) -> float:
    """SW_p between the empirical distributions of samples x [n, d] and y [m, d] (uniform
    weights): (mean_θ W_p^p(θᵀx, θᵀy))^{1/p}, W_p in 1-D by matching quantiles."""
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"dimension mismatch: {x.shape[1]} vs {y.shape[1]}")
    theta = random_directions(x.shape[1], num_projections, seed, x.device)
    px = (x.double() @ theta).sort(0).values
    py = (y.double() @ theta).sort(0).values
    num = max(px.shape[0], py.shape[0])
    qx, qy = _quantiles(px, num), _quantiles(py, num)
    return float((qx - qy).abs().pow(p).mean().pow(1.0 / p))
