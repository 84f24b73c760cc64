"""A figure's title, wrapped to the figure's width as it is drawn: a long title (a paper's
caption and what stands in for what) grows onto more lines instead of running past both edges
of the PNG."""

from __future__ import annotations

import textwrap
from typing import Any

MARGIN = 0.04  # share of the figure's width left free at the two edges together


def fit_lines(fig: Any, text: str, fontsize: float, width: float | None = None) -> str:
    """`text` wrapped so that, drawn at `fontsize`, every line fits `width` inches (the
    figure's width less a margin when None). Measured by the figure's renderer, so wide
    glyphs and narrow ones are both accounted for."""
    from matplotlib.text import Text

    inches = width if width is not None else fig.get_figwidth() * (1 - MARGIN)
    limit = inches * fig.dpi
    renderer = fig.canvas.get_renderer()
    probe = Text(0, 0, "", fontsize=fontsize, figure=fig)
    chars = max(10, int(inches * 72 / (0.5 * fontsize)))  # a first guess, too many
    while True:
        wrapped = textwrap.fill(" ".join(text.split()), chars)
        probe.set_text(wrapped)
        if probe.get_window_extent(renderer).width <= limit or chars <= 10:
            return wrapped
        chars -= max(1, chars // 20)


def figure_title(fig: Any, text: str, fontsize: float = 9) -> Any:
    """Set `text` as the figure's title (its suptitle), wrapped to the figure's width; the
    layout done afterwards (`add_footnote`'s tight_layout) places the panels under it."""
    return fig.suptitle(fit_lines(fig, text, fontsize), fontsize=fontsize)
