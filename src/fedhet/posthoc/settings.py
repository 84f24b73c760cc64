"""Settings of the post-hoc calibration (torch-free, so the workflow can read them).

Values the CCVR paper does not give are listed in `ASSUMED`; calibration.json records which
of them a calibration left at their default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet import catalog
from fedhet.config import ConfigError

METHODS = tuple(catalog.names("posthoc"))  # declared in fedhet.methods.ccvr

DEFAULT_SETTINGS: dict[str, Any] = {
    "method": "ccvr",  # ccvr | oracle
    # -- virtual features (ccvr) --
    "samples_per_class": 100,  # M_c; paper: 100 CIFAR-10, 500 CIFAR-100, 1000 CINIC-10
    "allocation": "uniform",  # uniform: M_c per seen class | proportional: M·C·N_c/N
    "relu": True,  # paper: ReLU before retraining
    "tukey": True,  # paper: Tukey's transform before retraining
    "tukey_beta": 0.5,  # paper
    "pd_fix": "clamp",  # clamp (eigenvalues) | jitter (diagonal)
    "pd_eps": 1e-6,  # eigenvalue floor, relative to the mean eigenvalue of Σ_c
    "sw_projections": 200,  # directions for the mean sliced Wasserstein distance (Fig. 6)
    # -- real features (oracle) --
    "fraction": 1.0,  # share of the training samples, drawn IID (Fig. 4: down to 1/50)
    # -- classifier retraining (both) --
    "lr": 0.01,  # assumed (client lr of the paper's protocol; FL-bench uses the same)
    "momentum": 0.9,  # assumed (client momentum of the paper's protocol)
    "weight_decay": 0.0,  # assumed
    "batch_size": 64,  # assumed (client batch of the paper's protocol)
    "epochs": 10,  # assumed (public implementations use 1–10 passes)
    # -- execution --
    "seed": None,  # None: the run's seed
    "feature_batch_size": 512,
    "device": "auto",
}

ASSUMED = ("lr", "momentum", "weight_decay", "batch_size", "epochs", "pd_fix", "pd_eps")


def resolve_settings(settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults filled in and values checked; an unknown key raises ConfigError naming it."""
    out = dict(DEFAULT_SETTINGS)
    for key, value in (settings or {}).items():
        if key not in DEFAULT_SETTINGS:
            valid = ", ".join(sorted(DEFAULT_SETTINGS))
            raise ConfigError(f"unknown calibration setting '{key}'; valid: {valid}")
        out[key] = value
    if out["method"] not in METHODS:
        raise ConfigError(f"calibration method must be one of {METHODS}, got {out['method']!r}")
    if out["allocation"] not in ("uniform", "proportional"):
        raise ConfigError(f"allocation must be uniform or proportional, got {out['allocation']!r}")
    if out["pd_fix"] not in ("clamp", "jitter"):
        raise ConfigError(f"pd_fix must be clamp or jitter, got {out['pd_fix']!r}")
    if not (isinstance(out["samples_per_class"], int) and out["samples_per_class"] >= 0):
        raise ConfigError(f"samples_per_class must be an integer >= 0, got {out['samples_per_class']!r}")
    if not 0 < float(out["fraction"]) <= 1:
        raise ConfigError(f"fraction must be in (0, 1], got {out['fraction']!r}")
    for key in ("batch_size", "feature_batch_size", "sw_projections"):
        if not (isinstance(out[key], int) and out[key] >= 1):
            raise ConfigError(f"{key} must be a positive integer, got {out[key]!r}")
    if not (isinstance(out["epochs"], int) and out["epochs"] >= 0):
        raise ConfigError(f"epochs must be an integer >= 0, got {out['epochs']!r}")
    if not float(out["lr"]) > 0:
        raise ConfigError(f"lr must be > 0, got {out['lr']!r}")
    return out
