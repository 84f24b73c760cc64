"""Settings of virtual datasets: generator options with defaults, cache key, cache path.

Torch-free, so the workflow's DAG can name a run's virtual-data file without importing torch:

```python
settings = settings_for_run(run)            # None when the run uses no virtual images
path = virtual_path(settings, run["dataset"]["root"])
```
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Bump when a generator's output changes for the same settings: every key changes with it.
VERSION = 1
CACHE_FORMAT = 1
DEFAULT_IMAGES_PER_CLASS = 200  # the authors' active setting (a commented variant uses 5000)
# Options that say where inputs live, not what is generated: left out of the key.
LOCATION_OPTIONS = ("dataset_root",)
SETTING_KEYS = ("kind", "num_classes", "images_per_class", "size", "channels", "seed", "options")


def _stylegan(num_classes: int) -> dict[str, Any]:
    """The authors' settings: 64-d styles and σ_z 0.3 for 10 classes; 256 and 0.2 for 100."""
    many = num_classes >= 100
    return {
        "style_dim": 256 if many else 64,
        "n_mlp": 1,
        "sigma_m": 0.5,
        "sigma_z": 0.2 if many else 0.3,
        "width": 128,  # assumed: the code's generator has 512 channels up to 32 px (slow on a CPU)
        "noise_weight": 0.0,  # as the code: noise injection weights start at 0
        "batch": 100,  # images per forward pass (does not change the images)
    }


def _noise(num_classes: int) -> dict[str, Any]:
    return {"base": 8, "mean_std": 1.0, "sample_std": 0.5}


def _cnn(num_classes: int) -> dict[str, Any]:
    return {
        "z_dim": 8,
        "h_dim": 512,
        "ngf": 16,  # assumed: the code's ngf is 64 (slow to train on a CPU)
        "train_steps": 50,  # the authors' diversity training: 50 SGD steps
        "train_lr": 0.01,
        "train_momentum": 0.9,
        "train_batch": 64,
        "batch": 200,  # images per forward pass (does not change the images)
    }


def _real(num_classes: int) -> dict[str, Any]:
    return {"dataset": "tinyimagenet", "dataset_options": {}}


DEFAULTS: dict[str, Callable[[int], dict[str, Any]]] = {
    "stylegan": _stylegan,
    "noise": _noise,
    "cnn": _cnn,
    "tinyimagenet10": _real,
}
KINDS = tuple(DEFAULTS)
# how a figure names each kind of virtual data
KIND_NAMES = {
    "stylegan": "virtual data from an untrained StyleGAN-v2",
    "noise": "virtual data from upsampled Gaussian noise",
    "cnn": "virtual data from random Simple-CNN generators",
    "tinyimagenet10": "virtual data from 10 Tiny-ImageNet classes",
}


def resolve_options(kind: str, num_classes: int,
                    options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The generator's defaults updated with `options`; unknown kinds and keys raise
    ValueError naming the valid ones. Location options (`dataset_root`) pass through."""
    if kind not in DEFAULTS:
        raise ValueError(f"unknown virtual data kind '{kind}'; valid: {', '.join(KINDS)}")
    defaults = DEFAULTS[kind](num_classes)
    resolved = dict(defaults)
    for key, value in (options or {}).items():
        if key not in defaults and key not in LOCATION_OPTIONS:
            valid = ", ".join(sorted(defaults))
            raise ValueError(f"unknown option '{key}' for virtual data '{kind}'; valid: {valid}")
        if value is not None:
            resolved[key] = value
    return resolved


def resolve_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings with defaults filled in (`images_per_class` 200, `seed` 0, generator options)."""
    unknown = set(settings) - set(SETTING_KEYS)
    if unknown:
        raise ValueError(f"unknown virtual data setting '{min(unknown)}'; "
                         f"valid: {', '.join(SETTING_KEYS)}")
    for key in ("kind", "num_classes", "size", "channels"):
        if key not in settings:
            raise ValueError(f"virtual data setting '{key}' is missing")
    per_class = settings.get("images_per_class")
    out = {
        "kind": settings["kind"],
        "num_classes": int(settings["num_classes"]),
        "images_per_class": int(DEFAULT_IMAGES_PER_CLASS if per_class is None else per_class),
        "size": int(settings["size"]),
        "channels": int(settings["channels"]),
        "seed": int(settings.get("seed") or 0),
    }
    for key in ("num_classes", "images_per_class", "size", "channels"):
        if out[key] < 1:
            raise ValueError(f"virtual data setting '{key}' must be positive, got {out[key]}")
    options = resolve_options(out["kind"], out["num_classes"], settings.get("options"))
    out["options"] = {k: v for k, v in options.items() if k not in LOCATION_OPTIONS}
    return out


def real_source(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The registered dataset ({name, options}) a real-image virtual set is cut from, or None
    for the generators, from resolved settings."""
    if settings["kind"] != "tinyimagenet10":
        return None
    options = settings["options"]
    return {"name": options["dataset"], "options": dict(options["dataset_options"] or {})}


def virtual_key(settings: Mapping[str, Any]) -> str:
    """Filename-safe key `virtual-<kind>-<12 hex>` of the resolved settings."""
    resolved = resolve_settings(settings)
    ident = {"settings": resolved, "version": VERSION, "format": CACHE_FORMAT}
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str)
    return f"virtual-{resolved['kind']}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def virtual_path(settings: Mapping[str, Any], root: str | os.PathLike) -> Path:
    """Where the cache file of these settings lives under a datasets root."""
    return Path(root) / "virtual" / f"{virtual_key(settings)}.pt"


def plugin_settings(params: Mapping[str, Any], num_classes: int, channels: int,
                    size: int) -> dict[str, Any] | None:
    """The virtual dataset a VHL plug-in with `params` uses on data of this shape, or None
    when it uses no virtual images (VFA, no virtual classes, no virtual batch)."""
    from fedhet.catalog import method

    hp = {**method("vhl").defaults(), **params}
    cv = num_classes if hp["virtual_classes"] is None else int(hp["virtual_classes"])
    if hp["variant"] == "vfa" or cv == 0 or hp["virtual_batch_size"] == 0:
        return None
    if hp["variant"] == "vftl" and int(hp["vftl_steps"]) <= 0:
        return None
    return resolve_settings({
        "kind": hp["virtual_kind"], "num_classes": cv,
        "images_per_class": hp["virtual_per_class"], "size": size, "channels": channels,
        "seed": hp["virtual_seed"], "options": dict(hp["virtual_options"] or {}),
    })


def settings_for_dataset(params: Mapping[str, Any], dataset: Mapping[str, Any]) -> dict | None:
    """The virtual dataset of a VHL plug-in with `params` on a run's `dataset` ({name,
    options}), or None."""
    from fedhet.data import describe

    info = describe(dataset["name"], dataset.get("options"))
    channels, size, _ = info["shape"]
    return plugin_settings(params, info["num_classes"], channels, size)


def settings_for_run(run: Mapping[str, Any]) -> dict[str, Any] | None:
    """The virtual dataset of a resolved run (its first `vhl` plug-in), or None."""
    for plugin in run.get("plugins", []):
        if plugin["name"] == "vhl":
            return settings_for_dataset(plugin["params"], run["dataset"])
    return None
