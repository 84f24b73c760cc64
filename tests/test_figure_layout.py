"""Every figure kind, drawn from small synthetic inputs, is legible: nothing clipped, no legend
over the data, the footnote clear of the panels (tests/figure_checks.py). The first tests show
that the check fails on figures that break each rule."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fedhet.figures.footnote import add_footnote  # noqa: E402
from figure_checks import LayoutError, assert_legible  # noqa: E402

NOTE = ("scale demo: stand-in data and models, a fiftieth of the paper's rounds, so the numbers "
        "show the pipeline works, not the paper's results; each figure says what it draws.")


def crossing_lines(ax) -> None:
    """Two lines that cross the whole panel: no corner of it is free."""
    x = np.linspace(0, 1, 30)
    ax.plot(x, x, label="rising")
    ax.plot(x, 1 - x, label="falling")


def test_the_check_passes_a_legend_beside_the_panel_and_a_footnote():
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    add_footnote(fig, [NOTE], 6.4)
    assert_legible(fig)
    plt.close(fig)


def test_the_check_fails_on_a_footnote_pushed_off_the_canvas():
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    add_footnote(fig, [NOTE], 6.4)
    fig.texts[-1].set_position((0.01, -0.05))
    with pytest.raises(LayoutError, match="figure text 'scale demo.*is clipped"):
        assert_legible(fig)
    plt.close(fig)


def test_the_check_fails_on_a_footnote_wrapped_wider_than_the_figure():
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.text(0.01, 0.01, NOTE + " " + NOTE, fontsize=6, va="bottom")  # one long line
    with pytest.raises(LayoutError, match="is clipped"):
        assert_legible(fig)
    plt.close(fig)


def test_the_check_fails_on_a_footnote_over_a_panel():
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    fig.tight_layout()
    text = textwrap.fill(NOTE, 40)  # four lines where the layout left room for none
    fig.text(0.01, 0.01, text, fontsize=6, va="bottom")
    with pytest.raises(LayoutError, match="covers panel"):
        assert_legible(fig)
    plt.close(fig)


def test_the_check_fails_on_a_legend_beside_the_panel_but_off_the_canvas():
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    fig.tight_layout()
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))  # laid out before it was there
    with pytest.raises(LayoutError, match="legend 'rising, falling' is clipped"):
        assert_legible(fig)
    plt.close(fig)


def draw_bars(ax) -> None:
    ax.bar([0, 1, 2], [1.0, 1.0, 1.0], width=0.9, label="bars")


def draw_points(ax) -> None:
    grid = np.linspace(0, 1, 40)
    x, y = np.meshgrid(grid, grid)
    ax.scatter(x.ravel(), y.ravel(), s=4, label="points")


def draw_band(ax) -> None:
    x = np.linspace(0, 1, 5)
    ax.fill_between(x, 0, 1, alpha=0.3, label="band")
    ax.plot([0, 1], [2, 2], label="line above")  # the band fills the lower half


def draw_sparse_line(ax) -> None:
    """Two vertices far apart: only the segment between them passes under the legend."""
    ax.plot([0, 1], [0, 1], label="segment")


@pytest.mark.parametrize("draw, what", [(crossing_lines, "line"), (draw_bars, "patch"),
                                        (draw_points, "points"), (draw_band, ".*Collection 'band'"),
                                        (draw_sparse_line, "line 'segment'")])
def test_the_check_fails_on_a_legend_over_the_data(draw, what):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    draw(ax)
    ax.legend(loc="center", fontsize=12)
    fig.tight_layout()
    with pytest.raises(LayoutError, match=f"covers {what}"):
        assert_legible(fig)
    plt.close(fig)


def test_the_check_fails_on_a_legend_over_the_next_panel():
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.0))
    for ax in axes:
        ax.plot([0, 1], [0, 0])  # along the bottom: the legend covers no data
    axes[0].plot([0, 1], [0, 0], label="a label long enough to reach the next panel")
    axes[0].legend(loc="upper left", bbox_to_anchor=(0.5, 1.0))  # no layout moves it away
    with pytest.raises(LayoutError, match="covers panel"):
        assert_legible(fig)
    plt.close(fig)
