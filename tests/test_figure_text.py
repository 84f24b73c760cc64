"""What a figure prints is whole and reads as the papers write: long titles wrap instead of
running off the PNG, legends, axes and panels name no internal key (axis keys, layer keys,
domain keys, generator kinds, run ids), and a figure agrees with itself (images per class,
colour bars, the layers its title names, the sweep values that ran)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from fedhet.figures.labels import axis_title, domain_label, layer_labels, runs_label  # noqa: E402
from figure_builders import (  # noqa: E402
    bars_figure,
    cell,
    cka_figure,
    distilled_grid_figure,
    domain_tsne_figure,
    layer_divergence_figure,
    norms_figure,
    pixel_hist_figure,
    run_script,
    write_runs,
)
from figure_checks import assert_legible  # noqa: E402
from test_fedlgd_figures import footnote, sm_of  # noqa: E402
from test_figures import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# titles of the demo's that ran past both edges of their PNG
VHL_18C = ("Figure 18c: training loss per kind of virtual data, CIFAR-10, FedAvg + VHL (the "
           "paper plots training accuracy on the virtual data, not logged here)")
FEDBR_6B = "Figure 6b style: pseudo-data drawn every round or sent once"
# what a reader must not meet in a figure's printed text
INTERNAL = re.compile(r"\b(?:blocks?\.\d|layer\d\.|head\.|\w+\.weight|stylegan|synthdigits|"
                      r"mnistm|[0-9a-f]{8}-s\d|distilled-\w+-[0-9a-f]{6,})\b")


def texts(fig) -> list[str]:
    """Every piece of text drawn in `fig`: titles, labels, ticks, legends, figure texts."""
    out = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    return [t for t in out if t.strip()]


def assert_no_internal_names(fig) -> None:
    found = [t for t in texts(fig) if INTERNAL.search(t)]
    assert not found, found


def single_curve(tmp_path, title: str, hue: str = "method"):
    """One panel of four curves, hue `hue`, titled `title`."""
    runs = {f"r{k}": [{"round": r, "train_loss": (k + 1) / r} for r in range(1, 16)]
            for k in range(4)}
    cells = [cell({hue: name}, [f"r{k}"])
             for k, name in enumerate(("VHL", "Pure Noise", "Simple-CNN", "Tiny-ImageNet"))]
    payload = {"spec": {"metric": "train_loss", "title": title, "hue": hue,
                        "ylabel": "training loss"}, "cells": cells}
    return run_script("curve", payload, tmp_path, write_runs(tmp_path, "metrics.jsonl", runs))


def test_a_long_title_wraps_inside_a_one_panel_curve(tmp_path):
    fig = single_curve(tmp_path, VHL_18C)
    assert_legible(fig)
    assert "\n" in fig._suptitle.get_text()


def test_a_long_title_wraps_inside_a_narrow_bar_chart(tmp_path, monkeypatch):
    monkeypatch.setattr("figure_builders.bars_payload", lambda: narrow_bars())
    fig = bars_figure(tmp_path, monkeypatch)
    assert_legible(fig)
    assert " ".join(fig._suptitle.get_text().split()) == FEDBR_6B


def narrow_bars() -> dict:
    """FedBR Fig. 6b at the demo: one dataset, two bars, a legend beside a narrow panel."""
    def bar(method, rid):
        return {"display": {"dataset": "CIFAR-10", "method": method}, "run_ids": [rid],
                "pending": None}

    return {"spec": {"title": FEDBR_6B, "x": "dataset", "hue": "method"},
            "cells": [bar("FedBR", "a0"), bar("FedBR (32 pseudo-data)", "b0")]}


def test_legends_and_axes_print_names_not_axis_keys(tmp_path, monkeypatch):
    assert axis_title("data") == "dataset" and axis_title("algorithm") == "algorithm"
    assert axis_title("reg") is None  # no printed name: the values speak for themselves
    assert axis_title("reg", {"hue": "reg", "hue_title": "regulariser"}) == "regulariser"
    fig = single_curve(tmp_path, "Figure 6 style", hue="data")
    assert fig.axes[0].get_legend().get_title().get_text() == "dataset"
    plt.close("all")

    def keyed():
        def bar(data, method, rid):
            return {"display": {"data": data, "algorithm": method}, "run_ids": [rid],
                    "pending": None}
        return {"spec": {"title": "Fig. 6", "x": "data", "hue": "algorithm"},
                "cells": [bar("CIFAR-10", "FedAvg", "a0"), bar("CIFAR-10", "FedBR", "b0")]}

    monkeypatch.setattr("figure_builders.bars_payload", keyed)
    fig = bars_figure(tmp_path, monkeypatch)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "dataset" and ax.get_legend().get_title().get_text() == "algorithm"
    assert "top5_acc" not in ax.get_ylabel()


def test_layers_print_by_position_and_role():
    assert layer_labels(["blocks.0.0", "blocks.1.0", "blocks.2.0", "head"]) == [
        "layer 1 of 4", "layer 2 of 4", "layer 3 of 4", "classifier"]
    assert layer_labels(["block1", "block2", "penultimate", "classifier"]) == [
        "block 1", "block 2", "penultimate stage", "classifier"]
    assert layer_labels(["layer3.1.conv2.weight"]) == ["layer 1 of 1"]


def test_layer_divergence_legends_name_no_module(tmp_path, monkeypatch):
    fig = layer_divergence_figure(tmp_path, monkeypatch)
    entries = [t.get_text() for ax in fig.axes if ax.get_legend()
               for t in ax.get_legend().get_texts()]
    assert "classifier" in entries and "layer 1 of 10" in entries
    assert not [e for e in entries if "." in e or "weight" in e]
    assert_no_internal_names(fig)


def test_pairwise_cka_panels_name_the_layers_its_title_names(tmp_path, monkeypatch):
    fig = cka_figure(tmp_path, monkeypatch)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[:3] == ["CIFAR-10 IID: first layer (layer 1 of 5)",
                          "CIFAR-10 IID: middle layer (layer 3 of 5)", "CIFAR-10 IID: classifier"]
    assert any(ax.get_ylabel() == "CKA" for ax in fig.axes)  # the colour bar says what it is


def test_every_heat_map_of_the_norm_figure_has_a_colour_bar(tmp_path, monkeypatch):
    fig = norms_figure(tmp_path, monkeypatch)
    maps = [ax for ax in fig.axes if ax.collections and ax.get_title()]
    bars = [ax for ax in fig.axes if not ax.get_title() and ax.get_ylabel()]
    assert len(maps) == 8 and len(bars) == 8
    assert {ax.get_ylabel() for ax in bars} == {"samples", "classifier weight norm"}
    norms = [ax.collections[0].get_clim() for ax in maps if "norm" in ax.get_title()]
    assert len(set(norms)) == 1  # one scale: the panels compare
    assert_legible(fig)


def test_the_virtual_data_grid_says_how_many_images_it_shows(tmp_path, monkeypatch):
    """Four images per class asked, three held (the runs' IPC at this scale): the note says
    three, as the grid shows; the title names the grid's runs, not a test domain."""
    fig = distilled_grid_figure(tmp_path, monkeypatch)  # per_class 3 of 3 held
    assert "The first 3 images of each class (one row" in footnote(fig)
    plt.close("all")
    module = load_script("distilled_grid")
    rng = np.random.default_rng(0)
    panel = {"client": 0, "count": 4, "labels": [0, 0, 1, 1],
             "images": rng.integers(0, 256, (4, 8, 8, 1)).tolist()}
    answer = {"panels": [panel, {**panel, "client": None}], "num_classes": 2, "height": 8,
              "width": 8, "channels": 1, "num_clients": 1}
    module.figure_data = lambda *a: json.loads(json.dumps(answer))
    spec = {"title": "Appendix D.2 style: virtual data after training",
            "grids": [{"axes": {"data": ["digits"], "ipc": ["ipc10"], "method": ["fedlgd"]}}]}
    display = {"data": "DIGITS", "arch": "ConvNet", "ipc": "IPC=10", "method": "FedLGD",
               "client": "Average"}
    payload = {"spec": spec, "cells": [cell(display, ["r1"])]}
    final = tmp_path / "results" / "runs" / "r1" / "final.json"
    module.main(sm_of(payload, tmp_path, [str(final)]))
    fig = plt.gcf()
    assert "The first 2 images of each class (the runs hold 2 per class at this scale, not 4)" \
        in footnote(fig)
    assert " ".join(fig._suptitle.get_text().split()).endswith("(DIGITS, IPC=10, FedLGD)")
    assert fig.axes[0].get_images()[0].get_array().shape[1] == 2 * 9  # two columns of images


def test_runs_label_lists_the_grid_axes_only():
    spec = {"grids": [{"axes": {"data": ["digits"], "method": ["fedavg"]}}]}
    display = {"data": "DIGITS", "arch": "ConvNet", "method": "FedAvg", "client": "Average"}
    assert runs_label({"display": display}, spec) == "DIGITS, FedAvg"


def test_domains_print_as_the_papers_write_them(tmp_path, monkeypatch):
    assert domain_label("synthdigits") == "SynthDigits" and domain_label("mnistm") == "MNIST-M"
    assert domain_label("art_painting") == "art painting" and domain_label("Site A") == "Site A"
    fig = pixel_hist_figure(tmp_path, monkeypatch)
    entries = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert entries[3] == "client 3: SynthDigits (120 images)"
    assert_no_internal_names(fig)
    assert "run r1" not in footnote(fig) and "uint8" not in footnote(fig)
    plt.close("all")
    fig = domain_tsne_figure(tmp_path, monkeypatch)
    entries = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert entries[:2] == ["domain: USPS", "domain: SynthDigits"]
    assert_no_internal_names(fig)


def test_a_sweep_ticks_what_ran_where_the_scale_changed_it(tmp_path):
    """FedLGD Fig. 3b at the demo: |τ| 2, 5, 10, 20 ran as 1, 1, 2, 4."""
    ran = {"2": "1", "5": "1", "10": "2", "20": "4"}
    cells = [{"display": {"tau": t, "data": "DIGITS"}, "labels": {"tau": f"t{t}", "data": "d"},
              "run_ids": [f"r{t}"], "pending": None, "ran": {"tau": r}} for t, r in ran.items()]
    inputs = write_runs(tmp_path, "final.json",
                        {f"r{t}": {"last_domain_acc": {"a": 0.5}, "status": "completed"}
                         for t in ran})
    payload = {"spec": {"title": "Figure 3b style", "x": "tau", "hue": "data",
                        "metric": "mean_domain_acc", "xlabel": "distillation rounds |τ|"},
               "cells": cells}
    fig = run_script("sweep", payload, tmp_path, inputs)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["1\n(paper 2)", "1\n(paper 5)", "2\n(paper 10)", "4\n(paper 20)"]
    assert ("At this scale distillation rounds |τ| ran as 1 (paper 2), 1 (paper 5), "
            "2 (paper 10), 4 (paper 20)") in footnote(fig)
    assert_legible(fig)


def test_the_expansion_records_what_a_sweep_value_ran_as():
    import yaml

    from fedhet import experiments as X

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    exp = X.load_experiment(cfg, ROOT)
    fig3b = exp.items["fedlgd_fig3b"]
    ran = {c.labels["tau"]: c.ran.get("tau") for c in fig3b.cells}
    assert ran["t2"] == ran["t5"] == "1"  # a fifth, at least 1: the two ran alike
    assert all("ran" not in c for c in exp.items["vhl_t1"].payload()["cells"])  # tables: none


def test_a_virtual_grid_title_names_no_generator_key(tmp_path, monkeypatch):
    from fedhet.virtual import cli

    data = tmp_path / "virtual.pt"
    torch.save({"x": torch.zeros(6, 1, 8, 8, dtype=torch.uint8), "y": torch.arange(3).repeat(2),
                "settings": {"kind": "stylegan", "num_classes": 3, "images_per_class": 2,
                             "size": 8}}, data)
    titles = []
    monkeypatch.setattr("fedhet.virtual.virtual_grid_png",
                        lambda *a, title=None, **k: titles.append(title))
    for given in ("Figure 4: virtual data from an untrained StyleGAN-v2", None):
        args = type("Args", (), {"data": str(data), "out": str(tmp_path / "g.png"),
                                 "per_class": 2, "title": given, "note": []})
        cli.cmd_virtual_grid(args)
    assert titles == ["Figure 4: virtual data from an untrained StyleGAN-v2 "
                      "(3 classes × 2 images, 8 px)",
                      "virtual data from an untrained StyleGAN-v2 (3 classes × 2 images, 8 px)"]


@pytest.mark.parametrize("name", ["fedlgd_fig5", "fedlgd_fig6"])
def test_curve_titles_say_what_the_axis_shows(name):
    import yaml

    paper, item = name.split("_")
    spec = yaml.safe_load((ROOT / "config" / "papers" / f"{paper}.yaml").read_text())
    figure = spec["figures"][item]
    assert "test" in figure["ylabel"]
    assert "average test" in figure["title"]  # not "validation", which no run scores
