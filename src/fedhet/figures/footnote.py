"""The footnote under a paper figure: the scale's note and the item's notes, wrapped to the
figure's width, the figure grown to hold them so that nothing is clipped."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any


def item_notes(spec: Mapping[str, Any]) -> list[str]:
    """The figure's own `note` and its `scale_note` (what this scale leaves out of it), each
    on one line: the paragraphs every figure's footnote carries after the scale's note."""
    return [" ".join(str(spec[k]).split()) for k in ("note", "scale_note") if spec.get(k)]


def figure_notes(scale: str, note: str, spec: Mapping[str, Any]) -> list[str]:
    """The footnote of a figure that adds nothing of its own: the scale's note (the
    workflow's `note` param) and the item's notes."""
    return [f"scale {scale}: {note}", *item_notes(spec)]


def add_footnote(fig: Any, notes: list[str], width: float, height: float = 4.2) -> None:
    """Write `notes` (a paragraph each; empty ones left out) at the bottom left of `fig`,
    wrapped to its `width` (inches): the figure becomes `height` + 0.12 inch a line tall and
    its axes are laid out above the text (all of the figure when there is no note)."""
    text = "\n".join(textwrap.fill(n, int(130 * width / 6.4)) for n in notes if n.strip())
    lines = text.count("\n") + 1 if text else 0
    total = height + 0.12 * lines
    fig.set_size_inches(width, total)
    fig.tight_layout(rect=(0, 0.03 + 0.12 * lines / total if text else 0, 1, 1))
    if text:
        fig.text(0.01, 0.01, text, fontsize=6, va="bottom")
