"""CCVR: classifier calibration with virtual representations (Luo et al., 2021, §4), post hoc.

`calibrate(run_dir, out_dir, settings)` reads a finished run (its ``resolved.yaml`` and
``model.pt``), keeps the feature extractor f fixed and retrains only the classifier g:

``method: ccvr`` (Algorithm 1)
    1. Every client k computes, on its own training samples, the penultimate features
       z = f(x) (eval mode, test-time normalisation, the client's rotation if the partition
       has one) and for every class c the mean μ_kc and the unbiased covariance Σ_kc (Eq. 2).
    2. The server merges them exactly (Eq. 3–4):
           μ_c = Σ_k (n_kc/N_c) μ_kc,
           Σ_c = Σ_k (n_kc−1)/(N_c−1) Σ_kc + Σ_k n_kc/(N_c−1) μ_kc μ_kcᵀ − N_c/(N_c−1) μ_c μ_cᵀ.
       A client with n_kc = 1 has no Σ_kc (its (n_kc−1) factor is 0), one with n_kc = 0 adds
       nothing; a class seen once overall (N_c = 1) gets Σ_c = 0, a class never seen gets no
       virtual features.
    3. Σ_c is made positive definite (`make_positive_definite`: eigenvalues clamped to a floor,
       or a diagonal jitter) — the merged matrix is rank-deficient whenever N_c ≤ d and can be
       slightly indefinite from rounding; every class's smallest eigenvalue before and after is
       logged in calibration.json.
    4. M_c virtual features per class are drawn from N(μ_c, Σ_c) (seeded per class), passed
       through ReLU and Tukey's transform x ↦ x^β (β = 0.5) as the paper states — applied to
       the virtual features only, both switchable.
    5. The classifier, initialised from the trained one, is retrained with SGD and cross
       entropy on the virtual features.

``method: oracle`` ("calibration on whole data", Table 1/2, Fig. 4)
    The same retraining on the real features of all clients' training samples, or of an IID
    random subset of a fraction ``fraction`` of them (seeded).

Both evaluate the calibrated model on the test set and write ``out_dir/model.pt`` (the full
state dict; only ``head.*`` differs from the run's model) and ``out_dir/calibration.json``
(accuracy before = the saved model, accuracy after, resolved settings, eigenvalue log, mean
sliced Wasserstein distance of the class Gaussians for Fig. 6). Evaluate the calibrated model
with the *run's* settings (``fedhet evaluate --run RUN --model OUT/model.pt``): a run trained
with ``clsnorm`` keeps its normalised head.

Numbers the paper does not give (retraining lr, momentum, batch, epochs) are marked as
assumed in `ASSUMED`; calibration.json repeats which ones a calibration used.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedhet import atomic
from fedhet.analysis.wasserstein import (
    mean_offdiagonal,
    pairwise_from_projections,
    project_gaussian,
    random_directions,
)
from fedhet.engine.seeding import derive_seed
from fedhet.partition import ClientSplit
from fedhet.posthoc.settings import ASSUMED, DEFAULT_SETTINGS, resolve_settings
from fedhet.saved import extract_features, open_run

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- statistics (Eq. 2–4) -------------------------------------------------------------------


def local_statistics(z: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(n, μ, Σ) of features z [n, d] in float64, Σ unbiased (Eq. 2).

    n = 0 gives μ = 0 and Σ = 0; n = 1 gives Σ = 0 (undefined; Eq. 4 weighs it by n − 1 = 0).
    """
    z = z.double()
    n, d = z.shape
    if n == 0:
        return 0, z.new_zeros(d), z.new_zeros(d, d)
    mean = z.mean(0)
    if n == 1:
        return 1, mean, z.new_zeros(d, d)
    zc = z - mean
    return n, mean, (zc.T @ zc) / (n - 1)


def merge_statistics(
    stats: Sequence[tuple[int, torch.Tensor, torch.Tensor]],
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(N_c, μ_c, Σ_c) of one class from the clients' (n_kc, μ_kc, Σ_kc) (Eq. 3–4).

    Equal to the statistics of the pooled features up to rounding. N_c = 1 gives Σ_c = 0;
    N_c = 0 gives μ_c = 0, Σ_c = 0.
    """
    total = sum(int(n) for n, _, _ in stats)
    d = stats[0][1].numel()
    ref = stats[0][1].double()
    mean = ref.new_zeros(d)
    if total == 0:
        return 0, mean, ref.new_zeros(d, d)
    for n, mu, _ in stats:
        if n:
            mean += (n / total) * mu.double()
    if total == 1:
        return 1, mean, ref.new_zeros(d, d)
    cov = ref.new_zeros(d, d)
    for n, mu, sigma in stats:
        if n >= 2:
            cov += ((n - 1) / (total - 1)) * sigma.double()
        if n >= 1:
            # Σ_k n_k μ_k μ_kᵀ − N μ μᵀ = Σ_k n_k (μ_k − μ)(μ_k − μ)ᵀ since Σ_k n_k μ_k = N μ;
            # the centred form is the same number without the cancellation of large terms.
            delta = mu.double() - mean
            cov += (n / (total - 1)) * torch.outer(delta, delta)
    return total, mean, 0.5 * (cov + cov.T)


def make_positive_definite(cov: torch.Tensor, method: str = "clamp",
                           eps: float = 1e-6) -> tuple[torch.Tensor, dict[str, Any]]:
    """A positive definite version of a symmetric matrix, and what was done.

    The floor is `eps` × the mean of the positive part of the eigenvalues (`eps` itself for an
    all-zero matrix). ``clamp`` raises every eigenvalue below the floor to it (V max(Λ, floor)
    Vᵀ), which changes only the deficient directions; ``jitter`` adds (floor − λ_min) I.
    Matrices whose smallest eigenvalue is already ≥ 0.99·floor are returned as they are.
    Returns (matrix, {min_eig_before, min_eig_after, max_eig, floor, action}).
    """
    cov = 0.5 * (cov.double() + cov.double().T)
    evals, evecs = torch.linalg.eigh(cov)
    lam_min, lam_max = float(evals[0]), float(evals[-1])
    scale = float(evals.clamp_min(0).mean())
    floor = eps * scale if scale > 0 else eps
    action = "none"
    fixed = cov
    if lam_min < 0.99 * floor:  # a matrix fixed once is not fixed again for rounding
        if method == "clamp":
            fixed = (evecs * evals.clamp_min(floor)) @ evecs.T
            fixed = 0.5 * (fixed + fixed.T)
        elif method == "jitter":
            fixed = cov + (floor - lam_min) * torch.eye(cov.shape[0], dtype=cov.dtype,
                                                         device=cov.device)
        else:
            raise ValueError(f"unknown positive-definite fix '{method}'")
        action = method
    after = float(torch.linalg.eigvalsh(fixed)[0]) if action != "none" else lam_min
    return fixed, {"min_eig_before": lam_min, "min_eig_after": after, "max_eig": lam_max,
                   "floor": floor, "action": action}


def gaussian_factor(cov: torch.Tensor) -> torch.Tensor:
    """L with L Lᵀ = cov: Cholesky, or the symmetric eigen square root if Cholesky fails."""
    try:
        return torch.linalg.cholesky(cov)
    except RuntimeError:
        evals, evecs = torch.linalg.eigh(cov)
        return evecs * evals.clamp_min(0).sqrt()


def sample_gaussian(mean: torch.Tensor, cov: torch.Tensor, num: int, seed: int) -> torch.Tensor:
    """`num` draws from N(mean, cov) in float64; the noise comes from a CPU generator seeded
    with `seed`, so the draws are the same on every device."""
    gen = torch.Generator().manual_seed(seed)
    eps = torch.randn(num, mean.numel(), generator=gen, dtype=torch.float64).to(mean.device)
    return mean.double() + eps @ gaussian_factor(cov.double()).T


def tukey_transform(z: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """Tukey's ladder of powers: x ↦ x^β for x ≥ 0 (log x for β = 0). Negative inputs (only
    with ReLU switched off) map to −|x|^β so the result stays finite."""
    if beta == 0:
        return torch.log(z.clamp_min(torch.finfo(z.dtype).tiny))
    return z.sign() * z.abs().pow(beta)


def transform_virtual(z: torch.Tensor, relu: bool = True, tukey: bool = True,
                      beta: float = 0.5) -> torch.Tensor:
    """ReLU then Tukey's transform, as CCVR applies them to the virtual features."""
    if relu:
        z = F.relu(z)
    if tukey:
        z = tukey_transform(z, beta)
    return z


def virtual_counts(class_counts: Sequence[int], per_class: int, allocation: str) -> list[int]:
    """M_c per class: `per_class` for every class with data (uniform), or the total
    per_class·C split by N_c/N (proportional, the paper's alternative); 0 for unseen classes."""
    counts = np.asarray(class_counts, dtype=np.int64)
    if allocation == "uniform":
        return [per_class if n > 0 else 0 for n in counts]
    total = per_class * len(counts)
    return [round(float(total * n / counts.sum())) if n > 0 else 0 for n in counts]


# -- features and retraining ----------------------------------------------------------------


def retrain_classifier(model: nn.Module, z: torch.Tensor, y: torch.Tensor, *, lr: float,
                       momentum: float, weight_decay: float, batch_size: int, epochs: int,
                       seed: int) -> list[float]:
    """SGD with cross entropy on (z, y) for ``model.head`` only (through its own forward, so a
    clsnorm head trains normalised); returns the mean loss of every epoch."""
    head = model.head
    params = [p for p in head.parameters()]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    n = z.shape[0]
    losses = []
    if n == 0:
        return losses
    z, y = z.detach().float(), y.to(z.device)
    with torch.enable_grad():
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen).to(z.device)
            total = torch.zeros((), device=z.device)
            for start in range(0, n, batch_size):
                idx = perm[start:start + batch_size]
                loss = F.cross_entropy(head(z[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += loss.detach() * idx.numel()
            losses.append(float(total) / n)
    return losses


# -- the post-hoc step ----------------------------------------------------------------------


def _client_data(partition: ClientSplit, device: torch.device):
    """Each client's training indices as a tensor, with its samples' angles on `device`."""
    indices, angles = partition
    out = []
    for k, ix in enumerate(indices):
        ix_t = torch.as_tensor(np.asarray(ix), dtype=torch.long)
        ang = None if angles is None else torch.as_tensor(np.asarray(angles[k]),
                                                          dtype=torch.float32, device=device)
        out.append((ix_t, ang))
    return out


def _client_features(model, data, clients, augmenter, batch_size, device):
    feats = []
    for ix, ang in clients:
        x = data.x_train[ix].to(device)
        z = extract_features(model, x, augmenter, batch_size, ang)
        feats.append((z, data.y_train[ix].to(device)))
    return feats


def ccvr_virtual_features(
    client_features: Sequence[tuple[torch.Tensor, torch.Tensor]], num_classes: int,
    settings: Mapping[str, Any], seed: int, log: Log = _stderr,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Steps 1–4 of CCVR on per-client features: per-client class statistics, exact merge,
    positive-definite fix, sampling, ReLU + Tukey. Returns (z, y, report)."""
    s = settings
    d = client_features[0][0].shape[1]
    device = client_features[0][0].device
    theta = random_directions(d, s["sw_projections"], seed, device)
    client_counts = [torch.bincount(y, minlength=num_classes).tolist() for _, y in client_features]
    class_counts = [int(sum(row[c] for row in client_counts)) for c in range(num_classes)]
    per_class = virtual_counts(class_counts, int(s["samples_per_class"]), s["allocation"])
    eig_log, proj_m, proj_s, feats, labels = [], [], [], [], []
    for c in range(num_classes):
        local = [local_statistics(z[y == c]) for z, y in client_features]  # on each client
        n_c, mu, cov = merge_statistics(local)  # on the server
        if n_c == 0:
            eig_log.append({"class": c, "count": 0, "action": "absent"})
            continue
        cov, info = make_positive_definite(cov, s["pd_fix"], float(s["pd_eps"]))
        eig_log.append({"class": c, "count": n_c, **info})
        m, sd = project_gaussian(mu, cov, theta)
        proj_m.append(m)
        proj_s.append(sd)
        if per_class[c]:
            z = sample_gaussian(mu, cov, per_class[c], derive_seed(seed, "ccvr", "virtual", c))
            feats.append(transform_virtual(z, s["relu"], s["tukey"],
                                           float(s["tukey_beta"])).float())
            labels.append(torch.full((per_class[c],), c, dtype=torch.long, device=device))
        del local, cov
    z = torch.cat(feats) if feats else torch.zeros(0, d, device=device)
    y = torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long, device=device)
    fixed = [e for e in eig_log if e.get("action") not in ("none", "absent")]
    present = [e for e in eig_log if e.get("action") != "absent"]
    msw = (mean_offdiagonal(pairwise_from_projections(torch.stack(proj_m), torch.stack(proj_s)))
           if len(proj_m) >= 2 else None)
    report = {
        "class_counts": class_counts,
        "client_class_counts": client_counts,
        "virtual_per_class": per_class,
        "eigen_log": eig_log,
        "pd_summary": {
            "classes_fixed": len(fixed),
            "method": s["pd_fix"],
            "min_eig_before": min((e["min_eig_before"] for e in present), default=None),
            "min_eig_after": min((e["min_eig_after"] for e in present), default=None),
        },
        "mean_sliced_wasserstein": msw,
    }
    log(f"ccvr: {len(present)} classes, {len(fixed)} covariances fixed by {s['pd_fix']} "
        f"(min eigenvalue {report['pd_summary']['min_eig_before']:.3g} → "
        f"{report['pd_summary']['min_eig_after']:.3g}); {int(y.numel())} virtual features")
    return z, y, report


def oracle_features(model, data, clients, augmenter, fraction: float, seed: int,
                    batch_size: int, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Real features of all clients' training samples, or of an IID subset of `fraction` of
    them (drawn without replacement from a seeded generator); also returns the pool size."""
    ix = torch.cat([c[0] for c in clients])
    has_angles = clients[0][1] is not None
    ang = torch.cat([c[1] for c in clients]) if has_angles else None
    pool = ix.numel()
    if fraction < 1:
        take = max(1, round(fraction * pool))
        rng = np.random.default_rng(derive_seed(seed, "oracle", "subset", float(fraction)))
        sel = torch.as_tensor(np.sort(rng.choice(pool, take, replace=False)), dtype=torch.long)
        ix = ix[sel]
        ang = None if ang is None else ang[sel.to(ang.device)]
    z = extract_features(model, data.x_train[ix].to(device), augmenter, batch_size, ang)
    return z, data.y_train[ix].to(device), pool


def classifier_state_unchanged(before: Mapping[str, torch.Tensor],
                               after: Mapping[str, torch.Tensor]) -> bool:
    """Whether every non-``head.`` tensor of two state dicts is identical."""
    keys = [k for k in before if not k.startswith("head.")]
    return set(before) == set(after) and all(torch.equal(before[k], after[k]) for k in keys)


def calibrate(run_dir: str | os.PathLike, out_dir: str | os.PathLike,
              settings: Mapping[str, Any] | None = None, log: Log = _stderr) -> dict[str, Any]:
    """Calibrate the classifier of a finished run (see the module docstring); writes
    ``out_dir/model.pt`` and ``out_dir/calibration.json`` and returns the latter's content."""
    began = time.perf_counter()
    s = resolve_settings(settings)
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    saved = open_run(run_dir, device=s["device"])
    model, data, run, device = saved.model, saved.data, saved.run, saved.device
    seed = int(run["seed"] if s["seed"] is None else s["seed"])
    s["seed"] = seed
    before_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    augmenter = saved.augmenter
    acc_before, loss_before = saved.evaluate(model)  # scored as in training (logit map)

    clients = _client_data(saved.partition(), device)
    fb = s["feature_batch_size"]
    result: dict[str, Any] = {"method": s["method"]}
    if s["method"] == "ccvr":
        feats = _client_features(model, data, clients, augmenter, fb, device)
        z, y, report = ccvr_virtual_features(feats, data.num_classes, s, seed, log)
        result.update(report)
        result["num_training_features"] = int(sum(f[0].shape[0] for f in feats))
        del feats
    else:
        z, y, pool = oracle_features(model, data, clients, augmenter, float(s["fraction"]),
                                     seed, fb, device)
        result["num_training_features"] = pool
        result["class_counts"] = torch.bincount(y, minlength=data.num_classes).tolist()
    result["num_retrain_samples"] = int(y.numel())

    losses = retrain_classifier(
        model, z, y, lr=float(s["lr"]), momentum=float(s["momentum"]),
        weight_decay=float(s["weight_decay"]), batch_size=int(s["batch_size"]),
        epochs=int(s["epochs"]), seed=derive_seed(seed, "calibrate", s["method"], "retrain"),
    )
    acc_after, loss_after = saved.evaluate(model)
    state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
    if not classifier_state_unchanged({k: v.cpu() for k, v in before_state.items()}, state):
        raise RuntimeError("calibration changed a tensor outside the classifier")

    final_path = run_dir / "final.json"
    run_last = json.loads(final_path.read_text())["last_acc"] if final_path.exists() else None
    provenance = saved.provenance
    result.update({
        "run_dir": str(run_dir),
        "run_id": provenance.get("run_id"),
        "acc_before": acc_before,
        "loss_before": loss_before,
        "acc_after": acc_after,
        "loss_after": loss_after,
        "gain": acc_after - acc_before,
        "run_last_acc": run_last,
        "retrain_losses": losses,
        "settings": s,
        "assumed": [k for k in ASSUMED if s[k] == DEFAULT_SETTINGS[k]],
        "plugins": [p["name"] for p in run["plugins"]],
        "device": str(device),
        "seconds": round(time.perf_counter() - began, 3),
    })
    atomic.torch_save(out_dir / "model.pt", state)
    atomic.write_json(out_dir / "calibration.json", _jsonable(result))
    log(f"{s['method']}: test accuracy {acc_before:.4f} → {acc_after:.4f} ({out_dir})")
    return result


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
