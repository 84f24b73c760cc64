"""One reader for saved runs: every evaluation, calibration and analysis of a finished run goes
through `open_run` (or, for its settings, data and partition alone, `read_settings`), so they
all see the same model, data and clients.

A saved run is its directory (`resolved.yaml`, `model.pt`, optional `snapshots/` and
`clients/`); `resolved.yaml` is parsed here only. Reading the run rebuilds the model it
trained — classifier outputs widened by its plug-ins, each plug-in's `prepare_model` applied
(clsnorm's normalised head) — and gives the test-time view the engine used: the normalisation
of test images and the plug-ins' logit map (VHL scores the natural classes only, or all
outputs, as its `eval_protocol` says); `extract_features` gives a model's penultimate features
as that view sees the images.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedhet import catalog
from fedhet.config import load_yaml, resolve_run
from fedhet.data import load_dataset
from fedhet.engine.augment import Augmenter
from fedhet.engine.device import pick_device
from fedhet.engine.evaluation import evaluate_model
from fedhet.models import build_model
from fedhet.partition import ClientSplit, client_partition
from fedhet.plugins import MODULES_PREFIX, Plugin, eval_logit_map, plugin_modules


@dataclass
class SavedSettings:
    """A saved run's `resolved.yaml`, read once: the settings as the run recorded them, the
    provenance beside them, and on demand the settings resolved again, the dataset they name and
    the clients' share of it (no model: a figure of the data needs none)."""

    dir: Path
    recorded: dict[str, Any]  # resolved.yaml without its provenance
    provenance: dict[str, Any]

    @cached_property
    def run(self) -> dict[str, Any]:
        """The settings resolved as training resolved them (plug-ins' defaults filled in)."""
        return resolve_run(self.recorded)

    @cached_property
    def data(self) -> Any:
        """The dataset the run trained on."""
        d = self.run["dataset"]
        return load_dataset(d["name"], d["root"], d["options"])

    def partition(self) -> ClientSplit:
        """Each client's training indices (and per-sample angles, if any), as in training."""
        return client_partition(self.run, self.data)


def read_settings(run_dir: str | os.PathLike) -> SavedSettings:
    """The settings and provenance of the run saved in `run_dir` (its `resolved.yaml`)."""
    run_dir = Path(run_dir)
    recorded = dict(load_yaml(str(run_dir / "resolved.yaml")))
    provenance = dict(recorded.pop("provenance", None) or {})
    return SavedSettings(run_dir, recorded, provenance)


@torch.no_grad()
def extract_features(model: nn.Module, x: torch.Tensor, augmenter: Augmenter,
                     batch_size: int = 512, angles: torch.Tensor | None = None) -> torch.Tensor:
    """Penultimate features f(x) [n, d] (float32) of uint8 images, eval mode, no augmentation."""
    model.eval()
    out = []
    for start in range(0, x.shape[0], batch_size):
        xb = x[start:start + batch_size]
        ab = None if angles is None else angles[start:start + batch_size]
        out.append(model.features(augmenter.test(xb, ab)).float())
    if not out:
        return torch.zeros(0, model.feature_dim, device=x.device)
    return torch.cat(out)


@dataclass
class SavedRun:
    """A finished run read back: its settings, data, plug-ins and (final) model."""

    dir: Path
    run: dict[str, Any]
    data: Any
    device: torch.device
    plugins: list[Plugin]
    model: nn.Module  # in eval mode, on `device`
    model_path: Path
    provenance: dict[str, Any] = field(default_factory=dict)
    _augmenter: Augmenter | None = field(default=None, repr=False)

    @property
    def num_classes(self) -> int:
        return int(self.data.num_classes)

    def partition(self) -> ClientSplit:
        """Each client's training indices (and per-sample angles, if any), as in training."""
        return client_partition(self.run, self.data)

    @property
    def augmenter(self) -> Augmenter:
        """Test-time normalisation of the run's images (no augmentation)."""
        if self._augmenter is None:
            self._augmenter = Augmenter("none", self.data.mean, self.data.std,
                                        int(self.data.x_train.shape[-1]), self.device)
        return self._augmenter

    @property
    def logit_map(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """Model logits → the scores the run's test accuracy is computed from."""
        return eval_logit_map(self.plugins, self.num_classes)

    def new_model(self) -> nn.Module:
        """A freshly initialised model of this run's architecture, prepared by its plug-ins."""
        m = self.run["model"]
        outputs = catalog.model_classes(self.run, self.num_classes)
        model = build_model(m["name"], outputs, int(self.data.x_train.shape[1]),
                            int(self.data.x_train.shape[-1]), m["width"], **m["options"])
        for plugin in self.plugins:
            plugin.prepare_model(model)
        modules = plugin_modules(self.plugins, model, int(self.run["seed"]))
        if modules is not None:  # saved under `plugin_modules.` beside the model
            model.add_module(MODULES_PREFIX, modules)
        return model.to(self.device).eval()

    def load_model(self, path: str | os.PathLike) -> nn.Module:
        """A model of this run with the weights saved in `path` (weights only, never code)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist; train the run first (fedhet train)")
        model = self.new_model()
        model.load_state_dict(torch.load(path, map_location=self.device, weights_only=True))
        return model.eval()

    def client_model_files(self, round: int | None = None) -> dict[int, Path]:
        """{client: model file} of the client models saved at `round` (default: the last
        round with any; `runtime.save_client_models` chooses the rounds)."""
        base = self.dir / "clients"
        rounds = sorted(int(m.group(1)) for p in base.glob("round_*")
                        if (m := re.fullmatch(r"round_(\d+)", p.name)))
        if not rounds:
            raise FileNotFoundError(
                f"{base} holds no client models; set runtime.save_client_models"
            )
        r = rounds[-1] if round is None else round
        files = {int(m.group(1)): p for p in (base / f"round_{r}").glob("client_*.pt")
                 if (m := re.fullmatch(r"client_(\d+)\.pt", p.name))}
        if not files:
            raise FileNotFoundError(f"no client models saved for round {r} in {base}")
        return dict(sorted(files.items()))

    def client_models(self, round: int | None = None) -> dict[int, nn.Module]:
        """{client: model} saved at `round`, each prepared like the global model."""
        return {k: self.load_model(p) for k, p in self.client_model_files(round).items()}

    @property
    def files(self) -> dict[str, Path]:
        """Files the run's plug-ins wrote (final.json's `files`): path relative to the run
        directory → absolute path."""
        final = self.dir / "final.json"
        listed = json.loads(final.read_text()).get("files", []) if final.exists() else []
        return {name: self.dir / name for name in listed}

    def test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The run's test images (uint8) and labels on the device."""
        return self.data.x_test.to(self.device), self.data.y_test.to(self.device)

    def evaluate(self, model: nn.Module | None = None) -> tuple[float, float]:
        """Test accuracy and mean loss of `model` (default: the run's) as the engine scores
        them (same normalisation, same logit map)."""
        x, y = self.test_set()
        return evaluate_model(self.model if model is None else model, x, y, self.augmenter,
                              self.run["eval"]["batch_size"], logit_map=self.logit_map)


def open_run(run_dir: str | os.PathLike, model_path: str | os.PathLike | None = None,
             device: str = "auto") -> SavedRun:
    """Read the run saved in `run_dir` with the model in `model_path` (default: its
    `model.pt`)."""
    settings = read_settings(run_dir)
    run = settings.run
    path = Path(model_path) if model_path else settings.dir / "model.pt"
    saved = SavedRun(dir=settings.dir, run=run, data=settings.data, device=pick_device(device),
                     plugins=catalog.plugins_of(run), model=nn.Identity(), model_path=path,
                     provenance=settings.provenance)
    saved.model = saved.load_model(path)
    return saved


def evaluate_run(run_dir: str | os.PathLike, model_path: str | os.PathLike | None = None,
                 device: str = "auto") -> dict[str, Any]:
    """Test accuracy and loss of a run's model (default: its final `model.pt`), scored as the
    engine scored it during training (`fedhet evaluate`)."""
    saved = open_run(run_dir, model_path, device)
    acc, loss = saved.evaluate()
    return {"test_acc": acc, "test_loss": loss,
            "model": str(model_path or Path(run_dir) / "model.pt")}
