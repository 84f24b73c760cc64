"""Settings of the post-hoc calibration (torch-free, so the workflow can read them), each
declared once with its default, meaning and allowed values.

Values the CCVR paper does not give are listed in `ASSUMED`; calibration.json records which
of them a calibration left at their default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedhet import catalog
from fedhet.declare import Param, resolve_params

METHODS = tuple(catalog.names("posthoc"))  # declared in fedhet.methods.ccvr

P = Param
SETTINGS: dict[str, Param] = {
    "method": P("ccvr", "the post-hoc step", choices=METHODS),
    # -- virtual features (ccvr) --
    "samples_per_class": P(100, "M_c; paper: 100 CIFAR-10, 500 CIFAR-100, 1000 CINIC-10",
                           at_least=0),
    "allocation": P("uniform", "uniform: M_c per seen class | proportional: M·C·N_c/N",
                    choices=("uniform", "proportional")),
    "relu": P(True, "paper: ReLU before retraining"),
    "tukey": P(True, "paper: Tukey's transform before retraining"),
    "tukey_beta": P(0.5, "paper", above=0),
    "pd_fix": P("clamp", "clamp (eigenvalues) | jitter (diagonal)", choices=("clamp", "jitter")),
    "pd_eps": P(1e-6, "eigenvalue floor, relative to the mean eigenvalue of Σ_c", above=0),
    "sw_projections": P(200, "directions for the mean sliced Wasserstein distance (Fig. 6)",
                        at_least=1),
    # -- real features (oracle) --
    "fraction": P(1.0, "share of the training samples, drawn IID (Fig. 4: down to 1/50)",
                  above=0, at_most=1),
    # -- classifier retraining (both) --
    "lr": P(0.01, "assumed (client lr of the paper's protocol; FL-bench uses the same)", above=0),
    "momentum": P(0.9, "assumed (client momentum of the paper's protocol)", at_least=0, below=1),
    "weight_decay": P(0.0, "assumed", at_least=0),
    "batch_size": P(64, "assumed (client batch of the paper's protocol)", at_least=1),
    "epochs": P(10, "assumed (public implementations use 1–10 passes)", at_least=0),
    # -- execution --
    "seed": P(None, "None: the run's seed", kind="int", at_least=0),
    "feature_batch_size": P(512, "images per batch when extracting features", at_least=1),
    "device": P("auto", "auto | cpu | cuda | cuda:N", pattern=r"auto|cpu|cuda(:\d+)?|mps"),
}
del P

DEFAULT_SETTINGS: dict[str, Any] = {key: p.default for key, p in SETTINGS.items()}

ASSUMED = ("lr", "momentum", "weight_decay", "batch_size", "epochs", "pd_fix", "pd_eps")


def resolve_settings(settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults filled in and values checked against their declarations; an unknown key or a
    bad value raises ConfigError naming it."""
    return resolve_params(SETTINGS, settings, "calibration.")
