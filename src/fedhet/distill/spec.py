"""Settings of FedLGD's initial local virtual data (one cached artefact per setting), its key
and its path. Torch-free, so the workflow names a run's artefact without importing torch.

The settings are what the distillation reads and nothing else: the dataset, the partition and
its seed, and the `distilled` plug-in's distillation parameters. Not the model, λ, the client
ratio or the number of rounds, so every run that can share an artefact does (FedLGD and the
baselines that train on the same virtual data, both architectures of a table).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Bump when the distillation's output changes for the same settings: every key changes with it.
VERSION = 2  # 2: every class embedded in one pass
CACHE_FORMAT = 1
# Where the partition is cached is no setting: its root is left out, and the file the workflow
# points a training job at reads as unset (None, its resolved default), so that the job names
# the key of the artefact the workflow built (keys made from runs without a file stay as they
# were)
PARTITION_LOCATION = ("root",)
PARTITION_FILE = "file"
DISTILL_PARAMS = ("ipc", "server_ipc", "init", "init_stats", "warmup_steps", "real_batch",
                  "lr_img", "img_momentum", "dsa", "embed_width", "embed_depth")


def settings_for_run(run: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The artefact of a resolved run whose `distilled` (or `fedlgd`) plug-in has `params`."""
    seed = params["distill_seed"]
    return {
        "dataset": {"name": run["dataset"]["name"],
                    "options": dict(run["dataset"].get("options") or {})},
        "partition": {k: None if k == PARTITION_FILE else v
                      for k, v in run["partition"].items() if k not in PARTITION_LOCATION},
        "seed": int(run["seed"] if seed is None else seed),
        "partition_seed": int(run["seed"]),
        "params": {k: params[k] for k in DISTILL_PARAMS},
    }


def distilled_key(settings: Mapping[str, Any]) -> str:
    """Filename-safe key `distilled-<dataset>-<12 hex>` of the settings."""
    ident = {"settings": settings, "version": VERSION, "format": CACHE_FORMAT}
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str)
    name = str(settings["dataset"]["name"]).replace("_", "-")
    return f"distilled-{name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def distilled_path(settings: Mapping[str, Any], root: str | os.PathLike) -> Path:
    """Where the artefact of these settings lives under a datasets root."""
    return Path(root) / "distilled" / f"{distilled_key(settings)}.pt"
