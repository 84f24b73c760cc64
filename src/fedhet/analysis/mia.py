"""Membership inference by loss threshold (FedLGD Fig. 17, a simplification of LiRA).

An attacker who sees a model's per-example cross entropy calls an example a member (a training
image) when its loss is low: the score is −loss. The ROC of that score over members (the
clients' raw training images) against non-members (test images), balanced to equal counts by a
seeded subsample, says how much the model leaks about who trained it; a model that never saw the
raw images (FedLGD trains on virtual data only) should sit near the diagonal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedhet.engine.seeding import derive_seed


@torch.no_grad()
def per_example_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                     augmenter: Any | None = None, batch_size: int = 512,
                     logit_map: Callable[[torch.Tensor], torch.Tensor] | None = None
                     ) -> np.ndarray:
    """Cross entropy of every example [n] (float64), the model in eval mode. `x` is uint8
    images normalised by `augmenter.test` when one is given, else model inputs as they are;
    `logit_map` maps logits to the scored classes (a run's `SavedRun.logit_map`)."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    for start in range(0, x.shape[0], batch_size):
        xb = x[start:start + batch_size].to(device)
        yb = y[start:start + batch_size].to(device)
        inputs = augmenter.test(xb) if augmenter is not None else xb.float()
        logits = model(inputs)
        if logit_map is not None:
            logits = logit_map(logits)
        out.append(F.cross_entropy(logits.float(), yb, reduction="none").double().cpu())
    if not out:
        return np.zeros(0)
    return torch.cat(out).numpy()


def loss_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, augmenter: Any | None = None,
                batch_size: int = 512,
                logit_map: Callable[[torch.Tensor], torch.Tensor] | None = None) -> np.ndarray:
    """Membership scores −CE per example (higher = more likely a member); see
    `per_example_loss` for the arguments."""
    return -per_example_loss(model, x, y, augmenter, batch_size, logit_map)


def balanced_subsets(n_members: int, n_nonmembers: int, seed: int = 0,
                     max_per_side: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random positions (sorted) of equally many members and non-members: the smaller
    side's size, at most `max_per_side`."""
    n = min(n_members, n_nonmembers)
    if max_per_side is not None:
        n = min(n, int(max_per_side))
    rng = np.random.default_rng(derive_seed(seed, "mia", "subset"))
    members = np.sort(rng.choice(n_members, n, replace=False))
    nonmembers = np.sort(rng.choice(n_nonmembers, n, replace=False))
    return members, nonmembers


def roc_summary(member_scores: Any, nonmember_scores: Any) -> dict[str, Any]:
    """ROC of the scores (members positive): fpr and tpr arrays, the AUC and the highest TPR at
    a false-positive rate of at most 1 % (the LiRA paper's low-FPR figure of merit)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    members = np.asarray(member_scores, dtype=np.float64).ravel()
    nonmembers = np.asarray(nonmember_scores, dtype=np.float64).ravel()
    if not len(members) or not len(nonmembers):
        raise ValueError("roc_summary needs at least one member and one non-member score")
    labels = np.concatenate([np.ones(len(members)), np.zeros(len(nonmembers))])
    scores = np.concatenate([members, nonmembers])
    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    low = fpr <= 0.01 + 1e-12
    return {
        "fpr": fpr,
        "tpr": tpr,
        "auc": float(roc_auc_score(labels, scores)),
        "tpr_at_1pct_fpr": float(tpr[low].max()) if low.any() else 0.0,
        "members": int(len(members)),
        "nonmembers": int(len(nonmembers)),
    }


def run_membership(saved: Any, samples: int | None = 2000, seed: int = 0,
                   batch_size: int = 512) -> dict[str, Any]:
    """Loss-threshold membership inference on a saved run (`fedhet.saved.SavedRun`) and its
    final global model: members are the training images of the run's clients (its partition),
    non-members the test images, `samples` of each at most (seeded). `roc_summary` plus the two
    score arrays."""
    data = saved.data
    indices, _ = saved.partition()
    train_idx = np.unique(np.concatenate([np.asarray(i, dtype=np.int64) for i in indices]))
    pick_m, pick_n = balanced_subsets(len(train_idx), len(data.y_test), seed, samples)
    members = torch.as_tensor(train_idx[pick_m])
    nonmembers = torch.as_tensor(pick_n)
    m = loss_scores(saved.model, data.x_train[members], data.y_train[members], saved.augmenter,
                    batch_size, saved.logit_map)
    n = loss_scores(saved.model, data.x_test[nonmembers], data.y_test[nonmembers],
                    saved.augmenter, batch_size, saved.logit_map)
    return {**roc_summary(m, n), "member_scores": m, "nonmember_scores": n}
