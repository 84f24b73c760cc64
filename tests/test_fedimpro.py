"""FedImpro: the estimator (both readings), the server merge, noise, sampling, the loss and its
schedule against hand computations; gradient isolation and the documented BatchNorm coupling;
the off switch equals the base run bit for bit; composition, resume, saved statistics."""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from fedhet.algorithms.base import ClientContext, ClientUpdate
from fedhet.config import ConfigError, resolve_run
from fedhet.engine.flat import FlatModel
from fedhet.engine.seeding import generator
from fedhet.methods.fedimpro import plugin as plugin_module
from fedhet.methods.fedimpro.plugin import FedImpro, resolve_params
from fedhet.methods.fedimpro.statistics import (
    Estimate, Merger, add_noise, combine_losses, fake_labels, feature_weight, sample_features,
    update_estimate,
)
from fedhet.models import build_model
from fedhet.train import train
from run_outputs import run_outputs, without_step_time

pytestmark = pytest.mark.usefixtures("one_thread")
SQRT2 = math.sqrt(2)


def estimate(mu, sigma):
    mu = torch.tensor(mu, dtype=torch.float32)
    return Estimate(mu, torch.full_like(mu, sigma) if isinstance(sigma, float)
                    else torch.tensor(sigma, dtype=torch.float32))


# -- the client estimator (Eq. 6) ---------------------------------------------------------------

H = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 5.0]])
Y = torch.tensor([0, 0, 1])
SIZES = torch.tensor([4.0, 4.0])


def test_paper_estimator_weights_by_the_class_share_of_the_batch():
    est = estimate([[0, 0], [1, 1]], 0.1)
    update_estimate(est, H, Y, SIZES, "paper", None)
    # class 0: n=2 of 4 → w=0.5, batch mean [2, 3], std √2
    assert est.mu[0].tolist() == pytest.approx([1.0, 1.5])
    assert est.sigma[0].tolist() == pytest.approx([0.5 * 0.1 + 0.5 * SQRT2] * 2)
    # class 1: n=1 → w=0.25; its std is undefined, so σ stays
    assert est.mu[1].tolist() == pytest.approx([2.0, 2.0])
    assert est.sigma[1].tolist() == pytest.approx([0.1, 0.1])
    capped = estimate([[0, 0], [1, 1]], 0.1)
    update_estimate(capped, H, Y, SIZES, "paper", 0.1)
    assert capped.sigma.max().item() == pytest.approx(0.1)


def test_estimator_leaves_absent_classes_alone():
    est = estimate([[0, 0], [1, 1], [7, 7]], 0.3)
    update_estimate(est, H, Y, torch.tensor([4.0, 4.0, 4.0]), "paper", None)
    assert est.mu[2].tolist() == [7.0, 7.0] and est.sigma[2].tolist() == pytest.approx([0.3, 0.3])


def test_code_estimator_weight_comes_from_the_feature_dimension():
    est = estimate([[0, 0], [1, 1]], 0.1)
    update_estimate(est, H, Y, SIZES, "code", None)  # D=2 → w = 2/5000
    assert est.mu[0].tolist() == pytest.approx([0.0004 * 2, 0.0004 * 3])
    wide = torch.randn(6, 32768)
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    est = Estimate(torch.zeros(2, 32768), torch.zeros(2, 32768))
    update_estimate(est, wide, labels, SIZES, "code", None)  # w = 1: the batch mean exactly
    assert torch.allclose(est.mu[0], wide[:3].mean(0), atol=1e-6)
    mid = torch.ones(3, 512)
    est = Estimate(torch.zeros(2, 512), torch.zeros(2, 512))
    update_estimate(est, mid, torch.tensor([0, 0, 1]), SIZES, "code", None)
    assert est.mu[0, 0].item() == pytest.approx(512 / 5000)


def test_a_constant_estimator_weight():
    est = estimate([[0, 0], [1, 1]], 0.1)
    update_estimate(est, H, Y, SIZES, 0.5, None)
    assert est.mu[1].tolist() == pytest.approx([3.0, 3.0])


# -- the server merge (Eq. 7) and noise ---------------------------------------------------------


def test_uniform_merge_averages_means_and_stds():
    merger = Merger("uniform")
    merger.add(estimate([[1, 1.5]], 0.2), 10)
    merger.add(estimate([[3, 0.5]], 0.4), 30)
    out = merger.result(estimate([[9, 9]], 9.0))
    assert out.mu.tolist() == [[2.0, 1.0]] and out.sigma[0].tolist() == pytest.approx([0.3, 0.3])


def test_sample_weighted_merge():
    merger = Merger("samples")
    merger.add(estimate([[1.0]], 0.2), 10)
    merger.add(estimate([[3.0]], 0.4), 30)
    out = merger.result(estimate([[0.0]], 0.0))
    assert out.mu.item() == pytest.approx(2.5) and out.sigma.item() == pytest.approx(0.35)


def test_pooled_merge_is_the_variance_of_the_pooled_features():
    a, b = torch.tensor([0.0, 2.0]), torch.tensor([2.0, 6.0])
    merger = Merger("pooled")
    for feats in (a, b):
        merger.add(Estimate(feats.mean().view(1, 1), feats.std(correction=0).view(1, 1)), 2,
                   torch.tensor([2]))
    out = merger.result(estimate([[0.0]], 0.0))
    assert out.mu.item() == pytest.approx(2.5)
    assert out.sigma.item() ** 2 == pytest.approx(torch.cat([a, b]).var(correction=0).item())
    assert out.sigma.item() ** 2 == pytest.approx(4.75)
    merger = Merger("pooled")  # a class no client holds keeps its previous estimate
    merger.add(estimate([[1.0], [5.0]], 0.5), 3, torch.tensor([3, 0]))
    out = merger.result(estimate([[0.0], [8.0]], 0.7))
    assert out.mu[1].item() == 8.0 and out.sigma[1].item() == pytest.approx(0.7)


def test_noise_has_the_asked_spread_and_zero_noise_draws_nothing():
    gens = [torch.Generator().manual_seed(k) for k in range(4)]
    merger = Merger("uniform")
    for gen in gens:
        merger.add(add_noise(Estimate(torch.zeros(1, 200_000), torch.zeros(1, 200_000)), 0.1,
                             gen), 1)
    out = merger.result(Estimate(torch.zeros(1, 1), torch.zeros(1, 1)))
    assert out.mu.std().item() == pytest.approx(0.05, rel=0.01)  # 0.1 / √4
    assert out.sigma.min().item() >= 0.0  # clamped after the noise
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state()
    est = estimate([[1.0]], 0.2)
    assert add_noise(est, 0.0, gen) is est and torch.equal(gen.get_state(), state)


# -- sampling, loss and schedule (Eq. 5) --------------------------------------------------------


def test_sampled_features_have_cycling_labels_and_the_estimated_moments():
    labels = fake_labels(3, 2, torch.device("cpu"))  # B=5, C=2 → B//C+1 = 3 per class
    assert labels.tolist() == [0, 1, 0, 1, 0, 1]
    est = Estimate(torch.tensor([[0.0] * 4, [5.0] * 4]), torch.tensor([[2.0] * 4, [0.0] * 4]))
    feats = sample_features(est, labels, (1, 2, 2), torch.Generator().manual_seed(0))
    assert feats.shape == (6, 1, 2, 2) and not feats.requires_grad
    assert torch.equal(feats[labels == 1], torch.full((3, 1, 2, 2), 5.0))
    many = sample_features(est, torch.zeros(20_000, dtype=torch.long), (4,),
                           torch.Generator().manual_seed(1))
    assert many.mean().item() == pytest.approx(0.0, abs=0.05)
    assert many.std().item() == pytest.approx(2.0, rel=0.02)


@pytest.mark.parametrize("schedule, elapsed, epochs_weight", [
    ("gradual2half", 0, 0.0), ("gradual2half", 250, 0.5), ("gradual2half", 999, 1.998),
    ("gradual2half", 500, 1.0), ("gradual", 999, 1.0), ("gradualhalfhalf", 250, 0.25),
    ("gradualhalfhalf", 999, 0.5), ("constant", 7, 0.3),
])
def test_feature_weight_schedules(schedule, elapsed, epochs_weight):
    # round r with E local epochs starts after (r − 1)·E epochs: round 251 (E=1) → 0.5,
    # round 1000 → 1.998, round 101 with E=5 → 1.0
    assert feature_weight(schedule, elapsed, 500, None, 0.3) == pytest.approx(epochs_weight)
    assert feature_weight("gradual2half", 999, 500, 1.5, 0.3) == 1.5  # a cap


def test_combined_losses_follow_each_schedule():
    real, fake = torch.tensor(2.0), torch.tensor(4.0)
    assert combine_losses("gradual2half", real, fake, 0.5, 8, 10).item() == 4.0
    assert combine_losses("gradual", real, fake, 0.25, 8, 10).item() == 2.5
    logits = torch.randn(18, 3, generator=torch.Generator().manual_seed(0))
    y = torch.arange(18) % 3
    joint = F.cross_entropy(logits, y)
    split = combine_losses("concat", F.cross_entropy(logits[:8], y[:8]),
                           F.cross_entropy(logits[8:], y[8:]), 0.0, 8, 10)
    assert split.item() == pytest.approx(joint.item(), rel=1e-6)


# -- the plug-in on a model ---------------------------------------------------------------------


def fake_server(model="convnet", params=None, batch=6, classes=10):
    """What FedImpro.setup reads from a federation."""
    run = resolve_run({"dataset": {"name": "digits10"}, "training": {"batch_size": batch},
                       "plugins": [{"name": "fedimpro", "params": params or {}}]})
    torch.manual_seed(0)
    module = build_model(model, classes, 3, 16, 0.25)
    labels = torch.arange(100) % classes
    return SimpleNamespace(
        run=run, seed=3, device=torch.device("cpu"), num_classes=classes,
        global_model=FlatModel(module), y_train=labels,
        client_indices=[torch.arange(0, 50), torch.arange(50, 100)], channels_last=False,
        autocast=nullcontext(),
    ), run["plugins"][0]["params"]


def client_step(server, params, x, y, round=1):
    plugin = FedImpro(params)
    plugin.setup(server)
    plugin.round_begin(round, [0])
    model = server.global_model.module
    ctx = SimpleNamespace(model=model, round=round, client=0)
    plugin.client_begin(ctx)
    return plugin, model, plugin.forward(ctx, x, y)


def test_the_plugin_loss_is_real_ce_plus_weighted_fake_ce():
    server, params = fake_server(params={"weight_ramp_epochs": 2, "forward": "separate"})
    x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    plugin, model, out = client_step(server, params, x, y, round=2)  # w = (2−1)·1/2
    assert plugin.weight == 0.5 and plugin.split == "block2"
    assert len(plugin.labels) == 10 * (6 // 10 + 1)
    fake = sample_features(plugin.shared, plugin.labels, plugin.shape,
                           generator(torch.device("cpu"), 3, "fedimpro", 2, 0))
    expected = (F.cross_entropy(model(x), y)
                + 0.5 * F.cross_entropy(model.forward_from(fake, "block2"), plugin.labels))
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert out.logits.shape == (6, 10) and out.features.shape[0] == 6


@pytest.mark.parametrize("forward", ["joint", "separate"])
def test_sampled_features_send_no_gradient_below_the_split(forward):
    # the demo ConvNet normalises per sample (no batch coupling): isolation holds either way
    server, params = fake_server(params={"forward": forward, "schedule": "constant",
                                         "weight": 1.0})
    x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    plugin, model, out = client_step(server, params, x, y)
    assert out.features.shape[0] == out.logits.shape[0] == 6  # the real batch only (MOON reads it)
    model.zero_grad()
    real = F.cross_entropy(out.logits, y)
    (out.loss - real).backward()  # the sampled features' term alone
    lower = [p for name, p in model.named_parameters() if name.startswith(("blocks.0", "blocks.1"))]
    assert lower and all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in lower)
    assert float(model.head.weight.grad.abs().sum()) > 0


def test_joint_forward_through_batchnorm_couples_the_lower_network():
    """Documented: with one pass through a BatchNorm θ, the batch statistics carry the sampled
    features' loss into φ (App. B says φ gets no such gradient); `separate` removes it."""
    grads = {}
    for forward in ("joint", "separate"):
        server, params = fake_server("resnet18", {"forward": forward, "schedule": "constant"})
        x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])
        plugin, model, out = client_step(server, params, x, y)
        model.zero_grad()
        (out.loss - F.cross_entropy(out.logits, y)).backward()
        assert plugin.split == "layer2"
        grads[forward] = sum(float(p.grad.abs().sum()) for p in model.layer1.parameters()
                             if p.grad is not None)
    assert grads["joint"] > 0 and grads["separate"] == 0


def test_estimates_are_merged_and_broadcast_at_the_round_end():
    server, params = fake_server(params={"std_cap": None})
    x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    plugin, model, out = client_step(server, params, x, y)
    before = plugin.shared.clone()
    local = plugin.local.clone()
    assert not torch.equal(local.mu[:3], before.mu[:3]) and torch.equal(local.mu[3:], before.mu[3:])
    plugin.client_end(SimpleNamespace(round=1, client=0),
                      ClientUpdate(0, torch.zeros(1), torch.zeros(1), 6, 1))
    assert torch.equal(plugin.shared.mu, before.mu)  # not before the round ends
    plugin.round_end(1, [])
    assert torch.equal(plugin.shared.mu, local.mu)  # one client, uniform merge
    state = plugin.state_dict()
    assert set(state) == {"mu", "sigma"}
    files = plugin.files()["shared_statistics.pt"]
    assert files["split"] == "block2" and files["mu"].shape == (10, 32 * 4 * 4) == (10, 512)


@pytest.mark.parametrize("source", ["global", "local"])
def test_global_sampling_ignores_local_updates_and_local_follows_them(source, monkeypatch):
    server, params = fake_server(params={"sample_from": source})
    x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    plugin, model, _ = client_step(server, params, x, y)  # one step updated the local estimate
    seen = []
    sample = plugin_module.sample_features
    monkeypatch.setattr(plugin_module, "sample_features",
                        lambda est, *args: seen.append(est.mu.clone()) or sample(est, *args))
    updated = plugin.local.mu.clone()
    assert not torch.equal(updated, plugin.shared.mu)
    plugin.forward(SimpleNamespace(model=model, round=1, client=0), x, y)
    # the second step samples from the received estimate, or from the one the first step updated
    assert torch.equal(seen[0], plugin.shared.mu if source == "global" else updated)


def test_split_by_position_and_the_estimate_size():
    for model, point, name, dim in (("resnet18", 2, "layer2", 128 * 16 * 16),
                                    ("convnet", 2, "block2", 32 * 4 * 4),
                                    ("convnet", "penultimate", "penultimate", 128)):
        run = resolve_run({"dataset": {"name": "digits10"},
                           "plugins": [{"name": "fedimpro", "params": {"split": point}}]})
        size = 32 if model == "resnet18" else 16
        width = 1.0 if model == "resnet18" else 0.25
        server = SimpleNamespace(
            run=run, seed=0, device=torch.device("cpu"), num_classes=10,
            global_model=FlatModel(build_model(model, 10, 3, size, width)),
            y_train=torch.arange(20) % 10)
        plugin = FedImpro(run["plugins"][0]["params"])
        plugin.setup(server)
        assert plugin.split == name and plugin.shared.mu.shape == (10, dim)
    server, params = fake_server(params={"split": 0})
    with pytest.raises(ValueError, match="block1, block2, block3, penultimate"):
        FedImpro(params).setup(server)


def test_params_are_checked():
    assert resolve_params({})["split"] == 2
    with pytest.raises(ConfigError, match="estimator_weight"):
        resolve_params({"estimator_weight": "papr"})
    with pytest.raises(ConfigError, match="estimator_weight"):
        resolve_params({"estimator_weight": 1.5})
    with pytest.raises(ConfigError, match="schedule"):
        resolve_params({"schedule": "linear"})
    with pytest.raises(ConfigError, match="split"):
        resolve_params({"split": [2]})
    server, params = fake_server(params={"split": 6})
    with pytest.raises(ValueError, match="out of range"):
        FedImpro(params).setup(server)


# -- whole runs ---------------------------------------------------------------------------------

DATA = {"name": "digits10", "options": {"channels": 3, "size": 16, "train_per_class": 30,
                                        "test_per_class": 10}}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("fedimpro")
    return {"data": str(base / "datasets"), "parts": str(base / "partitions")}


def tiny_run(roots, algorithm="fedavg", plugins=(), rounds=2, model="convnet"):
    return {
        "seed": 5,
        "dataset": {**DATA, "root": roots["data"]},
        "partition": {"scheme": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 5,
                      "root": roots["parts"]},
        "model": {"name": model, "width": 0.25},
        "algorithm": {"name": algorithm},
        "plugins": list(plugins),
        "training": {"rounds": rounds, "clients_per_round": 2, "batch_size": 16, "lr": 0.05,
                     "momentum": 0.0, "weight_decay": 1e-4},
        "runtime": {"device": "cpu"},
    }


def fedimpro(**params):
    return {"name": "fedimpro", "params": {"weight_ramp_epochs": 1, **params}}


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_no_sampled_features_equals_the_base_run_bit_for_bit(roots, tmp_path, algorithm):
    train(tiny_run(roots, algorithm), tmp_path / "base", log=lambda m: None)
    train(tiny_run(roots, algorithm, [fedimpro(fake_per_class=0)]), tmp_path / "off",
          log=lambda m: None)
    base_rows, base_model = run_outputs(tmp_path / "base")
    off_rows, off_model = run_outputs(tmp_path / "off")
    assert base_rows == off_rows
    assert all(torch.equal(base_model[k], off_model[k]) for k in base_model)


def test_fedimpro_changes_training_and_counts_its_statistics_in_the_bytes(roots, tmp_path):
    train(tiny_run(roots), tmp_path / "base", log=lambda m: None)
    final = train(tiny_run(roots, plugins=[fedimpro()]), tmp_path / "on", log=lambda m: None)
    base_rows, base_model = run_outputs(tmp_path / "base")
    rows, model = run_outputs(tmp_path / "on")
    assert not all(torch.equal(base_model[k], model[k]) for k in model)
    stats = 2 * 10 * 512 * 4  # μ and σ, 10 classes × 512 floats, each way, per client
    assert rows[-1]["bytes_down"] - base_rows[-1]["bytes_down"] == 2 * stats
    assert rows[-1]["bytes_up"] - base_rows[-1]["bytes_up"] == 2 * stats
    assert final["files"] == ["plugins/fedimpro/shared_statistics.pt"]
    saved = torch.load(tmp_path / "on" / "plugins/fedimpro/shared_statistics.pt", weights_only=True)
    assert saved["mu"].shape == (10, 512) and float(saved["sigma"].max()) <= 0.1 + 1e-7


@pytest.mark.parametrize("algorithm", ["fedprox", "moon"])
def test_fedimpro_composes_with_base_algorithms(roots, tmp_path, algorithm):
    final = train(tiny_run(roots, algorithm, [fedimpro()]), tmp_path / algorithm,
                  log=lambda m: None)
    assert final["status"] == "completed"


def test_fedprox_adds_its_proximal_gradient_to_fedimpros():
    server, params = fake_server(params={"schedule": "constant"})
    from fedhet.catalog import implementation
    prox = implementation("fedprox")({"mu": 0.1}, 2, 0.0)
    flat = server.global_model
    reference = flat.params.clone()
    with torch.no_grad():
        flat.params.add_(0.01)
    x, y = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    plugin, model, out = client_step(server, params, x, y)
    flat.zero_grad()
    out.loss.backward()
    alone = flat.grads.clone()
    ctx = SimpleNamespace(params=flat.params, grads=flat.grads, global_params=reference)
    prox.correct_gradient(ctx)
    assert torch.allclose(flat.grads, alone + 0.1 * (flat.params - reference), atol=1e-6)


def test_resumed_fedimpro_run_equals_the_uninterrupted_one(roots, tmp_path):
    run = tiny_run(roots, plugins=[fedimpro(noise=0.01)], rounds=4)
    whole = train(run, tmp_path / "whole", tmp_path / "ckpt_whole", log=lambda m: None)
    stopped = train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None,
                    stop_after=2)
    assert stopped["status"] == "stopped"
    resumed = train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None)
    assert without_step_time(resumed) == without_step_time(whole)
    assert run_outputs(tmp_path / "whole")[0] == run_outputs(tmp_path / "resumed")[0]
    a, b = (torch.load(tmp_path / d / "plugins/fedimpro/shared_statistics.pt", weights_only=True)
            for d in ("whole", "resumed"))
    assert torch.equal(a["mu"], b["mu"]) and torch.equal(a["sigma"], b["sigma"])


# -- model inversion (Figs. 11-13) -------------------------------------------------------------


def test_inversion_lowers_the_feature_error_and_is_seeded():
    from fedhet.analysis.inversion import invert, one_per_class

    torch.manual_seed(0)
    model = build_model("convnet", 10, 1, 16, 0.25).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    target = model.forward_to(torch.randn(3, 1, 16, 16), "block1")
    before = [p.clone() for p in model.parameters()]
    x, history = invert(lambda z: model.forward_to(z, "block1"), target, (1, 16, 16), steps=60,
                        lr=0.05, seed=4)
    assert x.shape == (3, 1, 16, 16) and len(history) == 60
    assert history[-1] < 0.5 * history[0]
    again, _ = invert(lambda z: model.forward_to(z, "block1"), target, (1, 16, 16), steps=60,
                      lr=0.05, seed=4)
    assert torch.equal(x, again)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert one_per_class(torch.tensor([2, 0, 2, 1, 0]), 3).tolist() == [1, 3, 0]


def test_invert_command_draws_originals_features_and_class_means(roots, tmp_path):
    from fedhet.cli import main

    train(tiny_run(roots, plugins=[fedimpro()]), tmp_path / "run", log=lambda m: None)
    out = tmp_path / "inv.png"
    code = main(["invert", "--run", str(tmp_path / "run"), "--statistics",
                 str(tmp_path / "run/plugins/fedimpro/shared_statistics.pt"), "--out", str(out),
                 "--errors", str(tmp_path / "errors.json"), "--steps", "20", "--classes", "4"])
    assert code == 0 and out.stat().st_size > 0
    errors = json.loads((tmp_path / "errors.json").read_text())
    assert set(errors) == {"feature", "class_mean"} and all(v >= 0 for v in errors.values())
