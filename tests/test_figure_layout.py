"""Every figure kind, drawn from small synthetic inputs, is legible: nothing clipped, no legend
over the data, the footnote clear of the panels (tests/figure_checks.py). The first tests show
that the check fails on figures that break each rule; the figures are drawn by
tests/figure_builders.py."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from fedhet.figures.footnote import add_footnote  # noqa: E402
from fedhet.figures.kinds import FIGURE_KINDS  # noqa: E402
from fedhet.figures.save import notes_of  # noqa: E402
from figure_builders import (  # noqa: E402
    DEMO,
    FIGURES,
    NOTE,
    SCALE_NOTE,
    calibration_figure,
    curve_figure,
    tsne_figure,
)
from figure_checks import LayoutError, assert_legible, assert_readable  # noqa: E402
from test_fedlgd_figures import footnote, sm_of  # noqa: E402
from test_figures import load_script  # noqa: E402


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


def footnote_off_the_canvas(fig, ax) -> None:
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.text(0.01, -0.05, textwrap.fill(NOTE, 130), fontsize=6, va="bottom")


def footnote_on_one_long_line(fig, ax) -> None:
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.text(0.01, 0.01, NOTE + " " + NOTE, fontsize=6, va="bottom")


def footnote_without_room(fig, ax) -> None:
    fig.tight_layout()
    text = textwrap.fill(NOTE, 40)  # six lines where the layout left room for none
    fig.text(0.01, 0.01, text, fontsize=6, va="bottom")


def legend_beside_but_laid_out_before(fig, ax) -> None:
    fig.tight_layout()
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))


@pytest.mark.parametrize("damage, message", [
    (footnote_off_the_canvas, "figure text 'scale demo.*is clipped"),
    (footnote_on_one_long_line, "figure text 'scale demo.*is clipped"),
    (footnote_without_room, "figure text 'scale demo.*covers panel"),
    (legend_beside_but_laid_out_before, "legend 'rising, falling' is clipped"),
])
def test_the_check_fails_on_a_clipped_or_covering_text(damage, message):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    damage(fig, ax)
    with pytest.raises(LayoutError, match=message):
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


def test_every_figure_kind_is_checked():
    assert sorted({kind for kind, _ in FIGURES.values()}) == sorted(FIGURE_KINDS.names())


@pytest.mark.parametrize("case", sorted(FIGURES))
def test_the_figure_is_legible(case, tmp_path, monkeypatch):
    fig = FIGURES[case][1](tmp_path, monkeypatch)
    assert notes_of(fig), "no notes for the figure's caption"
    assert_legible(fig)
    written = tmp_path / "fig.png"  # what the kind's script wrote, where it writes one
    assert_readable(fig, written.read_bytes() if written.exists() else None)


# -- what the fixed figures show ----------------------------------------------------------

def assert_beside(ax) -> None:
    """`ax`'s legend lies right of the panel: over none of its data."""
    ax.figure.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_curve_legend_sits_beside_the_panel_and_the_footnote_says_what_the_scale_keeps(
        tmp_path, monkeypatch):
    fig = curve_figure(tmp_path, monkeypatch)
    assert_beside(fig.axes[0])
    assert NOTE in footnote(fig) and SCALE_NOTE in footnote(fig)


def test_calibration_legend_sits_beside_and_the_footnote_is_wrapped_to_the_figure(
        tmp_path, monkeypatch):
    fig = calibration_figure(tmp_path, monkeypatch)
    assert_beside(fig.axes[0])
    assert SCALE_NOTE in footnote(fig)  # whole: the legibility check sees no line cut off


def test_client_tsne_legend_says_what_markers_and_colours_mean(tmp_path, monkeypatch):
    fig = tsne_figure(tmp_path, monkeypatch)
    legend = fig.axes[-1].get_legend()
    entries = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles,
                                                strict=True)}
    assert list(entries)[:3] == ["client 0", "client 1", "client 2"]
    assert [e for e in entries if e.startswith("class")] == [f"class {c}" for c in range(10)]
    points = fig.axes[0].collections[0]  # client 0's points, each in its class's colour
    first = points.get_facecolors()[0]
    classes = [c for c in range(10) if np.allclose(
        matplotlib.colors.to_rgba(entries[f"class {c}"].get_color())[:3], first[:3])]
    assert len(classes) == 1


def test_virtual_grid_carries_the_footnote_the_workflow_passes(tmp_path, monkeypatch):
    """The script hands the scale's and the item's notes to `fedhet virtual-grid`, which puts
    them under the grid."""
    from fedhet.cli import main as fedhet_main
    from fedhet.virtual import grid

    data = tmp_path / "virtual.pt"
    torch.save({"x": torch.zeros(6, 1, 8, 8, dtype=torch.uint8), "y": torch.arange(3).repeat(2),
                "settings": {"kind": "noise", "num_classes": 3, "images_per_class": 2,
                             "size": 8}}, data)
    drawn, draw = [], grid.virtual_grid_figure

    def figure(*args, **kwargs):
        drawn.append(draw(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(grid, "virtual_grid_figure", figure)
    module = load_script("virtual_grid")
    monkeypatch.setattr(module.subprocess, "run",
                        lambda command, **kw: fedhet_main(command[1:]))
    payload = {"spec": {"title": "Figure 4: virtual data", "scale_note": SCALE_NOTE}}
    module.main(sm_of(payload, tmp_path, [str(data)], note=DEMO))
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    text = footnote(drawn[0])
    assert NOTE in text and SCALE_NOTE in text


# -- readable in the report's pane (1366×768) -------------------------------------------------

def test_the_readability_check_fails_on_small_text_in_a_wide_figure():
    """Four panels in a row, 15 inches wide with 7-point legends: shrunk to the report's pane,
    their text is some 5 CSS pixels tall."""
    fig, axes = plt.subplots(1, 4, figsize=(15.2, 4.2))
    for ax in axes:
        crossing_lines(ax)
        ax.tick_params(labelsize=7)
    axes[-1].legend(fontsize=7)
    with pytest.raises(LayoutError, match="CSS px in the report's"):
        assert_readable(fig)
    plt.close(fig)


def test_the_layout_raises_small_text_of_a_wide_figure_to_a_readable_size():
    from fedhet.figures.save import font_floor, smallest_font

    fig, axes = plt.subplots(1, 2, figsize=(11.0, 3.0))
    for ax in axes:
        crossing_lines(ax)
        ax.legend(fontsize=5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    add_footnote(fig, ["scale demo: a note"], 11.0, 3.0)
    assert smallest_font(fig) >= font_floor(11.0) > 5
    assert_readable(fig)
    plt.close(fig)


def test_a_figure_carries_its_notes_font_size_and_dpi_in_its_png(tmp_path):
    from fedhet.figures.save import readability, save_figure

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    crossing_lines(ax)
    add_footnote(fig, [NOTE, "", "σ_ε = 0 is Table 1's run."], 6.4, 4.2)
    assert not [t for t in fig.texts if "scale demo" in t.get_text()]  # not in the image
    save_figure(fig, tmp_path / "f.png")
    info = readability((tmp_path / "f.png").read_bytes())
    assert info["notes"] == [NOTE, "σ_ε = 0 is Table 1's run."]
    assert info["dpi"] == 150 and info["width"] == 960 and info["font_pt"] > 5
    plt.close(fig)


def test_symbols_with_subscripts_print_as_such():
    from fedhet.printed import subscripts_html, subscripts_mathtext

    assert subscripts_mathtext("F_1 softmax (%)") == "$F_{1}$ softmax (%)"
    assert subscripts_mathtext("noise σ_ε") == r"noise $\sigma_{\epsilon}$"
    assert subscripts_html("M_c = 100") == "M<sub>c</sub> = 100"
    for keep in ("results/demo/run_1", "top5_acc", "last_acc"):
        assert subscripts_mathtext(keep) == keep and subscripts_html(keep) == keep
    assert subscripts_mathtext("$F_1$ and F_g") == "$F_1$ and F_g"  # mathtext already
