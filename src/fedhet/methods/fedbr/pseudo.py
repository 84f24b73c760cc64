"""FedBR's pseudo-data (§4.2): RSM samples and the Mixture of Eq. 4.

An RSM sample is the mean of M images drawn with replacement from one group of images: one
client's data (the paper's default) or one class pooled over the clients (Fig. 6d's
class-balanced source). Its label is uniform, ỹ_p = (1/C)·1, so training on it pushes the local
model towards outputs that carry no client's label bias.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


class Groups:
    """Row indices of several groups of images, flattened for vectorised draws."""

    def __init__(self, groups: Sequence[Tensor]) -> None:
        kept = [g for g in groups if g.numel() > 0]
        if not kept:
            raise ValueError("pseudo-data: every group of images is empty")
        self.rows = torch.cat(kept)
        self.sizes = torch.tensor([g.numel() for g in kept], device=self.rows.device)
        self.offsets = torch.cumsum(self.sizes, 0) - self.sizes

    def __len__(self) -> int:
        return int(self.sizes.numel())

    def draw(self, count: int, m: int, gen: torch.Generator) -> Tensor:
        """`count` × `m` rows: each line from one uniformly drawn group, its m rows drawn
        uniformly with replacement inside that group."""
        device = self.rows.device
        group = torch.randint(len(self), (count,), device=device, generator=gen)
        u = torch.rand(count, m, device=device, generator=gen)
        pos = (u * self.sizes[group, None]).long().clamp_max_(self.sizes[group, None] - 1)
        return self.rows[self.offsets[group, None] + pos]


def rsm(groups: Groups, load: Callable[[Tensor], Tensor], count: int, m: int,
        gen: torch.Generator) -> Tensor:
    """`count` RSM samples: each the mean of m images of one group (`load`: rows → normalised
    float images)."""
    rows = groups.draw(count, m, gen)
    images = load(rows.reshape(-1))
    return images.view(count, m, *images.shape[1:]).mean(1)


def uniform_labels(count: int, num_classes: int, device: torch.device) -> Tensor:
    """ỹ_p = (1/C)·1 for every pseudo sample."""
    return torch.full((count, num_classes), 1.0 / num_classes, device=device)


def mixture(x_proxy: Tensor, q_proxy: Tensor, x_local: Tensor, q_local: Tensor,
            k: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Eq. 4: x̃_p = (x_p + Σ_{k≤K} x_k)/(K+1), ỹ_p = (ỹ_p + Σ_k y_k)/(K+1), with the K local
    samples of each pseudo sample drawn with replacement from the local batch (soft labels
    `q_local`, N×C)."""
    x, q = x_proxy.clone(), q_proxy.clone()
    for _ in range(k):
        pick = torch.randint(x_local.shape[0], (x_proxy.shape[0],), device=x_local.device,
                             generator=gen)
        x += x_local[pick]
        q += q_local[pick]
    return x / (k + 1), q / (k + 1)
