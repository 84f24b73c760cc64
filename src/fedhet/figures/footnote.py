"""The footnote under a paper figure: the scale's note and the item's notes, wrapped to the
figure's width, the figure grown to hold them so that nothing is clipped."""

from __future__ import annotations

import textwrap
from typing import Any


def add_footnote(fig: Any, notes: list[str], width: float, height: float = 4.2) -> None:
    """Write `notes` (a paragraph each) at the bottom left of `fig`, wrapped to its `width`
    (inches): the figure becomes `height` + 0.12 inch a line tall and its axes are laid out
    above the text."""
    text = "\n".join(textwrap.fill(n, int(130 * width / 6.4)) for n in notes)
    lines = text.count("\n") + 1
    total = height + 0.12 * lines
    fig.set_size_inches(width, total)
    fig.tight_layout(rect=(0, 0.03 + 0.12 * lines / total, 1, 1))
    fig.text(0.01, 0.01, text, fontsize=6, va="bottom")
