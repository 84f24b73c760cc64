"""What every paper figure owes a reader, measured by matplotlib after a draw (shared by the
figure tests): nothing drawn lies outside the figure (a legend, a footnote, a title or a tick
label would be cut off in the PNG), no legend covers plotted data or another panel, the
footnote covers no panel, and its smallest text is readable in the report's pane at 1366×768
(`assert_readable`: at least 9 CSS pixels once the PNG is shrunk to the pane)."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox

SLACK = 1.0  # pixels: rounding of extents


class LayoutError(AssertionError):
    """A figure that a reader cannot read whole."""


def assert_legible(fig: Figure) -> None:
    """Raise LayoutError when an artist of `fig` is clipped by the figure's edge, a legend
    overlaps plotted data or a panel it does not belong to, or a figure text (the footnote, the
    title) overlaps a panel."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox.padded(SLACK)
    parts = [(f"figure text {_quote(t.get_text())}", t.get_window_extent(renderer))
             for t in fig.texts if t.get_visible() and t.get_text().strip()]
    parts += [(f"legend {_legend_name(lg)}", lg.get_window_extent(renderer))
              for lg in _legends(fig)]
    parts += [(f"panel {_quote(ax.get_title())}", ax.get_tightbbox(renderer))
              for ax in fig.axes if ax.get_visible()]
    for what, box in parts:
        if not _inside(box, page):
            raise LayoutError(f"{what} is clipped: it spans {_pixels(box)}, the figure "
                              f"{_pixels(fig.bbox)}")
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer).padded(-SLACK)
        for ax in fig.axes:
            hit = _data_under(ax, box, renderer)
            if hit:
                raise LayoutError(f"legend {_legend_name(legend)} covers {hit} of panel "
                                  f"{_quote(ax.get_title())}")
            if legend.axes is not ax and _overlap(box, ax.bbox):
                raise LayoutError(f"legend {_legend_name(legend)} covers panel "
                                  f"{_quote(ax.get_title())}")
    for text in fig.texts:
        if not text.get_visible() or not text.get_text().strip():
            continue
        box = text.get_window_extent(renderer).padded(-SLACK)
        for ax in fig.axes:
            if ax.get_visible() and _overlap(box, ax.get_tightbbox(renderer)):
                raise LayoutError(f"figure text {_quote(text.get_text())} covers panel "
                                  f"{_quote(ax.get_title())}")


def _legends(fig: Figure) -> list[Legend]:
    out = list(fig.legends)
    out += [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [lg for lg in out if lg.get_visible()]


def _data_under(ax: Axes, box: Bbox, renderer: RendererBase) -> str:
    """What of `ax`'s plotted data is drawn inside `box` (display pixels); "" when nothing.
    Data outside the panel's own area is clipped away, so only that area counts."""
    region = Bbox.intersection(box, ax.bbox)
    if region is None or region.width <= 0 or region.height <= 0:
        return ""
    for line in ax.lines:
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(line.get_xydata())
        drawn = line.get_linestyle() not in ("None", "", " ", "none")
        if _any_inside(_along(xy) if drawn else xy, region):
            return f"line {_quote(line.get_label())}"
    for patch in ax.patches:
        if patch.get_visible() and patch.get_transform().transform_path(
                patch.get_path()).intersects_bbox(region, filled=True):
            return f"patch {_quote(patch.get_label())}"
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, PathCollection) and len(coll.get_offsets()):  # scatter markers
            sizes = coll.get_sizes()  # areas in points²: a marker reaches its radius further
            reach = np.sqrt(sizes.max()) / 2 * ax.figure.dpi / 72 if len(sizes) else 0.0
            centres = coll.get_offset_transform().transform(coll.get_offsets())
            if _any_inside(centres, region.padded(reach)):
                return f"points {_quote(coll.get_label())}"
            continue
        faces = coll.get_facecolor()
        filled = len(faces) > 0 and float(np.max(faces[:, 3])) > 0
        transform = coll.get_transform()
        for path in coll.get_paths():
            shown = transform.transform_path(path)
            if (shown.intersects_bbox(region, filled=True) if filled
                    else _any_inside(_along(shown.vertices), region)):
                return f"{type(coll).__name__} {_quote(coll.get_label())}"
    for image in ax.images:
        if image.get_visible() and _overlap(region, image.get_window_extent(renderer)):
            return "an image"
    for text in ax.texts:
        if text.get_visible() and _overlap(region, text.get_window_extent(renderer)):
            return f"text {_quote(text.get_text())}"
    return ""


def _along(xy: np.ndarray, step: float = 0.5) -> np.ndarray:
    """Points every `step` pixels along a polyline (a NaN vertex breaks it: no segment
    bridges the gap)."""
    xy = np.asarray(xy, dtype=float).reshape(-1, 2)
    out = [xy]
    for a, b in zip(xy[:-1], xy[1:], strict=True):
        if np.isfinite(a).all() and np.isfinite(b).all():
            count = int(np.hypot(*(b - a)) / step) + 2
            out.append(a + np.linspace(0, 1, count)[:, None] * (b - a))
    return np.concatenate(out)


def _any_inside(points: np.ndarray, box: Bbox) -> bool:
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    points = points[np.isfinite(points).all(axis=1)]
    return bool(((points[:, 0] > box.x0) & (points[:, 0] < box.x1)
                 & (points[:, 1] > box.y0) & (points[:, 1] < box.y1)).any())


def _inside(box: Bbox, page: Bbox) -> bool:
    return (box.x0 >= page.x0 and box.y0 >= page.y0 and box.x1 <= page.x1
            and box.y1 <= page.y1)


def _overlap(a: Bbox, b: Bbox) -> bool:
    both = Bbox.intersection(a, b)
    return both is not None and both.width > 0 and both.height > 0


def _legend_name(legend: Legend) -> str:
    return _quote(", ".join(t.get_text() for t in legend.get_texts()))


def _quote(text: str) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _pixels(box: Bbox) -> str:
    return f"x {box.x0:.0f}..{box.x1:.0f}, y {box.y0:.0f}..{box.y1:.0f} px"


def assert_readable(fig: Figure, png: bytes | None = None) -> float:
    """Raise LayoutError when the smallest text of the figure's PNG (`png`, the file its
    script wrote; else `fig` saved as the workflow saves it) is smaller than
    `fedhet.figures.save.MIN_CSS_PX` CSS pixels once the report's pane shows it (at most
    `PANE_PX` wide). Returns that size."""
    import io

    from fedhet.figures.save import MIN_CSS_PX, PANE_PX, readability, save_figure, \
        smallest_css_px

    if png is None:
        buffer = io.BytesIO()
        save_figure(fig, buffer)
        png = buffer.getvalue()
    size = smallest_css_px(png)
    info = readability(png)
    if size is None:
        raise LayoutError("the PNG does not say its smallest font size and dpi")
    if size < MIN_CSS_PX - 0.05:
        raise LayoutError(
            f"its smallest text ({info['font_pt']:g} pt at {info['dpi']:g} dpi in a PNG "
            f"{info['width']} px wide) is {size:.1f} CSS px in the report's {PANE_PX} px pane, "
            f"less than {MIN_CSS_PX:g}")
    return size
