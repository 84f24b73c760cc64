"""Analyses for CCVR's figures: linear CKA, layer outputs, classifier norms, sliced
Wasserstein distances, t-SNE frames, and the run-level helpers on a tiny finished run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import fedhet.methods.ccvr.plugins  # noqa: F401  (registers clsnorm / clsprox)
from fedhet.analysis.norms import (
    classifier_norms_frame,
    label_distribution_frame,
    norm_matrix,
)
from fedhet.analysis.similarity import (
    CLASSIFIER,
    cka,
    cka_frame,
    cka_matrix,
    client_cka,
    layer_outputs,
    mean_cka_per_layer,
)
from fedhet.analysis.tsne import calibration_tsne, tsne_frame
from fedhet.analysis.wasserstein import (
    mean_sliced_wasserstein,
    sliced_wasserstein,
    sliced_wasserstein_gaussians,
)
from fedhet.models import build_model

DATA = {"name": "digits10", "options": {"channels": 1, "size": 16, "train_per_class": 30,
                                        "test_per_class": 10}}


pytestmark = pytest.mark.usefixtures("one_thread")


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- CKA ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n,d", [(200, 10), (20, 50)])  # feature-space and Gram-space paths
def test_cka_identity_invariances_and_unrelated(n, d):
    x = randn(n, d, seed=1)
    assert cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q, _ = torch.linalg.qr(randn(d, d, seed=2))
    assert cka(x, x @ q) == pytest.approx(1.0, abs=1e-10)
    assert cka(x, 3.7 * x + 5.0) == pytest.approx(1.0, abs=1e-10)  # scale and shift
    assert cka(x, x @ q * 0.01) == pytest.approx(1.0, abs=1e-10)
    related = cka(x, x + 0.5 * randn(n, d, seed=4))
    unrelated = cka(x, randn(n, d, seed=3))
    assert unrelated < related < 1.0
    assert unrelated < 0.8
    assert cka(x, torch.ones(n, 4)) == 0.0
    assert cka(x, randn(n, 7, seed=5)) == pytest.approx(cka(randn(n, 7, seed=5), x))


def test_cka_matrix_and_frames():
    x = randn(30, 5, seed=0)
    reps = [x, x @ torch.linalg.qr(randn(5, 5, seed=1))[0], randn(30, 9, seed=2)]
    mat = cka_matrix(reps)
    assert mat.shape == (3, 3) and np.allclose(mat, mat.T) and np.allclose(np.diag(mat), 1)
    assert mat[0, 1] == pytest.approx(1.0)
    assert mat[0, 2] == pytest.approx(cka(reps[0], reps[2]))
    frame = cka_frame({0: {"a": reps[0], "b": reps[2]}, 1: {"a": reps[1], "b": reps[0]},
                       2: {"a": reps[2], "b": reps[1]}})
    assert len(frame) == 2 * 9
    means = mean_cka_per_layer(frame)
    assert list(means["layer"]) == ["a", "b"] and (means["pairs"] == 3).all()
    assert means["mean_cka"].iloc[0] == pytest.approx(np.mean([mat[0, 1], mat[0, 2], mat[1, 2]]))


def test_layer_outputs_use_split_points_and_logits():
    torch.manual_seed(0)
    model = build_model("cnn4", 4, 1, 16, 0.25).eval()
    x = torch.randn(10, 1, 16, 16)
    outs = layer_outputs(model, x, batch_size=4)
    assert list(outs) == [*model.split_points, CLASSIFIER]
    assert outs["block1"].shape == (10, int(np.prod(model.split_shapes["block1"])))
    torch.testing.assert_close(outs[CLASSIFIER], model(x))
    torch.testing.assert_close(outs["penultimate"], model.features(x))
    with pytest.raises(ValueError, match="unknown layer"):
        layer_outputs(model, x, ["nope"])


# -- sliced Wasserstein ------------------------------------------------------------------


def test_sliced_wasserstein_between_gaussians():
    mu, cov = randn(4, seed=0), torch.eye(4, dtype=torch.float64) * 2
    assert sliced_wasserstein_gaussians(mu, cov, mu, cov) == 0.0
    # one dimension: the exact 2-Wasserstein distance between N(0, 1) and N(3, 4)
    one = sliced_wasserstein_gaussians(torch.zeros(1), torch.ones(1, 1), torch.tensor([3.0]),
                                       torch.tensor([[4.0]]), num_projections=5)
    assert one == pytest.approx(math.sqrt(9 + 1))
    # a shift a between isotropic Gaussians in d dimensions: SW₂² = ‖a‖² / d
    d, a = 8, torch.full((8,), 2.0, dtype=torch.float64)
    eye = torch.eye(d, dtype=torch.float64)
    sw = sliced_wasserstein_gaussians(torch.zeros(d, dtype=torch.float64), eye, a, eye,
                                      num_projections=4000, seed=1)
    assert sw == pytest.approx(math.sqrt(a.pow(2).sum().item() / d), rel=0.05)
    # the mean over pairs is the mean of the pairwise distances, seeded
    means = [torch.zeros(d, dtype=torch.float64), a, -a]
    covs = [eye, 2 * eye, eye]
    pairs = [sliced_wasserstein_gaussians(means[i], covs[i], means[j], covs[j], 50, seed=3)
             for i, j in [(0, 1), (0, 2), (1, 2)]]
    assert mean_sliced_wasserstein(means, covs, 50, seed=3) == pytest.approx(np.mean(pairs))


def test_sample_sliced_wasserstein_matches_gaussian_form():
    d = 3
    x = randn(4000, d, seed=0)
    y = randn(3000, d, seed=1) * 2 + 1
    eye = torch.eye(d, dtype=torch.float64)
    exact = sliced_wasserstein_gaussians(torch.zeros(d, dtype=torch.float64), eye,
                                         torch.ones(d, dtype=torch.float64), 4 * eye, 300, seed=2)
    assert sliced_wasserstein(x, y, 300, seed=2) == pytest.approx(exact, rel=0.05)
    assert sliced_wasserstein(x, x, 50) == 0.0


# -- norms and t-SNE frames --------------------------------------------------------------


def test_classifier_norms_frame(tmp_path):
    rows = [{"round": 1, "global": [1.0, 2.0], "clients": {"0": [0.5, 0.6], "3": [0.7, 0.8]}},
            {"round": 2, "global": [1.5, 2.5], "clients": {"1": [0.1, 0.2]}}]
    path = tmp_path / "classifier_norms.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = classifier_norms_frame(tmp_path)
    assert list(frame.columns) == ["round", "model", "client", "class", "norm"]
    assert len(frame) == 2 * 3 + 2 * 2
    assert frame[frame["model"] == "global"]["client"].isna().all()
    one = frame[(frame["round"] == 1) & (frame["client"] == 3) & (frame["class"] == 1)]
    assert one["norm"].item() == 0.8
    assert len(classifier_norms_frame(path, rounds=[2])) == 4
    assert norm_matrix(frame, 1).shape == (2, 2)


def test_tsne_frame_is_seeded_and_subsampled():
    feats = randn(60, 5, seed=0).float()
    labels = {"truth": np.arange(60) % 3, "pred": torch.arange(60) % 2}
    a = tsne_frame(feats, labels, seed=0, max_points=40, max_iter=250)
    b = tsne_frame(feats, labels, seed=0, max_points=40, max_iter=250)
    assert list(a.columns) == ["x", "y", "index", "truth", "pred"] and len(a) == 40
    assert a.equals(b)
    assert (a["truth"] == a["index"] % 3).all()


# -- on a finished run -------------------------------------------------------------------


def test_run_level_analyses(tmp_path):
    from fedhet.posthoc.ccvr import calibrate
    from fedhet.train import train

    run = {
        "seed": 5,
        "dataset": {**DATA, "root": str(tmp_path / "datasets")},
        "partition": {"scheme": "dirichlet", "num_clients": 3, "alpha": 0.5, "min_size": 2,
                      "root": str(tmp_path / "partitions")},
        "model": {"name": "cnn4", "width": 0.25},
        "plugins": [{"name": "clsnorm"}],
        "training": {"rounds": 2, "clients_per_round": 3, "batch_size": 16, "lr": 0.05},
        "runtime": {"device": "cpu", "save_client_models": [2]},
    }
    train(run, tmp_path / "run", log=lambda m: None)
    frame = client_cka(tmp_path / "run", num_samples=50, points=["block1", "penultimate",
                                                                   CLASSIFIER], device="cpu")
    assert set(frame["layer"]) == {"block1", "penultimate", CLASSIFIER}
    assert len(frame) == 3 * 9
    diag = frame[frame["client_a"] == frame["client_b"]]["cka"]
    assert np.allclose(diag, 1.0)
    assert frame["cka"].between(0, 1 + 1e-9).all()
    assert len(mean_cka_per_layer(frame)) == 3

    norms = classifier_norms_frame(tmp_path / "run")
    assert set(norms["round"]) == {1, 2} and norms["norm"].gt(0).all()
    labels = label_distribution_frame(tmp_path / "run")
    assert labels["count"].sum() == 300 and set(labels["client"]) == {0, 1, 2}

    calibrate(tmp_path / "run", tmp_path / "cal", {"samples_per_class": 20, "epochs": 1,
                                                   "device": "cpu"}, log=lambda m: None)
    points = calibration_tsne(tmp_path / "run", tmp_path / "cal", max_points=60, device="cpu")
    assert len(points) == 60
    assert {"x", "y", "truth", "pred_before", "pred_after"} <= set(points.columns)
