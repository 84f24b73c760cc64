"""The notes of a paper figure (the scale's note, the item's notes, what the figure itself
adds) and its final layout: the notes go with the figure into its PNG's metadata and from there
into its caption in the report (`fedhet.figures.save`), not under its panels, and its text is
raised to a size the report's pane shows readably."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet.figures.save import readable_text, set_notes


def item_notes(spec: Mapping[str, Any]) -> list[str]:
    """The figure's own `note` and its `scale_note` (what this scale leaves out of it), each
    on one line: the paragraphs every figure's notes carry after the scale's note."""
    return [" ".join(str(spec[k]).split()) for k in ("note", "scale_note") if spec.get(k)]


def figure_notes(scale: str, note: str, spec: Mapping[str, Any]) -> list[str]:
    """The notes of a figure that adds nothing of its own: the scale's note (the workflow's
    `note` param) and the item's notes."""
    return [f"scale {scale}: {note}", *item_notes(spec)]


def add_footnote(fig: Any, notes: list[str], width: float, height: float = 4.2) -> None:
    """Attach `notes` (a paragraph each; empty ones left out) to `fig` for its caption, make
    `fig` `width` × `height` inches, raise its text to a readable size (`readable_text`) and lay
    its panels out over all of it."""
    set_notes(fig, notes)
    fig.set_size_inches(width, height)
    readable_text(fig, width)
    fig.tight_layout()
