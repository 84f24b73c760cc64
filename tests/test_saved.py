"""The saved-run reader: a finished run read back scores as it did in training, whatever its
plug-ins change (clsnorm's head, VHL's extra classes and logit map), for every consumer."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from fedhet.engine.evaluation import evaluate_model
from fedhet.posthoc.ccvr import calibrate
from fedhet.saved import open_run
from fedhet.train import train

RUN = {
    "dataset": {"name": "digits10", "options": {"train_per_class": 20, "test_per_class": 8}},
    "model": {"name": "cnn4", "width": 0.25},
    "partition": {"num_clients": 2, "min_size": 2},
    "training": {"rounds": 2, "clients_per_round": 2, "lr": 0.05},
    "runtime": {"device": "cpu", "save_client_models": [2]},
}
VHL_NATURAL = [{"name": "vhl", "params": {"virtual_kind": "noise", "virtual_per_class": 4,
                                          "eval_protocol": "natural"}}]


@pytest.fixture(scope="module", params=["clsnorm", "vhl"])
def finished(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    plugins = [{"name": "clsnorm"}] if request.param == "clsnorm" else VHL_NATURAL
    final = train({**RUN, "plugins": plugins,
                   "dataset": {**RUN["dataset"], "root": str(root / "data")},
                   "partition": {**RUN["partition"], "root": str(root / "parts")}},
                  root / "run", log=lambda m: None)
    return root, final


def test_a_saved_run_scores_as_in_training(finished):
    root, final = finished
    saved = open_run(root / "run", device="cpu")
    acc, loss = saved.evaluate()
    logged = json.loads((root / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert acc == pytest.approx(final["last_acc"]) and loss == pytest.approx(logged["test_loss"])


def test_client_models_are_prepared_like_the_global_model(finished):
    root, _ = finished
    saved = open_run(root / "run", device="cpu")
    models = saved.client_models()
    assert sorted(models) == [0, 1]
    for model in models.values():
        x = saved.augmenter.test(saved.data.x_test[:4])
        # same architecture and forward-pass changes: its head output has the global's shape
        assert model(x).shape == saved.model(x).shape
        assert model.head.weight.shape == saved.model.head.weight.shape


def test_calibration_scores_with_the_runs_logit_map(finished, tmp_path):
    """acc_before is the accuracy the run itself reports. For a VHL run scored on the natural
    classes only, the virtual outputs are made to win every argmax: the plain argmax scores 0,
    the run's logit map does not (before version 2 of the post-hoc steps, calibration took the
    plain argmax)."""
    root, final = finished
    run_dir = tmp_path / "run"
    shutil.copytree(root / "run", run_dir)
    saved = open_run(run_dir, device="cpu")
    if saved.plugins[0].name == "vhl":
        state = saved.model.state_dict()
        state["head.bias"][saved.num_classes:] += 1e4
        torch.save(state, run_dir / "model.pt")
        saved = open_run(run_dir, device="cpu")
        x, y = saved.test_set()
        assert evaluate_model(saved.model, x, y, saved.augmenter)[0] == 0.0
        assert saved.evaluate()[0] > 0
    result = calibrate(run_dir, tmp_path / "cal", {"method": "oracle", "epochs": 1,
                                                    "device": "cpu"}, log=lambda m: None)
    assert result["acc_before"] == pytest.approx(saved.evaluate()[0])


def test_a_tampered_model_file_is_refused(finished, tmp_path):
    root, _ = finished
    bad = tmp_path / "model.pt"

    class Evil:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    torch.save({"head.weight": Evil()}, bad)
    with pytest.raises(Exception, match="Weights only load failed|Unsupported"):
        open_run(root / "run", bad, device="cpu")
    assert not (tmp_path / "pwned").exists()
