"""Linear CKA (Kornblith et al., 2019) between representations, and CCVR's Figs. 1–2.

CCVR (§3.2) compares, layer by layer, the outputs of different clients' local models on the
same test inputs: for every pair of client models the linear CKA of their outputs at a layer
(Fig. 1: pairwise matrices for three layers; Fig. 2: the mean over pairs for every layer,
IID vs non-IID). Layers here are a model's split points (`FedModel.split_points`, outputs
flattened per sample) plus ``"classifier"``, the logits.

    CKA(X, Y) = ‖Y_cᵀ X_c‖²_F / (‖X_cᵀ X_c‖_F ‖Y_cᵀ Y_c‖_F),   X_c, Y_c column-centred,

which equals ⟨K_c, L_c⟩ / (‖K_c‖ ‖L_c‖) with the centred Gram matrices K_c = X_c X_cᵀ; the
Gram form is used when there are fewer samples than features. Computed in float64.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedhet.engine.seeding import derive_seed

CLASSIFIER = "classifier"


def _centred(x: torch.Tensor) -> torch.Tensor:
    x = x.reshape(x.shape[0], -1).double()
    return x - x.mean(0, keepdim=True)


def centred_gram(x: torch.Tensor) -> torch.Tensor:
    """K_c = X_c X_cᵀ [n, n] of a representation [n, ...] (flattened, columns centred)."""
    xc = _centred(x)
    return xc @ xc.T


def cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of two representations of the same n inputs ([n, d1], [n, d2]; extra
    dimensions are flattened). 1 for identical inputs up to an orthogonal transform and an
    isotropic scale; 0 when a representation is constant."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"CKA needs the same inputs: {x.shape[0]} vs {y.shape[0]} samples")
    xc, yc = _centred(x), _centred(y.to(x.device))
    n, dx, dy = xc.shape[0], xc.shape[1], yc.shape[1]
    if n < max(dx, dy):
        k, m = xc @ xc.T, yc @ yc.T
        num, den = (k * m).sum(), k.norm() * m.norm()
    else:
        num = (yc.T @ xc).pow(2).sum()
        den = (xc.T @ xc).norm() * (yc.T @ yc).norm()
    return float(num / den) if den > 0 else 0.0


def cka_matrix(representations: Sequence[torch.Tensor]) -> np.ndarray:
    """[K, K] pairwise linear CKA of K representations of the same inputs (via Gram matrices)."""
    grams = [centred_gram(r) for r in representations]
    norms = [g.norm() for g in grams]
    k = len(grams)
    out = np.eye(k)
    for i in range(k):
        for j in range(i + 1, k):
            den = norms[i] * norms[j]
            val = float((grams[i] * grams[j]).sum() / den) if den > 0 else 0.0
            out[i, j] = out[j, i] = val
    return out


@torch.no_grad()
def layer_outputs(model: nn.Module, x: torch.Tensor, points: Sequence[str] | None = None,
                  batch_size: int = 256) -> dict[str, torch.Tensor]:
    """Outputs [n, D] (flattened, float32, on x's device) of `model` at its split points (all
    of them and ``"classifier"`` by default) for normalised inputs x, in eval mode."""
    model.eval()
    points = list(points) if points is not None else [*model.split_points, CLASSIFIER]
    valid = set(model.split_points) | {CLASSIFIER}
    unknown = [p for p in points if p not in valid]
    if unknown:
        raise ValueError(f"unknown layer(s) {unknown}; valid: {sorted(valid)}")
    out: dict[str, list[torch.Tensor]] = {p: [] for p in points}
    for start in range(0, x.shape[0], batch_size):
        xb = x[start:start + batch_size]
        for p in points:
            if p == CLASSIFIER:
                h = model(xb)
            else:
                h = model.forward_to(xb, p)
            out[p].append(h.reshape(h.shape[0], -1).float())
    return {p: torch.cat(v) for p, v in out.items()}


def probe_inputs(data: Any, num_samples: int | None, seed: int, device: torch.device) -> torch.Tensor:
    """A seeded random subset of the normalised test images (all of them for None)."""
    from fedhet.engine.augment import Augmenter

    n = data.x_test.shape[0]
    idx = np.arange(n)
    if num_samples is not None and num_samples < n:
        rng = np.random.default_rng(derive_seed(seed, "cka", "inputs"))
        idx = np.sort(rng.choice(n, num_samples, replace=False))
    aug = Augmenter("none", data.mean, data.std, int(data.x_test.shape[-1]), device)
    return aug.test(data.x_test[torch.as_tensor(idx)].to(device))


def client_cka(run_dir: str | os.PathLike, round: int | None = None,
               points: Sequence[str] | None = None, num_samples: int | None = 1000,
               seed: int = 0, device: str = "auto"):
    """Tidy DataFrame (layer, client_a, client_b, cka) of pairwise CKA between the client
    models a run saved at `round`, on the same test inputs (Fig. 1; both orders and the
    diagonal included)."""
    from fedhet.saved import open_run

    saved = open_run(run_dir, device=device)
    models = saved.client_models(round)
    x = probe_inputs(saved.data, num_samples, seed, saved.device)
    outputs = {k: layer_outputs(m, x, points) for k, m in models.items()}
    return cka_frame(outputs)


def cka_frame(outputs: Mapping[int, Mapping[str, torch.Tensor]]):
    """Tidy pairwise CKA from {model: {layer: representation}} (same layers, same inputs)."""
    import pandas as pd

    keys = list(outputs)
    layers = list(outputs[keys[0]])
    rows = []
    for layer in layers:
        mat = cka_matrix([outputs[k][layer] for k in keys])
        for i, a in enumerate(keys):
            for j, b in enumerate(keys):
                rows.append({"layer": layer, "client_a": a, "client_b": b, "cka": mat[i, j]})
    return pd.DataFrame(rows)


def mean_cka_per_layer(frame):
    """Mean CKA over distinct client pairs for every layer (Fig. 2), in layer order."""
    pairs = frame[frame["client_a"] < frame["client_b"]]
    order = list(dict.fromkeys(frame["layer"]))
    out = pairs.groupby("layer", sort=False)["cka"].agg(["mean", "std", "count"]).reset_index()
    out["layer"] = out["layer"].astype("category").cat.set_categories(order)
    return out.sort_values("layer").reset_index(drop=True).rename(
        columns={"mean": "mean_cka", "std": "std_cka", "count": "pairs"})
