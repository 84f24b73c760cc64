"""FedLGD's distillation: initial virtual images from class statistics, distribution matching
(DM, FedLGD Eq. 2) of a client's virtual images against its real ones, and federated gradient
matching (GM, Eq. 5) of the server's global virtual images against the clients' averaged update.

Images are float tensors in the model's normalised input space, class-major
(`y = [0]*ipc + [1]*ipc + ...`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedhet.distill import dsa
from fedhet.engine.seeding import generator


def class_statistics(x: Tensor, y: Tensor, num_classes: int,
                     divide_by: str = "class") -> tuple[Tensor, Tensor, Tensor]:
    """Per class c and channel j, the mean μ and standard deviation σ of the pixels of the
    (normalised) images of class c: `(mu [C, ch], sigma [C, ch], counts [C])`.

    `divide_by="client"` reproduces the authors' code, which divides both moments by the
    client's total pixel count N·H·W instead of the class's n_c·H·W (μ shrinks by n_c/N)."""
    if divide_by not in ("class", "client"):
        raise ValueError(f"divide_by must be 'class' or 'client', got {divide_by!r}")
    ch = x.shape[1]
    x = x.double()
    counts = torch.bincount(y, minlength=num_classes)
    pixel_sum = torch.zeros(num_classes, ch, dtype=torch.float64, device=x.device)
    square_sum = torch.zeros_like(pixel_sum)
    pixel_sum.index_add_(0, y, x.sum(dim=(2, 3)))
    square_sum.index_add_(0, y, (x * x).sum(dim=(2, 3)))
    per_image = x.shape[2] * x.shape[3]
    if divide_by == "class":
        pixels = (counts * per_image).clamp(min=1).double()[:, None]
    else:
        pixels = torch.full_like(pixel_sum, float(max(len(y), 1) * per_image))
    mu = pixel_sum / pixels
    sigma = (square_sum / pixels - mu * mu).clamp(min=0).sqrt()
    return mu.float(), sigma.float(), counts


def images_from_statistics(mu: Tensor, sigma: Tensor, ipc: int, size: int,
                           gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """`ipc` images per class whose every pixel of channel j is drawn from N(μ_cj, σ_cj)
    (FedLGD's initialisation), class-major, with their labels."""
    num_classes, ch = mu.shape
    noise = torch.randn(num_classes, ipc, ch, size, size, generator=gen, device=mu.device)
    x = noise * sigma[:, None, :, None, None] + mu[:, None, :, None, None]
    y = torch.arange(num_classes, device=mu.device).repeat_interleave(ipc)
    return x.reshape(num_classes * ipc, ch, size, size), y


def dm_loss(embed: Callable[[Tensor], Tensor], real: list[Tensor], synthetic: list[Tensor],
            draws: list[dsa.Draw | None], batched: bool = True) -> Tensor:
    """Eq. 2: Σ_c ‖mean ψ(A(real_c)) − mean ψ(A(syn_c))‖², one Siamese draw A per class (None:
    no augmentation); ψ(real) is detached. Classes with no real images are skipped.

    `batched` embeds every class's images in one pass (two in all), which equals one pass per
    class for a network that normalises each sample on its own (instance or group norm, as
    FedLGD's); a network with batch norm must be embedded class by class (`batched=False`)."""
    kept = [(r, s, d) for r, s, d in zip(real, synthetic, draws) if len(r) and len(s)]
    if not kept:
        raise ValueError("distribution matching needs at least one class with real images")
    kept = [(dsa.augment(r, d), dsa.augment(s, d)) if d is not None else (r, s)
            for r, s, d in kept]
    if not batched:
        total = None
        for real_c, syn_c in kept:
            with torch.no_grad():
                target = embed(real_c).flatten(1).mean(0)
            gap = ((target - embed(syn_c).flatten(1).mean(0)) ** 2).sum()
            total = gap if total is None else total + gap
        return total
    with torch.no_grad():
        targets = _class_means(embed(torch.cat([r for r, _ in kept])), [len(r) for r, _ in kept])
    means = _class_means(embed(torch.cat([s for _, s in kept])), [len(s) for _, s in kept])
    return ((targets - means) ** 2).sum()


def _class_means(features: Tensor, sizes: list[int]) -> Tensor:
    """Mean feature of each consecutive block of `sizes` rows: [len(sizes), D]."""
    return torch.stack([f.mean(0) for f in features.flatten(1).split(sizes)])


def per_sample_norm(model: nn.Module) -> bool:
    """Whether `model` treats each sample on its own (no batch norm), so that embedding all
    classes in one pass equals embedding them one by one."""
    return not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def dm_step_loss(embed: Callable[[Tensor], Tensor], x_real: Tensor, y_real: Tensor,
                 images: Tensor, ipc: int, real_batch: int, ratios: Mapping[str, float],
                 real_keys: tuple, dsa_keys: tuple, batched: bool = True) -> Tensor:
    """One distribution-matching step of a client (Eq. 2): for each class it holds, `real_batch`
    of its real images without replacement (a draw keyed by `real_keys` + (class,)), its `ipc`
    virtual images of class-major `images`, and one Siamese draw (keyed by `dsa_keys` +
    (class,)) applied to both."""
    size = int(x_real.shape[-1])
    real, synthetic, draws = [], [], []
    for c in range(images.shape[0] // ipc):
        own = (y_real == c).nonzero().flatten()
        if len(own) == 0:  # a class the client lacks is left out of matching
            continue
        g = generator(x_real.device, *real_keys, c)
        real.append(x_real[own[torch.randperm(len(own), generator=g, device=own.device)
                               [:real_batch]]])
        synthetic.append(images[c * ipc:(c + 1) * ipc])
        draws.append(dsa.draw(generator(torch.device("cpu"), *dsa_keys, c), size, ratios))
    return dm_loss(embed, real, synthetic, draws, batched)


def gm_distance(synthetic: list[Tensor], target: list[Tensor]) -> Tensor:
    """Eq. 5's distance (the 'ours' distance of gradient matching): for every parameter tensor
    with two or more dimensions, reshaped to rows [out, rest], Σ_rows (1 − cos(g_s, g_r)) with
    1e-6 added to the product of the norms; 1-D tensors (biases, norm weights) add nothing."""
    total = synthetic[0].new_zeros(())
    for gs, gr in zip(synthetic, target):
        if gs.dim() < 2:
            continue
        gs, gr = gs.reshape(gs.shape[0], -1), gr.reshape(gr.shape[0], -1)
        cos = (gs * gr).sum(-1) / (gs.norm(dim=-1) * gr.norm(dim=-1) + 1e-6)
        total = total + (1 - cos).sum()
    return total


def update_target(before: list[Tensor], after: list[Tensor], lr: float) -> list[Tensor]:
    """GM's target: the clients' averaged update as a gradient, (w_old − w_new) / η."""
    return [(b - a) / lr for b, a in zip(before, after)]


def synthetic_gradient(model: nn.Module, x: Tensor, y: Tensor) -> list[Tensor]:
    """∇_w CE(f_w(x), y) on the whole set as one batch, differentiable in x (create_graph)."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss = F.cross_entropy(model(x), y)
    return list(torch.autograd.grad(loss, params, create_graph=True))


def match(images: Tensor, loss_of: Callable[[Tensor, int], Tensor], steps: int,
          lr: float = 1.0, momentum: float = 0.5) -> tuple[Tensor, list[float]]:
    """`steps` SGD steps (a fresh optimiser: lr, momentum) on a copy of `images` minimising
    `loss_of(images, step)`; the images and the loss of every step. Only the images move: the
    gradient is taken with respect to them alone, so no model's `.grad` is touched."""
    x = images.detach().clone().requires_grad_(True)
    velocity = torch.zeros_like(x)
    losses = []
    for step in range(steps):
        loss = loss_of(x, step)
        (grad,) = torch.autograd.grad(loss, [x])
        with torch.no_grad():
            velocity.mul_(momentum).add_(grad)  # torch.optim.SGD's momentum (dampening 0)
            x.sub_(lr * velocity)
        losses.append(float(loss.detach()))
    return x.detach(), losses
