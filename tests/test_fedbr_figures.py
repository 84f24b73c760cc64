"""FedBR's figure kinds: grouped bars of a final metric (Fig. 6) and the local learning bias of a
centralized run's model (Figs. 2-3, `fedhet bias`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402

from fedhet.analysis.bias import local_model  # noqa: E402
from fedhet.cli import main as fedhet_main  # noqa: E402
from fedhet.figures.save import notes_of  # noqa: E402
from fedhet.saved import open_run  # noqa: E402
from fedhet.train import train  # noqa: E402
from figure_checks import assert_legible  # noqa: E402
from test_figures import load_script  # noqa: E402

PENDING = "method not implemented yet: fedbr"


def bars_payload() -> dict:
    """2 datasets × 2 methods; FedAvg on CIFAR-10 has two seeds, FedBR on CIFAR-100 is pending."""
    def cell(dataset: str, method: str, run_ids: list[str], pending: str | None = None) -> dict:
        return {"display": {"dataset": dataset, "method": method}, "run_ids": run_ids,
                "pending": pending}

    return {"spec": {"title": "Fig. 6 style", "x": "dataset", "hue": "method",
                     "note": "a note of the figure"},
            "cells": [cell("CIFAR-10", "FedAvg", ["a0", "a1"]), cell("CIFAR-10", "FedBR", ["b0"]),
                      cell("CIFAR-100", "FedAvg", ["c0"]),
                      cell("CIFAR-100", "FedBR", [], PENDING)]}


def test_bars_show_the_final_metric_per_group_and_list_pending_cells(tmp_path):
    values = {"a0": 0.50, "a1": 0.60, "b0": 0.70, "c0": 0.40}
    inputs = []
    for rid, acc in values.items():
        run = tmp_path / "runs" / rid
        run.mkdir(parents=True)
        (run / "final.json").write_text(json.dumps({"top5_mean_acc": acc, "status": "completed"}))
        inputs.append(str(run / "final.json"))
    sm = SimpleNamespace(params=SimpleNamespace(payload=bars_payload(), note="demo stand-ins"),
                         input=inputs, output=[str(tmp_path / "f.png")],
                         wildcards=SimpleNamespace(scale="demo"))
    plt.close("all")
    load_script("bars").main(sm)
    fig = plt.gcf()
    ax = fig.axes[0]
    heights = {c.get_label(): [round(b.get_height(), 6) for b in c]
               for c in ax.containers if isinstance(c, BarContainer)}
    assert heights == {"FedAvg": [55.0, 40.0], "FedBR": [70.0]}  # mean of the seeds, in %
    fedbr = next(c for c in ax.containers if c.get_label() == "FedBR")
    assert fedbr[0].get_x() < 0.5  # in the CIFAR-10 group; its CIFAR-100 slot stays empty
    assert [t.get_text() for t in ax.get_xticklabels()] == ["CIFAR-10", "CIFAR-100"]
    assert {"55.0", "40.0", "70.0"} <= {t.get_text() for t in ax.texts}
    footnote = " ".join(notes_of(fig)).replace("\n", " ")
    assert "demo stand-ins" in footnote and "a note of the figure" in footnote
    assert f"CIFAR-100 · FedBR ({PENDING})" in footnote
    assert_legible(fig)  # the legend sits beside the axes, over no bar
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    assert (tmp_path / "f.png").stat().st_size > 0


@pytest.fixture(scope="module")
def centralized_run(tmp_path_factory) -> Path:
    """A small centralized digits10 run, trained well enough to tell the classes apart."""
    base = tmp_path_factory.mktemp("bias")
    run = {
        "seed": 1,
        "dataset": {"name": "digits10", "root": str(base / "data"),
                    "options": {"train_per_class": 30, "test_per_class": 10}},
        "model": {"name": "cnn4", "width": 0.25},
        "training": {"rounds": 10, "batch_size": 16, "local_steps": 25, "lr": 0.05,
                     "centralized": True},
        "runtime": {"device": "cpu"},
    }
    train(run, base / "run", log=lambda msg: None)
    return base / "run"


def test_local_model_trains_a_copy(centralized_run):
    saved = open_run(centralized_run, device="cpu")
    before = {k: v.detach().clone() for k, v in saved.model.named_parameters()}
    local = local_model(saved, classes=5, steps=20, seed=0)
    after = dict(saved.model.named_parameters())
    assert all(torch.equal(before[k], after[k]) for k in before)  # F_g untouched
    moved = dict(local.named_parameters())
    assert any(not torch.equal(before[k], moved[k]) for k in before)  # F_1 moved away
    again = dict(local_model(saved, classes=5, steps=20, seed=0).named_parameters())
    assert all(torch.equal(moved[k], again[k]) for k in moved)  # seeded


def test_fedhet_bias_shows_the_local_learning_bias(centralized_run, tmp_path):
    """After 200 steps on classes 0-4, F_1 files most images of classes 5-9 under 0-4 (FedBR
    Fig. 3b), far more than F_g does."""
    threads = torch.get_num_threads()
    try:
        assert fedhet_main(["bias", "--run", str(centralized_run), "--out", str(tmp_path),
                            "--local-steps", "200", "--samples", "60", "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads((tmp_path / "bias.json").read_text())
    assert (tmp_path / "bias.png").read_bytes()[:4] == b"\x89PNG"
    assert result["x1_classes"] == [0, 1, 2, 3, 4] and result["x2_size"] == 50
    for model in ("F_1", "F_g"):
        assert sum(result["x2_argmax_histogram"][model]) == result["x2_size"]
    assert result["x2_argmax_histogram"]["F_1"] != result["x2_argmax_histogram"]["F_g"]
    share = result["x2_predicted_in_x1"]
    assert share["F_1"] >= 0.5 and share["F_1"] > share["F_g"], share
    assert result["accuracy"]["F_1"]["X1"] > result["accuracy"]["F_1"]["X2"]
    probe = result["probe"]
    assert probe["class"] == 9 and abs(sum(probe["F_1_softmax"]) - 1) < 1e-4
    tsne = result["tsne"]
    assert len(tsne["x"]) == 60 and set(tsne["set"]) == {"F_g(X1)", "F_1(X1)", "F_1(X2)"}
    assert {c for c, s in zip(tsne["class"], tsne["set"], strict=True) if s == "F_1(X2)"} <= set(
        range(5, 10))


def test_the_bias_figure_keeps_the_cli_png_and_logs_the_numbers(centralized_run, tmp_path,
                                                                monkeypatch):
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    (results / "runs" / "r1").symlink_to(centralized_run)
    payload = {"id": "fig2", "spec": {"title": "Figs. 2-3", "options": {"local_steps": 20,
                                                                          "samples": 30}},
               "cells": [{"display": {}, "run_ids": ["r1"], "pending": None}]}
    sm = SimpleNamespace(params=SimpleNamespace(payload=payload, note="demo", results=str(results),
                                                device="auto"),
                         threads=1, output=[str(tmp_path / "fig2.png")],
                         wildcards=SimpleNamespace(scale="demo"))
    log = tmp_path / "fig2.log"
    with open(log, "w") as fh:
        monkeypatch.setattr(sys, "stderr", fh)
        load_script("bias").main(sm)
    assert (tmp_path / "fig2.png").read_bytes()[:4] == b"\x89PNG"
    text = log.read_text()
    assert '"local_steps": 20' in text and '"x2_argmax_histogram"' in text and '"tsne"' not in text
