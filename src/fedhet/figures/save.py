"""How a paper figure is laid out and saved for the report.

The report shows a figure scaled to its content pane: at 1366×768 with the sidebar at its widest
(a third of the window) a figure gets `PANE_PX` CSS pixels of width, and a PNG wider than that
is shrunk to it. Its text must still be at least `MIN_CSS_PX` CSS pixels tall there: a font of
`pt` points drawn at `dpi` dots per inch and shown at `shown` of its `natural` pixels is
pt × dpi / 72 × shown / natural CSS pixels tall. `readable_text` raises every text of a figure
to the size that keeps it so (`font_floor`) before the figure is laid out.

The notes a figure used to carry under its panels (what stood in for what at this scale, what
the scale left out, cells pending) are attached to it (`set_notes`) and saved in the PNG's
metadata with its smallest font size and its dpi (`save_figure`): the report shows the notes
in the figure's caption, and its browser test reads the font size back
(`readability`)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

DPI = 150
# CSS pixels of width the report's pane gives a figure at 1366×768: the window less the sidebar
# at its widest (a third, workflow/report/report.css) and the pane's padding
PANE_PX = 880
MIN_CSS_PX = 9.0
# the PNG's text chunks
NOTES_KEY = "fedhet:notes"
FONT_KEY = "fedhet:font-min-pt"
DPI_KEY = "fedhet:dpi"


def set_notes(fig: Any, notes: Iterable[str]) -> None:
    """Attach `notes` (a paragraph each; empty ones left out) to `fig`: `save_figure` writes
    them into the PNG, the report shows them in the figure's caption."""
    fig._fedhet_notes = [" ".join(str(n).split()) for n in notes if str(n).strip()]


def notes_of(fig: Any) -> list[str]:
    return list(getattr(fig, "_fedhet_notes", []))


def drawn_texts(fig: Any) -> list[Any]:
    """The texts of `fig` a reader sees: those a draw of it renders (visible, not empty; no
    tick label outside its axis's view, none of an axes drawn without its axis)."""
    from matplotlib.text import Text

    seen: list[Any] = []
    original = Text.draw

    def draw(self: Any, renderer: Any) -> Any:
        if self.get_visible() and self.get_text().strip():
            seen.append(self)
        return original(self, renderer)

    Text.draw = draw
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original
    return list(dict.fromkeys(seen))


def smallest_font(fig: Any) -> float:
    """The smallest font size (points) of the texts `fig` shows."""
    sizes = [t.get_fontsize() for t in drawn_texts(fig)]
    return float(min(sizes)) if sizes else 0.0


def font_floor(width_in: float, dpi: int = DPI) -> float:
    """The smallest font size (points) that is `MIN_CSS_PX` tall in the report's pane for a
    figure `width_in` inches wide saved at `dpi`."""
    shrink = min(1.0, PANE_PX / (width_in * dpi))
    return MIN_CSS_PX * 72.0 / dpi / shrink


def css_px(font_pt: float, dpi: float, natural_px: float, shown_px: float) -> float:
    """How many CSS pixels tall text of `font_pt` points is in a figure saved at `dpi`,
    `natural_px` wide, shown `shown_px` wide."""
    return font_pt * dpi / 72.0 * shown_px / natural_px


def readable_text(fig: Any, width_in: float | None = None) -> float:
    """Raise every text of `fig` below the font floor of its width (`font_floor`) to it and set
    symbols with subscripts (F_1, σ_ε) as mathtext; the floor (points)."""
    from fedhet.printed import subscripts_mathtext

    floor = round(font_floor(width_in or fig.get_figwidth()) + 0.05, 1)
    for text in drawn_texts(fig):
        if text.get_fontsize() < floor:
            text.set_fontsize(floor)
        shown = subscripts_mathtext(text.get_text())
        if shown != text.get_text():
            text.set_text(shown)
    return floor


def save_figure(fig: Any, out: str | Path | IO[bytes], *, dpi: int = DPI,
                tight: bool = False) -> None:
    """Save `fig` as a PNG at `dpi` (atomically where `out` is a path; "tight": cropped to what
    is drawn), with its notes, its smallest font size and its dpi in the PNG's metadata."""
    from fedhet import atomic

    notes = notes_of(fig)
    metadata = {
        "Software": "fedhet",
        "Description": "\n\n".join(notes) or None,
        NOTES_KEY: json.dumps(notes),  # ASCII: a plain tEXt chunk
        FONT_KEY: f"{smallest_font(fig):.2f}",
        DPI_KEY: str(dpi),
    }
    options: dict[str, Any] = {"format": "png", "dpi": dpi, "metadata": metadata}
    if tight:
        options["bbox_inches"] = "tight"
    if isinstance(out, str | Path):
        atomic.write_with(Path(out), lambda fh: fig.savefig(fh, **options))
    else:
        fig.savefig(out, **options)


def readability(png: bytes) -> dict[str, Any]:
    """What a saved figure's PNG says of itself: its notes, smallest font size (points), dpi
    and natural size (pixels); font and dpi None where it does not say."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        text = dict(getattr(image, "text", {}) or {})
        size = image.size
    font, dpi = text.get(FONT_KEY), text.get(DPI_KEY)
    return {"notes": json.loads(text.get(NOTES_KEY, "[]")),
            "font_pt": float(font) if font else None, "dpi": float(dpi) if dpi else None,
            "width": size[0], "height": size[1]}


def smallest_css_px(png: bytes, shown_px: float | None = None) -> float | None:
    """The smallest text of a saved figure in CSS pixels, shown `shown_px` wide (by default as
    the report's pane shows it: `PANE_PX` at most); None where the PNG does not say."""
    info = readability(png)
    if info["font_pt"] is None or info["dpi"] is None:
        return None
    shown = shown_px if shown_px is not None else min(info["width"], PANE_PX)
    return css_px(info["font_pt"], info["dpi"], info["width"], shown)
