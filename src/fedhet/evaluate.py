"""Evaluate a saved model of a finished run on that run's test set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from fedhet.catalog import implementation
from fedhet.config import load_yaml, resolve_run
from fedhet.data import load_dataset
from fedhet.engine.augment import Augmenter
from fedhet.engine.evaluation import evaluate_model
from fedhet.methods.ccvr.plugins import apply_inference_plugins
from fedhet.models import build_model
from fedhet.plugins import eval_logit_map, model_classes
from fedhet.train import pick_device


def load_run_model(run_dir: str | os.PathLike, model_path: str | os.PathLike | None = None,
                   device: str = "auto") -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """The model, dataset and resolved settings of a run directory."""
    run_dir = Path(run_dir)
    resolved = load_yaml(str(run_dir / "resolved.yaml"))
    resolved.pop("provenance", None)
    run = resolve_run(resolved)
    d, m = run["dataset"], run["model"]
    data = load_dataset(d["name"], d["root"], d["options"])
    outputs = model_classes(run, data.num_classes)  # + VHL's virtual classes
    model = build_model(m["name"], outputs, int(data.x_train.shape[1]),
                        int(data.x_train.shape[-1]), m["width"], **m["options"])
    path = Path(model_path) if model_path else run_dir / "model.pt"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; train the run first (fedhet train)")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    apply_inference_plugins(model, run)  # e.g. clsnorm normalises the head at inference too
    return model.to(pick_device(device)), data, run


def evaluate_run(run_dir: str | os.PathLike, model_path: str | os.PathLike | None = None,
                 device: str = "auto") -> dict[str, Any]:
    """Test accuracy and loss of a run's model (default: its final `model.pt`)."""
    model, data, run = load_run_model(run_dir, model_path, device)
    dev = next(model.parameters()).device
    augmenter = Augmenter("none", data.mean, data.std, int(data.x_train.shape[-1]), dev)
    plugins = [implementation(p["name"])(p["params"]) for p in run["plugins"]]
    acc, loss = evaluate_model(model, data.x_test.to(dev), data.y_test.to(dev), augmenter,
                               run["eval"]["batch_size"],
                               logit_map=eval_logit_map(plugins, data.num_classes))
    return {"test_acc": acc, "test_loss": loss, "model": str(model_path or Path(run_dir) / "model.pt")}
