"""Image grids of virtual datasets (VHL, App. C.3, Figs 4–7): one row per class."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch



def grid_array(x: torch.Tensor, y: torch.Tensor, per_class: int = 8,
               max_classes: int | None = None, pad: int = 1) -> np.ndarray:
    """An `[H, W, 3]` uint8 array: the first `per_class` images of each class in a row."""
    classes = sorted(int(c) for c in torch.unique(y))
    if max_classes is not None:
        classes = classes[:max_classes]
    c, h, w = x.shape[1:]
    out = np.full((len(classes) * (h + pad) + pad, per_class * (w + pad) + pad, 3), 255,
                  dtype=np.uint8)
    for row, k in enumerate(classes):
        idx = torch.nonzero(y == k).flatten()[:per_class]
        for col, i in enumerate(idx.tolist()):
            img = x[i].numpy()
            img = np.repeat(img, 3, axis=0) if c == 1 else img[:3]
            top, left = pad + row * (h + pad), pad + col * (w + pad)
            out[top:top + h, left:left + w] = img.transpose(1, 2, 0)
    return out


def virtual_grid_figure(x: torch.Tensor, y: torch.Tensor, per_class: int = 8,
                        title: str | None = None, max_classes: int | None = 20,
                        notes: Sequence[str] = ()) -> Any:
    """A matplotlib figure (Agg) of `per_class` images per class, one class per row, labelled
    by class, with the title wrapped to its width and `notes` (the scale's note every paper
    figure carries) as its notes (its caption in the report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedhet.figures.footnote import add_footnote
    from fedhet.figures.titles import figure_title

    grid = grid_array(x, y, per_class, max_classes)
    classes = sorted(int(c) for c in torch.unique(y))[: max_classes or None]
    h = x.shape[-2] + 1
    width = max(2.5, 0.45 * per_class + 0.6)
    height = 0.45 * len(classes) + (0.5 if title else 0.2)
    fig, ax = plt.subplots(figsize=(width, height))
    ax.imshow(grid, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([1 + h * r + h / 2 - 1 for r in range(len(classes))])
    ax.set_yticklabels([str(k) for k in classes], fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        figure_title(fig, title)
    add_footnote(fig, list(notes), width, height)
    return fig


def virtual_grid_png(x: torch.Tensor, y: torch.Tensor, path: str | os.PathLike,
                     per_class: int = 8, title: str | None = None,
                     max_classes: int | None = 20, notes: Sequence[str] = ()) -> Path:
    """Write the virtual_grid_figure as a PNG, atomically. Returns the path."""
    import matplotlib.pyplot as plt

    from fedhet.figures.save import save_figure

    fig = virtual_grid_figure(x, y, per_class, title, max_classes, notes)
    try:
        save_figure(fig, Path(path))
        return Path(path)
    finally:
        plt.close(fig)
