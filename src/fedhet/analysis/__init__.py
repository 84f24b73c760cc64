"""Analyses of finished runs: CCVR's figures and the data of other model-based figures.

- `fedhet.analysis.similarity`: linear CKA, layer outputs of client models, pairwise CKA (Figs. 1–2).
- `fedhet.analysis.norms`: classifier weight norms per class per client, label counts (Fig. 3).
- `fedhet.analysis.wasserstein`: sliced Wasserstein distances between Gaussians (Fig. 6).
- `fedhet.analysis.tsne`: t-SNE of features with labels before/after calibration (Fig. 5).

Submodules are imported on use; only `norms` works without torch.
"""

import importlib
from typing import Any

_EXPORTS = {
    "cka": "fedhet.analysis.similarity",
    "cka_matrix": "fedhet.analysis.similarity",
    "layer_outputs": "fedhet.analysis.similarity",
    "client_cka": "fedhet.analysis.similarity",
    "mean_cka_per_layer": "fedhet.analysis.similarity",
    "classifier_norms_frame": "fedhet.analysis.norms",
    "label_distribution_frame": "fedhet.analysis.norms",
    "sliced_wasserstein": "fedhet.analysis.wasserstein",
    "sliced_wasserstein_gaussians": "fedhet.analysis.wasserstein",
    "mean_sliced_wasserstein": "fedhet.analysis.wasserstein",
    "tsne_frame": "fedhet.analysis.tsne",
    "calibration_tsne": "fedhet.analysis.tsne",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fedhet.analysis' has no attribute '{name}'")
