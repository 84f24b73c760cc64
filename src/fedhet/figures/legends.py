"""Legends the figure kinds share: a legend beside its panel (never over the data) and the
colour of each class in the scatter plots (t-SNE), with a legend entry per class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def legend_beside(ax: Any, **kwargs: Any) -> Any:
    """Put a legend right of `ax`, its top at the panel's top: a new one from `kwargs`
    (handles, title, ...), or the one seaborn drew inside the panel, moved. The figure's
    layout (tight_layout, bbox_inches="tight") then makes room for it."""
    place = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "frameon": False}
    if ax.get_legend() is not None and "handles" not in kwargs:
        import seaborn as sns

        sns.move_legend(ax, **place, **kwargs)
        return ax.get_legend()
    return ax.legend(**place, **kwargs)


def class_colours(num_classes: int) -> Any:
    """The colour map of class indices (class c: colour c mod N): tab10 up to 10 classes,
    tab20 beyond."""
    import matplotlib.pyplot as plt

    return plt.get_cmap("tab10" if num_classes <= 10 else "tab20")


def marker_handles(markers: Mapping[str, str]) -> list[Any]:
    """Legend entries label → marker, in grey: what the markers of a scatter plot mean when
    its colours mean the class."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], linestyle="", marker=marker, color="grey", markersize=5, label=label)
            for label, marker in markers.items()]


def class_legend(ax: Any, handles: list[Any], num_classes: int) -> Any:
    """A legend beside `ax` of `handles` (e.g. marker_handles) and then an entry "class c" in
    each class's colour (class_colours): every encoding of a scatter plot explained."""
    return legend_beside(ax, handles=handles + class_handles(num_classes), fontsize=7,
                         ncol=1 if num_classes <= 12 else 2)


def class_handles(num_classes: int) -> list[Any]:
    """Legend entries "class c" in each class's colour (class_colours)."""
    from matplotlib.lines import Line2D

    cmap = class_colours(num_classes)
    return [Line2D([], [], linestyle="", marker="s", color=cmap(c % cmap.N), markersize=5,
                   label=f"class {c}") for c in range(num_classes)]


def retitle(legend: Any, spec: Mapping[str, Any]) -> Any:
    """Replace the axis keys seaborn writes into a legend (its title, and the section heads of
    a hue + style legend) by their printed names (`fedhet.figures.labels.axis_title`), or
    leave them blank where an axis has none: a reader sees `dataset`, never `data`."""
    from fedhet.figures.labels import axis_title

    if legend is None:
        return None
    keys = {spec[r] for r in ("hue", "style", "size") if spec.get(r)}
    title = legend.get_title()
    if title.get_text() in keys:
        title.set_text(axis_title(title.get_text(), spec) or "")
    for text in legend.get_texts():
        if text.get_text() in keys:
            text.set_text(axis_title(text.get_text(), spec) or "")
    return legend


def panel_grid(count: int, panel_w: float, panel_h: float, legend_w: float = 0.0,
               columns: int = 2, **subplots: Any) -> tuple[Any, list[Any], Any]:
    """A figure of `count` panels of `panel_w` × `panel_h` inches, at most `columns` a row (a
    wide row of panels is shrunk past reading in the report's pane), and room for a legend of
    `legend_w` inches: the free slot after the last panel where the last row has one (returned,
    drawn without axes: `legend_in`), else a column of that width right of the panels (the
    legend then goes beside the last panel: `legend_beside`). Returns (figure, panels, slot or
    None)."""
    import math

    import matplotlib.pyplot as plt

    cols = max(1, min(count, columns))
    rows = max(1, math.ceil(count / cols))
    free = rows * cols - count
    width = cols * panel_w + (legend_w if legend_w and not free else 0.0)
    fig, grid = plt.subplots(rows, cols, figsize=(width, rows * panel_h), squeeze=False,
                             **subplots)
    flat = list(grid.flat)
    slot = flat[count] if free and legend_w else None
    for ax in flat[count + (slot is not None):]:
        ax.remove()
    if slot is not None:
        slot.set_axis_off()
    return fig, flat[:count], slot


def legend_in(slot: Any, ax: Any | None = None, **kwargs: Any) -> Any:
    """A legend at the top left of `slot` (a free panel slot, `panel_grid`): a new one from
    `kwargs` (handles, title, ...), or `ax`'s own legend (seaborn's), moved there."""
    place = {"loc": "upper left", "frameon": False}
    if "handles" not in kwargs and ax is not None and ax.get_legend() is not None:
        old = ax.get_legend()
        kwargs = {"handles": list(old.legend_handles),
                  "labels": [t.get_text() for t in old.get_texts()],
                  "title": old.get_title().get_text() or None, **kwargs}
        old.remove()
    return slot.legend(**place, **kwargs)
