"""CCVR: exact statistics merge, PD fix, ReLU/Tukey, classifier-only calibration, the
clsnorm/clsprox plug-ins, and an end-to-end train → calibrate run."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
import torch.nn.functional as F

import fedhet.methods.ccvr.plugins as plugins_mod
from fedhet import catalog
from fedhet.algorithms.base import ClientContext, StepOutput
from fedhet.catalog import method
from fedhet.config import ConfigError, resolve_run
from fedhet.engine.flat import FlatModel
from fedhet.models import build_model
from fedhet.plugins import PLUGINS
from fedhet.posthoc.ccvr import (
    calibrate,
    gaussian_factor,
    local_statistics,
    make_positive_definite,
    merge_statistics,
    sample_gaussian,
    transform_virtual,
    tukey_transform,
    virtual_counts,
)
from fedhet.posthoc.settings import resolve_settings

DATA = {"name": "digits10", "options": {"channels": 1, "size": 16, "train_per_class": 30,
                                        "test_per_class": 10}}


def quiet(_msg: str) -> None:
    pass


pytestmark = pytest.mark.usefixtures("one_thread")


# -- statistics --------------------------------------------------------------------------


def test_merged_statistics_equal_pooled_statistics():
    gen = torch.Generator().manual_seed(0)
    d = 6
    # class 0: 40 / 1 / 0 / 9 samples on four clients; class 1: 0 / 2 / 25 / 1
    sizes = {0: [40, 1, 0, 9], 1: [0, 2, 25, 1]}
    for c, counts in sizes.items():
        shift = torch.randn(d, generator=gen, dtype=torch.float64) * (3 + c)
        parts = [torch.randn(n, d, generator=gen, dtype=torch.float64) * (k + 1) + shift + k
                 for k, n in enumerate(counts)]
        local = [local_statistics(z) for z in parts]
        n, mu, cov = merge_statistics(local)
        pooled = torch.cat(parts)
        assert n == pooled.shape[0]
        torch.testing.assert_close(mu, pooled.mean(0), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(cov, torch.cov(pooled.T, correction=1), rtol=1e-10, atol=1e-10)
        # far from the origin the merge stays exact (no cancellation of μμᵀ terms)
        far = [p + 1e4 for p in parts]
        _, mu_far, cov_far = merge_statistics([local_statistics(z) for z in far])
        torch.testing.assert_close(mu_far, torch.cat(far).mean(0), rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(cov_far, torch.cov(torch.cat(far).T), rtol=1e-8, atol=1e-8)


def test_single_sample_and_empty_classes():
    z = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    n, mu, cov = local_statistics(z)
    assert n == 1 and torch.equal(mu, z[0]) and torch.equal(cov, torch.zeros(2, 2, dtype=torch.float64))
    empty = local_statistics(torch.zeros(0, 2))
    assert empty[0] == 0
    n, mu, cov = merge_statistics([empty, (n, mu, cov)])
    assert n == 1 and torch.equal(mu, z[0]) and not cov.any()  # N_c = 1: no spread known
    n, mu, cov = merge_statistics([empty, empty])
    assert n == 0 and not mu.any() and not cov.any()
    assert virtual_counts([5, 0, 1], 10, "uniform") == [10, 0, 10]
    assert virtual_counts([6, 0, 3, 3], 5, "proportional") == [10, 0, 5, 5]


def test_relu_and_tukey_transform():
    x = torch.tensor([-4.0, -0.25, 0.0, 0.25, 4.0, 9.0])
    assert torch.equal(transform_virtual(x, relu=True, tukey=False), F.relu(x))
    torch.testing.assert_close(transform_virtual(x), F.relu(x).sqrt())
    torch.testing.assert_close(transform_virtual(x, beta=0.25), F.relu(x).pow(0.25))
    assert torch.equal(transform_virtual(x, relu=False, tukey=False), x)
    pos = torch.tensor([0.5, 1.0, 2.0])
    torch.testing.assert_close(tukey_transform(pos, 0.5), pos.sqrt())
    torch.testing.assert_close(tukey_transform(pos, 1.0), pos)
    torch.testing.assert_close(tukey_transform(pos, 0.0), pos.log())
    assert torch.isfinite(transform_virtual(x, relu=False)).all()  # no NaN without ReLU


@pytest.mark.parametrize("method", ["clamp", "jitter"])
def test_pd_fix_makes_rank_deficient_covariance_sampleable(method):
    gen = torch.Generator().manual_seed(1)
    pts = torch.randn(3, 8, generator=gen, dtype=torch.float64)  # rank 2 in 8 dimensions
    _, mu, cov = local_statistics(pts)
    cov = cov - 1e-9 * torch.eye(8, dtype=torch.float64)  # and slightly indefinite
    with pytest.raises(RuntimeError):
        torch.linalg.cholesky(cov)
    fixed, info = make_positive_definite(cov, method, eps=1e-6)
    assert info["action"] == method and info["min_eig_before"] < 0
    assert info["min_eig_after"] >= 0.99 * info["floor"] > 0
    assert torch.linalg.eigvalsh(fixed).min() > 0
    torch.linalg.cholesky(fixed)
    torch.distributions.MultivariateNormal(mu, covariance_matrix=fixed)
    draws = sample_gaussian(mu, fixed, 500, seed=3)
    assert draws.shape == (500, 8) and torch.isfinite(draws).all()
    assert torch.equal(draws, sample_gaussian(mu, fixed, 500, seed=3))
    top = torch.linalg.eigvalsh(cov)[-2:]
    if method == "clamp":  # the well-determined directions are untouched
        torch.testing.assert_close(torch.linalg.eigvalsh(fixed)[-2:], top)
    ok, ok_info = make_positive_definite(fixed, method, eps=1e-6)
    assert ok_info["action"] == "none" and torch.equal(ok, 0.5 * (fixed + fixed.T))


def test_virtual_samples_follow_the_gaussian():
    mu = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    a = torch.tensor([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [0.0, -1.0, 0.3]], dtype=torch.float64)
    cov = a @ a.T
    torch.testing.assert_close(gaussian_factor(cov) @ gaussian_factor(cov).T, cov)
    z = sample_gaussian(mu, cov, 20000, seed=0)
    torch.testing.assert_close(z.mean(0), mu, atol=0.06, rtol=0)
    torch.testing.assert_close(torch.cov(z.T), cov, atol=0.12, rtol=0)


def test_settings_are_checked():
    assert resolve_settings({})["samples_per_class"] == 100
    with pytest.raises(ConfigError, match="unknown setting 'calibration.lrate'"):
        resolve_settings({"lrate": 0.1})
    with pytest.raises(ConfigError, match="method"):
        resolve_settings({"method": "magic"})
    with pytest.raises(ConfigError, match="fraction"):
        resolve_settings({"method": "oracle", "fraction": 0})


# -- plug-ins ----------------------------------------------------------------------------


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return build_model("cnn4", 5, 1, 16, 0.25)


def test_plugins_registered_with_defaults():
    assert "clsnorm" in PLUGINS and "clsprox" in PLUGINS
    assert method("clsnorm").defaults() == {"bias": False}
    run = resolve_run({"plugins": [{"name": "clsprox"}, {"name": "clsnorm"}]})
    assert run["plugins"][0]["params"]["mu"] == method("clsprox").defaults()["mu"]
    with pytest.raises(ConfigError):
        resolve_run({"plugins": [{"name": "clsnorm", "params": {"scale": 2}}]})


@pytest.mark.parametrize("bias", [False, True])
def test_clsnorm_logits_in_train_and_eval_with_flat_views(bias):
    flat = FlatModel(tiny_model())
    model = flat.module
    with torch.no_grad():
        model.head.bias.uniform_(-1, 1)
    weight_obj = model.head.weight
    keys = list(model.state_dict())
    plugins_mod.apply_clsnorm(model, bias=bias)
    plugins_mod.apply_clsnorm(model, bias=bias)  # idempotent
    assert model.head.weight is weight_obj and list(model.state_dict()) == keys
    assert model.head.weight.data_ptr() == flat.params[
        plugins_mod.head_segments(model)[0][1]:].data_ptr()  # still a view of the flat vector
    x = torch.randn(4, 1, 16, 16)
    for mode in (model.train, model.eval):
        mode()
        z = model.features(x)
        w = model.head.weight
        expect = z @ (w / w.norm(dim=1, keepdim=True)).T + (model.head.bias if bias else 0)
        torch.testing.assert_close(model(x), expect)
        torch.testing.assert_close(model.head(z), expect)
    # gradients reach the raw weight through the normalisation, via the flat gradient buffer
    flat.zero_grad()
    model(x).sum().backward()
    assert flat.grads.abs().sum() > 0
    if not bias:
        assert model.head.bias.grad.abs().sum() == 0


def test_clsnorm_prepares_a_loaded_model_once():
    model = tiny_model()
    fresh = tiny_model()
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(3, 1, 16, 16)
    plain = fresh.eval()(x)
    (clsnorm,) = catalog.plugins_of(resolve_run({"plugins": [{"name": "clsnorm"}]}))
    clsnorm.prepare_model(fresh)
    clsnorm.prepare_model(fresh)  # idempotent
    assert plugins_mod.has_clsnorm(fresh)
    w = fresh.head.weight
    torch.testing.assert_close(fresh(x), fresh.features(x) @ (w / w.norm(dim=1, keepdim=True)).T)
    assert not torch.allclose(fresh(x), plain)


def test_clsprox_gradient_is_mu_times_head_difference_only():
    mu = 0.3
    flat = FlatModel(tiny_model())
    global_params = flat.params.clone()
    with torch.no_grad():
        flat.params.add_(torch.randn_like(flat.params) * 0.1)  # the client moved away
    plugin = PLUGINS.get("clsprox")({"mu": mu})
    ctx = ClientContext(client=0, round=1, lr=0.1, params=flat.params, grads=flat.grads,
                        buffers=flat.buffers, global_params=global_params,
                        global_buffers=flat.buffers.clone(), num_samples=1, model=flat.module)
    x = torch.randn(2, 1, 16, 16)
    out = StepOutput(flat.module.features(x), flat.module(x), torch.zeros(2, dtype=torch.long),
                     torch.zeros(()))
    flat.zero_grad()
    loss = plugin.extra_loss(ctx, out)
    loss.backward()
    expect = torch.zeros_like(flat.params)
    for _, off, n, _ in plugins_mod.head_segments(flat.module):
        expect[off:off + n] = mu * (flat.params[off:off + n] - global_params[off:off + n])
    torch.testing.assert_close(flat.grads, expect)
    head = sum(n for *_, n, _ in plugins_mod.head_segments(flat.module))
    assert flat.grads[:-head].abs().sum() == 0 and flat.grads[-head:].abs().sum() > 0
    diff = (flat.params - global_params)[-head:]
    torch.testing.assert_close(loss.detach(), 0.5 * mu * diff.pow(2).sum())


# -- end to end --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from fedhet.train import train

    root = tmp_path_factory.mktemp("ccvr")
    run = {
        "seed": 2,
        "dataset": {**DATA, "root": str(root / "datasets")},
        "partition": {"scheme": "dirichlet", "num_clients": 4, "alpha": 0.1, "min_size": 2,
                      "root": str(root / "partitions")},
        "model": {"name": "simplecnn", "width": 0.25},
        "algorithm": {"name": "fedavg"},
        "plugins": [{"name": "clsnorm"}, {"name": "clsprox", "params": {"mu": 0.1}}],
        "training": {"rounds": 2, "clients_per_round": 4, "batch_size": 16, "lr": 0.05,
                     "momentum": 0.9},
        "runtime": {"device": "cpu"},
    }
    final = train(run, root / "run", log=quiet)
    return root, final


def non_head(state):
    return {k: v for k, v in state.items() if not k.startswith("head.")}


def test_calibrate_end_to_end(finished_run):
    root, final = finished_run
    out = root / "ccvr"
    result = calibrate(root / "run", out, {"samples_per_class": 40, "epochs": 3}, log=quiet)
    saved = json.loads((out / "calibration.json").read_text())
    for key in ("acc_before", "acc_after", "settings", "eigen_log", "pd_summary",
                "mean_sliced_wasserstein"):
        assert key in saved
    assert 0 <= saved["acc_before"] <= 1 and 0 <= saved["acc_after"] <= 1
    # the saved model evaluates as training did: clsnorm is re-applied from resolved.yaml
    assert saved["acc_before"] == pytest.approx(final["last_acc"])
    assert saved["plugins"] == ["clsnorm", "clsprox"]
    assert saved["num_retrain_samples"] == 40 * sum(c > 0 for c in saved["class_counts"])
    assert sum(saved["class_counts"]) == 300
    assert all(e["action"] in ("none", "clamp", "absent") for e in saved["eigen_log"])
    assert saved["settings"]["seed"] == 2 and "lr" in saved["assumed"]
    assert result["acc_after"] == saved["acc_after"]
    # only the classifier changed
    before = torch.load(root / "run" / "model.pt", weights_only=True)
    after = torch.load(out / "model.pt", weights_only=True)
    assert before.keys() == after.keys()
    for k, v in non_head(before).items():
        assert torch.equal(v, after[k]), k
    assert not torch.equal(before["head.weight"], after["head.weight"])
    # deterministic
    calibrate(root / "run", root / "again", {"samples_per_class": 40, "epochs": 3}, log=quiet)
    again = torch.load(root / "again" / "model.pt", weights_only=True)
    assert all(torch.equal(after[k], again[k]) for k in after)


def test_oracle_and_zero_virtual_features(finished_run):
    root, _ = finished_run
    res = calibrate(root / "run", root / "oracle", {"method": "oracle", "fraction": 0.1,
                                                    "epochs": 2}, log=quiet)
    assert res["num_retrain_samples"] == 30 and res["num_training_features"] == 300
    assert 0 <= res["acc_after"] <= 1
    after = torch.load(root / "oracle" / "model.pt", weights_only=True)
    before = torch.load(root / "run" / "model.pt", weights_only=True)
    assert all(torch.equal(v, after[k]) for k, v in non_head(before).items())
    none = calibrate(root / "run", root / "m0", {"samples_per_class": 0}, log=quiet)
    assert none["num_retrain_samples"] == 0 and none["acc_after"] == none["acc_before"]


def test_cli_subcommand(finished_run, capsys):
    from fedhet.posthoc.cli import add_subcommands

    root, _ = finished_run
    parser = argparse.ArgumentParser(prog="fedhet")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["calibrate", "--run", str(root / "run"), "--out",
                              str(root / "cli"), "--method", "oracle", "--settings",
                              '{"epochs": 1, "fraction": 0.5}', "--device", "cpu"])
    assert args.func(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["method"] == "oracle" and "acc_after" in printed
    assert (root / "cli" / "calibration.json").exists()
