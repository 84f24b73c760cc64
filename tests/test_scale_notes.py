"""Each table's and figure's note says what its own runs changed from the paper at the scale,
generated from its cells' settings (fedhet.experiments.scale_notes), and a scale whose numbers
are not comparable with the papers' leaves the difference out of the tables' cells."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X
from fedhet import tables as T
from fedhet.config import resolve_run
from fedhet.experiments import scale_notes as N

ROOT = Path(__file__).resolve().parents[1]


def run(**over) -> dict:
    base = {"dataset": {"name": "cifar10"}, "model": {"name": "resnet18"},
            "training": {"rounds": 1000, "local_epochs": 1, "batch_size": 64, "lr": 0.01}}
    for section, values in over.items():
        base[section] = {**base.get(section, {}), **values}
    return resolve_run(base)


SCALE = {"rounds": {"factor": 0.015, "min": 5, "max": 100}}


def test_a_cell_says_its_stand_in_model_local_work_and_rounds():
    paper = run()
    ours = run(dataset={"name": "digits10", "options": {"size": 16, "train_per_class": 250,
                                                        "channels": 3}},
               model={"name": "convnet", "width": 0.25},
               training={"rounds": 15, "local_epochs": 5, "batch_size": 32})
    note = N.item_note([N.cell_changes(paper, ours, SCALE)])
    assert note == (
        "Changed from the paper: CIFAR-10 → handwritten digits (16 px, 250 "
        "training images a class); ResNet-18 → quarter-width ConvNet; 5 local epochs instead "
        "of 1; 15 rounds instead of 1,000; batch size 32 instead of 64.")


def test_the_rounds_cap_and_minimum_are_named_and_cells_said_together():
    capped = N.cell_changes(run(training={"rounds": 10000}), run(training={"rounds": 100}),
                            SCALE)
    floor = N.cell_changes(run(training={"rounds": 200}), run(training={"rounds": 5}), SCALE)
    steps = N.cell_changes(run(training={"local_steps": 50}), run(training={"local_steps": 5}),
                           SCALE)
    assert N.item_note([capped]) == (
        "Changed from the paper: 100 rounds (this scale's cap) instead of 10,000.")
    assert "5 rounds (this scale's minimum) instead of 200" in N.item_note([floor])
    assert N.item_note([steps]) == "Changed from the paper: 5 local steps instead of 50."
    mixed = N.cell_changes(run(training={"local_epochs": 2}), run(training={"local_steps": 5}),
                           SCALE)
    assert "5 local steps instead of 2 local epochs" in N.item_note([mixed])
    # two cells, the same batch size at this scale from two of the paper's
    a = N.cell_changes(run(), run(training={"batch_size": 32}), SCALE)
    b = N.cell_changes(run(training={"batch_size": 128}), run(training={"batch_size": 32}), SCALE)
    assert N.item_note([a, b, a]) == (
        "Changed from the paper: batch size 32 instead of 64 or 128.")
    assert N.item_note([[], []]) == (
        "As in the paper: datasets, models, local training and rounds.")


def test_plugin_parameters_read_as_their_meaning():
    assert N.param_words("code: DM iterations of the initialisation, each with a fresh "
                         "random ConvNet") == "DM iterations of the initialisation"
    assert N.param_words("virtual images per class; code's active setting") == (
        "virtual images per class")


@pytest.fixture(scope="module")
def demo():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = []
    return X.load_experiment({**cfg, "scale": "demo"}, ROOT)


@pytest.fixture(scope="module")
def paper():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = []
    return X.load_experiment({**cfg, "scale": "paper"}, ROOT)


@pytest.mark.parametrize("target, words", [
    ("fedbr_t1", ["5 local steps instead of 50"]),
    ("ccvr_t2", ["3 local epochs instead of 10", "CINIC-10 → handwritten digits",
                 "MobileNetV2 → eighth-width ConvNet"]),
    ("fedimpro_t9", ["VGG-9 → eighth-width 4-block CNN"]),
    ("fedimpro_t8", ["FEMNIST → digits by synthetic writers"]),
    ("fedimpro_tf1", ["50 rounds (this scale's cap) instead of 10,000"]),
    ("vhl_t6", ["ResNet-10 → sixteenth-width ConvNet", "ResNet-34 → quarter-width ConvNet",
                "Tiny-ImageNet"]),
    ("fedbr_a1", ["PACS → digits in 4 styles"]),
])
def test_each_demo_item_says_what_its_own_runs_changed(demo, target, words):
    note = demo.items[target].scale_changes
    for w in words:
        assert w in note, (target, w, note)


def test_notes_are_the_items_own_not_one_paragraph(demo):
    notes = {item.target: item.scale_changes for item in demo.items.values()}
    assert len(set(notes.values())) > 10
    assert "local steps" not in notes["vhl_t1"] and "VGG-9" not in notes["vhl_t1"]
    assert "CIFAR-10 → handwritten digits" in notes["vhl_t1"]
    for target, note in notes.items():
        assert "config/" not in note and "restrict" not in note, (target, note)


def test_every_demo_item_resolves_its_papers_settings(demo):
    """A note compares each cell with the paper's settings resolved alone; a cell whose paper
    settings do not resolve would say nothing, and an item of such cells "as in the paper".
    Runtime settings the scale completes (the last round of `save_client_models: [-1]`: VHL
    Fig. 2, CCVR Figs. 1-2) are no change from the paper."""
    for item in demo.items.values():
        for paper, _ in item.paper_settings:
            given = {k: v for k, v in paper.items() if k != "runtime"}
            resolve_run(given)  # raises ConfigError naming the setting
        assert not item.scale_changes.startswith("As in the paper"), item.target
    assert "CIFAR-10 → handwritten digits" in demo.items["ccvr_fig1"].scale_changes


def test_the_paper_scale_changes_nothing(paper):
    for target in ("vhl_t1", "fedbr_t1", "ccvr_t2", "fedimpro_t9"):
        assert paper.items[target].scale_changes == (
            "As in the paper: datasets, models, local training and rounds."), target


# ----------------------------------------------------------------------------- the delta column


LINE = {"row": "FedAvg", "column": "CIFAR-10", "metric": "acc", "paper_value": 80.0,
        "our_mean": 35.0, "our_std": None, "delta": -45.0, "status": T.OK, "near_chance": False}


def test_a_scale_not_comparable_leaves_the_difference_out_of_the_cells():
    payload = {"paper": "vhl", "id": "t1", "spec": {"title": "Table 1", "rows": ["algorithm"]},
               "cells": []}
    shown = T.render_markdown([LINE], payload, "any", deltas=True)
    assert "80.00 / 35.00 (-45.00)" in shown and "(ours − paper)" in shown
    hidden = T.render_markdown([LINE], payload, "any", deltas=False)
    assert "80.00 / 35.00 |" in hidden and "-45.00" not in hidden
    assert "not comparable" in hidden and "CSV keeps it" in hidden
    html = T.render_html([LINE], payload, "any", "Changed from the paper: X.", deltas=False)
    assert "-45.00" not in html and "not comparable" in html
    assert "<p>Changed from the paper: X.</p>" in html  # the note: a paragraph of its own


def test_the_scale_decides_comparability_not_its_name():
    schema = yaml.safe_load((ROOT / "workflow/schemas/scale.schema.yaml").read_text())
    assert schema["properties"]["comparable"] == {"type": "boolean"}
    scales = {s: X.load_scale(ROOT, s) for s in ("demo", "small", "paper")}
    assert scales["demo"]["comparable"] is False
    assert all(scales[s].get("comparable", True) for s in ("small", "paper"))


def test_every_dataset_model_and_scaled_plugin_parameter_has_printed_words():
    """A note names datasets, models and the plug-in parameters a scale changes as a reader
    knows them: a registry entry added without its words fails here, not in a note."""
    from fedhet import names, printed

    assert set(names.datasets()) <= set(printed.DATASETS)
    assert set(names.models()) <= set(printed.MODELS)
    for scale in ("demo", "small", "paper"):
        data = X.load_scale(ROOT, scale)
        sections = [data, *(data.get("papers") or {}).values()]
        for section in sections:
            for plugin, params in (section.get("plugins") or {}).items():
                for key in params:
                    assert printed.param(plugin, key), (scale, plugin, key)
