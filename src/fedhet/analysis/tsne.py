"""t-SNE of penultimate features coloured by truth and predictions before/after CCVR (Fig. 5)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedhet.engine.seeding import derive_seed


def tsne_frame(features: np.ndarray | torch.Tensor, labels: Mapping[str, Any], seed: int = 0,
               max_points: int | None = 2000, perplexity: float = 30.0, max_iter: int = 1000):
    """2-D t-SNE (sklearn, PCA init, fixed seed) of features [n, d] on a seeded random subset
    of at most `max_points` rows; a DataFrame with columns x, y, index (row in `features`)
    and one column per entry of `labels` (arrays of length n)."""
    import pandas as pd
    from sklearn.manifold import TSNE

    feats = features.detach().cpu().numpy() if isinstance(features, torch.Tensor) else np.asarray(features)
    n = feats.shape[0]
    idx = np.arange(n)
    if max_points is not None and n > max_points:
        rng = np.random.default_rng(derive_seed(seed, "tsne", "subset"))
        idx = np.sort(rng.choice(n, max_points, replace=False))
    perplexity = min(perplexity, max(1.0, (len(idx) - 1) / 3))
    emb = TSNE(n_components=2, perplexity=perplexity, init="pca", learning_rate="auto",
               max_iter=max_iter, random_state=seed).fit_transform(feats[idx].astype(np.float64))
    frame = pd.DataFrame({"x": emb[:, 0], "y": emb[:, 1], "index": idx})
    for name, values in labels.items():
        v = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
        frame[name] = v[idx]
    return frame


def calibration_tsne(run_dir: str | os.PathLike, calibrated: str | os.PathLike,
                     max_points: int = 2000, seed: int = 0, device: str = "auto",
                     perplexity: float = 30.0):
    """t-SNE of the test-set features of a run's model with columns truth, pred_before (the
    run's model) and pred_after (the calibrated model in `calibrated`: its directory or
    model.pt). The feature extractor is the same before and after calibration."""
    from fedhet.saved import extract_features, open_run

    path = Path(calibrated)
    if path.is_dir():
        path = path / "model.pt"
    saved = open_run(run_dir, device=device)
    data = saved.data
    z = extract_features(saved.model, data.x_test.to(saved.device), saved.augmenter)
    with torch.no_grad():
        before = saved.model.head(z).argmax(1)
        after = saved.load_model(path).head(z).argmax(1)
    return tsne_frame(z, {"truth": data.y_test, "pred_before": before, "pred_after": after},
                      seed=seed, max_points=max_points, perplexity=perplexity)
