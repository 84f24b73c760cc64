"""Model inversion from a split feature: what a shared feature, or a shared class mean, reveals
of the inputs (FedImpro Figs. 11-13; Zhao et al. 2021-style optimisation, assumed settings).

An input x is optimised from N(0, I) (in the model's normalised input space) to minimise

    ‖φ(x) − h*‖² / ‖h*‖² + λ_TV · TV(x)

with φ the model up to the split point (BatchNorm in eval mode) and h* a target feature: the
split feature of a real image, or a class mean μ_c shared by FedImpro.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor


def total_variation(x: Tensor) -> Tensor:
    """Mean absolute difference of neighbouring pixels, per image, summed over the batch."""
    dh = (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().mean(dim=(1, 2, 3))
    dw = (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().mean(dim=(1, 2, 3))
    return (dh + dw).sum()


def invert(lower: Callable[[Tensor], Tensor], targets: Tensor, shape: tuple[int, ...],
           steps: int = 2000, lr: float = 0.05, tv_weight: float = 0.01,
           seed: int = 0) -> tuple[Tensor, list[float]]:
    """Inputs `[N, *shape]` whose features under `lower` approach `targets` `[N, ...]`, and
    the mean relative feature error after each step. Seeded; `lower`'s parameters are left
    unchanged (only the inputs are optimised)."""
    gen = torch.Generator(device=targets.device).manual_seed(seed)
    x = torch.randn((len(targets), *shape), generator=gen, device=targets.device)
    x.requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    flat_targets = targets.flatten(1)
    scale = flat_targets.pow(2).sum(1).clamp(min=1e-12)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        error = (lower(x).flatten(1) - flat_targets).pow(2).sum(1) / scale
        loss = error.sum() + tv_weight * total_variation(x)
        loss.backward()
        opt.step()
        history.append(float(error.mean().detach()))
    return x.detach(), history


def one_per_class(labels: Tensor, classes: int) -> Tensor:
    """Index of the first test image of each of the first `classes` classes present."""
    seen: dict[int, int] = {}
    for i, c in enumerate(labels.tolist()):
        if c not in seen:
            seen[c] = i
        if len(seen) == classes:
            break
    return torch.tensor([seen[c] for c in sorted(seen)])


def inversion_figure(rows: list[tuple[str, Any]], classes: list[int], title: str = "",
                     notes: Sequence[str] = ()) -> Any:
    """A grid of images, one row per (name, [N, H, W, C] pixels in [0, 1]) of `rows`, one column
    per class of `classes`; `notes` as its notes (its caption in the report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedhet.figures.footnote import add_footnote
    from fedhet.figures.titles import figure_title

    # narrow enough for the report's pane to show its labels readably
    width = max(3.0, 0.62 * len(classes) + 1.1)
    height = 0.7 * len(rows) + 1.4
    fig, axes = plt.subplots(len(rows), len(classes), figsize=(width, height), squeeze=False)
    for r, (name, batch) in enumerate(rows):
        for c, label in enumerate(classes):
            ax = axes[r][c]
            img = batch[c]
            ax.imshow(img.squeeze(-1) if img.shape[-1] == 1 else img,
                      cmap="gray" if img.shape[-1] == 1 else None)
            ax.set_xticks([]), ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(textwrap.fill(name, 18), fontsize=6)
            if r == 0:
                ax.set_title(f"class {label}", fontsize=6)
    figure_title(fig, title, fontsize=8)
    add_footnote(fig, list(notes), width, height)
    return fig


def cmd_invert(args: argparse.Namespace) -> int:
    """Rows: originals (one test image per class), inversions of their own split features,
    inversions of the shared class means at the same split (a PNG and a JSON of the errors)."""
    import matplotlib.pyplot as plt

    from fedhet.figures.labels import layer_labels
    from fedhet.saved import open_run

    saved = open_run(args.run, device=args.device)
    stats = torch.load(args.statistics, map_location=saved.device, weights_only=True)
    model = saved.model
    for p in model.parameters():
        p.requires_grad_(False)
    split = model.split_point(stats["split"])
    x, y = saved.test_set()
    take = one_per_class(y, args.classes)
    images = saved.augmenter.test(x[take])
    with torch.no_grad():
        features = model.forward_to(images, split)
    means = stats["mu"][y[take]].view(len(take), *stats["shape"]).to(saved.device)

    def lower(z: Tensor) -> Tensor:
        return model.forward_to(z, split)

    shape = tuple(images.shape[1:])
    opts = dict(steps=args.steps, lr=args.lr, tv_weight=args.tv, seed=args.seed)
    from_feature, err_feature = invert(lower, features, shape, **opts)
    from_mean, err_mean = invert(lower, means, shape, **opts)

    def show(z: Tensor) -> Tensor:
        pixels = (z * saved.augmenter.std + saved.augmenter.mean).clamp(0, 1)
        return pixels.permute(0, 2, 3, 1).cpu().numpy()

    where = layer_labels([split])[0]  # block 2, not the module's key
    rows = [("original test image (Fig. 11)", show(images)),
            (f"from its own {where} feature (Fig. 12)", show(from_feature)),
            (f"from the shared class mean at {where} (Fig. 13)", show(from_mean))]
    errors = {"feature": err_feature[-1], "class_mean": err_mean[-1]}
    note = (f"Relative feature error after {args.steps} Adam steps (lr {args.lr}, TV weight "
            f"{args.tv}): {errors['feature']:.3f} from a raw feature, {errors['class_mean']:.3f} "
            "from a class mean.")
    from fedhet.figures.save import save_figure

    fig = inversion_figure(rows, [int(c) for c in y[take]], args.title, [*args.note, note])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.out)
    plt.close(fig)
    if args.errors:
        Path(args.errors).write_text(json.dumps(errors, indent=1) + "\n")
    print(args.out)
    return 0
