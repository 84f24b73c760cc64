"""FedBR's comparison plug-ins — Mixup, FedMix, FedNTD, FedDecorr, DANN — each against its
equation by hand; their off switches equal the FedAvg run; every one trains a finite run and
resumes bit for bit."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedhet.algorithms.base import StepOutput, as_soft
from fedhet.catalog import plugins_of
from fedhet.config import resolve_run
from fedhet.engine.seeding import derive_seed
from fedhet.methods.dann.plugin import reverse_gradient
from fedhet.methods.feddecorr.plugin import decorrelation_fedbr, decorrelation_official
from fedhet.methods.fedmix.plugin import fedmix_loss
from fedhet.methods.fedntd.plugin import ntd_loss
from fedhet.saved import open_run
from fedhet.train import train
from run_outputs import run_outputs
from tiny_runs import federation_of, tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


class Toy(nn.Module):
    """features → head, smooth (tanh) so second derivatives are not trivially zero."""

    def __init__(self, dim: int = 12, classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Linear(dim, 6)
        self.head = nn.Linear(6, classes)
        self.feature_dim = 6

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.body(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def plugin(name: str, server=None, **params):
    """The registered plug-in `name` with its declared defaults (and `params`), set up on
    `server` when given."""
    run = resolve_run({"plugins": [{"name": name, "params": params}],
                       "partition": {"num_clients": 4},
                       "training": {"clients_per_round": 2}})
    (p,) = plugins_of(run)
    if server is not None:
        p.setup(server)
    return p


# -- Mixup -------------------------------------------------------------------------------------

MIX_SERVER = SimpleNamespace(seed=3, device=CPU, num_classes=5)


def mix_ctx(round=2, client=1, steps=0):
    return SimpleNamespace(round=round, client=client, steps=steps)


def test_mixup_is_a_convex_combination_of_two_rows_with_soft_targets_summing_to_one():
    mixup = plugin("mixup", MIX_SERVER)
    x, y = torch.randn(9, 1, 4, 4), torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3])
    ctx = mix_ctx()
    lam = float(np.random.default_rng(derive_seed(3, "mixup", 2, 1, 0)).beta(0.2, 0.2))
    assert 0 <= lam <= 1
    x_mix, y_mix = mixup.transform_batch(ctx, x, y)
    assert y_mix.shape == (9, 5) and y_mix.dtype == torch.float32
    torch.testing.assert_close(y_mix.sum(1), torch.ones(9))
    one_hot = F.one_hot(y, 5).float()
    for i in range(9):  # row i mixes x_i with λ and exactly one partner row with 1 − λ
        partners = [j for j in range(9)
                    if torch.allclose(x_mix[i], lam * x[i] + (1 - lam) * x[j], atol=1e-6)]
        assert partners, i
        torch.testing.assert_close(y_mix[i], lam * one_hot[i] + (1 - lam) * one_hot[partners[0]])
    # soft targets from an earlier plug-in are mixed as they are
    soft = F.softmax(torch.randn(9, 5), 1)
    _, soft_mix = mixup.transform_batch(ctx, x, soft)
    torch.testing.assert_close(soft_mix.sum(1), torch.ones(9))
    assert not torch.allclose(soft_mix, as_soft(y, 5))


def test_mixup_draws_are_keyed_by_round_client_and_step_and_leave_the_global_rng_alone():
    mixup = plugin("mixup", MIX_SERVER)
    x, y = torch.randn(8, 1, 4, 4), torch.arange(8) % 5
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    first = mixup.transform_batch(mix_ctx(), x, y)
    again = mixup.transform_batch(mix_ctx(), x, y)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    for other in (mix_ctx(steps=1), mix_ctx(client=2), mix_ctx(round=3)):
        assert not torch.equal(first[0], mixup.transform_batch(other, x, y)[0])
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(np.random.get_state(), numpy_state))


def test_mixup_lambda_follows_beta_alpha_alpha():
    mixup = plugin("mixup", MIX_SERVER)
    lams = np.array([mixup.draw(mix_ctx(steps=s), 2)[0] for s in range(2000)])
    assert abs(lams.mean() - 0.5) < 0.03
    # Beta(0.2, 0.2) is U-shaped: most mass within 0.1 of 0 or 1 (≈ 0.66; uniform: 0.2)
    assert 0.6 < np.mean((lams < 0.1) | (lams > 0.9)) < 0.72
    wide = plugin("mixup", MIX_SERVER, alpha=50.0)
    assert np.std([wide.draw(mix_ctx(steps=s), 2)[0] for s in range(500)]) < 0.08


# -- FedMix ------------------------------------------------------------------------------------


def test_fedmix_loss_is_the_first_order_expansion_by_forward_mode():
    """Loss and parameter gradients against an independent computation: the Taylor term as a
    forward-mode directional derivative (jvp) of (1−λ)·CE along x̄, differentiated by func."""
    torch.manual_seed(0)
    model = Toy().double()
    b, lam = 5, 0.3
    x, x_bar = torch.randn(b, 12, dtype=torch.float64), torch.randn(b, 12, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3, 1])
    y_bar = F.softmax(torch.randn(b, 4, dtype=torch.float64), 1)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def objective(p):
        def own(x_in):
            return (1 - lam) * F.cross_entropy(torch.func.functional_call(model, p, (x_in,)), y)

        x_in = (1 - lam) * x
        value, along = torch.func.jvp(own, (x_in,), (x_bar,))
        logits = torch.func.functional_call(model, p, (x_in,))
        mean = -(y_bar * F.log_softmax(logits, 1)).sum(1).mean()
        return value + lam * mean + lam * along / b

    loss, features, logits, x_in = fedmix_loss(model, x, y, x_bar, y_bar, lam)
    torch.testing.assert_close(loss, objective(params))
    torch.testing.assert_close(x_in, (1 - lam) * x)
    loss.backward()  # through the input gradient: create_graph=True
    expected = torch.func.grad(objective)(params)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name])
    # the Taylor term alone moves the parameters (it is not a detached constant)
    model.zero_grad()
    plain = (1 - lam) * F.cross_entropy(model(x_in), y) + lam * F.cross_entropy(model(x_in), y_bar)
    plain.backward()
    assert not torch.allclose(model.body.weight.grad, expected["body.weight"])


def test_fedmix_pool_holds_mean_images_and_mean_labels(roots):
    fed = federation(roots, [{"name": "fedmix", "params": {"mean_size": 10}}])
    mix = fed.plugins[0]
    sizes = [len(ix) for ix in fed.client_indices]
    assert len(mix.pool_x) == sum(max(n // 10, 1) for n in sizes)
    torch.testing.assert_close(mix.pool_y.sum(1), torch.ones(len(mix.pool_y)))
    # each label is the mean of M one-hot rows (a client with fewer than M: of all of them)
    m = torch.tensor([min(n, 10) for n in sizes for _ in range(max(n // 10, 1))])
    counts = mix.pool_y * m[:, None]
    torch.testing.assert_close(counts, counts.round())
    # M larger than every client: one mean of each client's images (normalised as test images)
    whole = federation(roots, [{"name": "fedmix", "params": {"mean_size": 1000}}]).plugins[0]
    for k, ix in enumerate(fed.client_indices):
        torch.testing.assert_close(whole.pool_x[k], fed.augmenter.test(fed.x_train[ix]).mean(0))
        torch.testing.assert_close(whole.pool_y[k], as_soft(fed.y_train[ix], 10).mean(0))


# -- FedNTD ------------------------------------------------------------------------------------


def manual_ntd(local, global_, labels, tau):
    """τ² · mean_i Σ_{c ≠ y_i} q_c log(q_c / p_c), softmaxes over the not-true classes only."""
    total = 0.0
    for l_row, g_row, yi in zip(local.tolist(), global_.tolist(), labels.tolist()):
        l_nt = [v / tau for c, v in enumerate(l_row) if c != yi]
        g_nt = [v / tau for c, v in enumerate(g_row) if c != yi]
        zl, zg = sum(math.exp(v) for v in l_nt), sum(math.exp(v) for v in g_nt)
        total += sum(math.exp(g) / zg * (g - math.log(zg) - (lv - math.log(zl)))
                     for lv, g in zip(l_nt, g_nt))
    return tau * tau * total / len(labels)


def test_ntd_loss_is_the_not_true_kl_by_hand():
    torch.manual_seed(1)
    local, global_ = torch.randn(6, 5), torch.randn(6, 5)
    labels = torch.tensor([0, 4, 2, 2, 1, 3])
    for tau in (1.0, 2.5):
        assert float(ntd_loss(local, global_, labels, tau)) == pytest.approx(
            manual_ntd(local, global_, labels, tau), rel=1e-5)
    assert float(ntd_loss(local, local, labels, 2.0)) == pytest.approx(0.0, abs=1e-7)
    # the true class's logits take no part
    shifted_l, shifted_g = local.clone(), global_.clone()
    shifted_l[torch.arange(6), labels] += torch.randn(6) * 10
    shifted_g[torch.arange(6), labels] -= 7.0
    torch.testing.assert_close(ntd_loss(shifted_l, shifted_g, labels, 1.0),
                               ntd_loss(local, global_, labels, 1.0))


def test_fedntd_distils_the_global_models_natural_classes_on_the_step_inputs():
    torch.manual_seed(2)
    global_model = Toy(classes=6).train()  # 4 natural + 2 extra (VHL-like) outputs
    server = SimpleNamespace(global_model=SimpleNamespace(module=global_model), num_classes=4)
    ntd = plugin("fedntd", server, beta=0.5, tau=2.0)
    local = Toy(classes=6)
    x = torch.randn(5, 12)
    soft = F.softmax(torch.randn(5, 4), 1)  # e.g. Mixup's targets: the true class is the argmax
    logits = local(x)
    out = StepOutput(local.features(x), logits, soft, F.cross_entropy(logits, soft.argmax(1)),
                     inputs=x)
    term = ntd.extra_loss(SimpleNamespace(), out)
    with torch.no_grad():
        expected = 0.5 * manual_ntd(logits[:, :4], global_model(x)[:, :4], soft.argmax(1), 2.0)
    assert float(term.detach()) == pytest.approx(expected, rel=1e-5)
    assert not global_model.training  # eval mode, and no gradient reaches it
    term.backward()
    assert all(p.grad is None for p in global_model.parameters())
    assert local.head.weight.grad is not None
    assert plugin("fedntd", server, beta=0.0).extra_loss(SimpleNamespace(), out) is None


# -- FedDecorr ---------------------------------------------------------------------------------


def official_by_hand(z: torch.Tensor) -> float:
    """FedDecorr's loss.py: ẑ = (z − μ)/√(1e-8 + unbiased var), mean over a ≠ b of
    ((ẑᵀẑ)_ab)², divided by N."""
    n, d = z.shape
    cols = [z[:, a].tolist() for a in range(d)]
    hat = []
    for col in cols:
        mu = sum(col) / n
        var = sum((v - mu) ** 2 for v in col) / (n - 1)
        hat.append([(v - mu) / math.sqrt(1e-8 + var) for v in col])
    off = [sum(p * q for p, q in zip(hat[a], hat[b])) ** 2
           for a in range(d) for b in range(d) if a != b]
    return sum(off) / len(off) / n


def fedbr_by_hand(z: torch.Tensor) -> float:
    """FedBR's feddecorr_loss: ẑ = (z − μ)/(unbiased std + 1e-4), mean over all a, b of
    ((ẑᵀẑ/N)_ab)²."""
    n, d = z.shape
    hat = []
    for a in range(d):
        col = z[:, a].tolist()
        mu = sum(col) / n
        std = math.sqrt(sum((v - mu) ** 2 for v in col) / (n - 1))
        hat.append([(v - mu) / (std + 1e-4) for v in col])
    return sum((sum(p * q for p, q in zip(hat[a], hat[b])) / n) ** 2
               for a in range(d) for b in range(d)) / d ** 2


def test_feddecorr_formulas_by_hand():
    torch.manual_seed(3)
    z = torch.randn(7, 4, dtype=torch.float64) @ torch.randn(4, 4, dtype=torch.float64)
    assert float(decorrelation_official(z)) == pytest.approx(official_by_hand(z), rel=1e-9)
    assert float(decorrelation_fedbr(z)) == pytest.approx(fedbr_by_hand(z), rel=1e-9)


def test_feddecorr_vanishes_on_whitened_features_and_grows_with_duplicated_columns():
    torch.manual_seed(4)
    raw = torch.randn(32, 6, dtype=torch.float64)
    q, _ = torch.linalg.qr(raw - raw.mean(0))  # centred, orthogonal columns: uncorrelated
    whitened = q * torch.tensor([1.0, 2.0, 0.5, 3.0, 1.5, 0.7], dtype=torch.float64) + 4.0
    assert float(decorrelation_official(whitened)) == pytest.approx(0.0, abs=1e-12)
    duplicated = torch.cat([raw[:, :5], raw[:, :1]], 1)
    assert float(decorrelation_official(duplicated)) > float(decorrelation_official(raw)) + 0.1
    assert float(decorrelation_fedbr(duplicated)) > float(decorrelation_fedbr(raw))
    # the FedBR-code form keeps the diagonal: ≈ (N−1)²/N² / d, not 0, on whitened features
    assert float(decorrelation_fedbr(whitened)) == pytest.approx((31 / 32) ** 2 / 6, rel=1e-2)


@pytest.mark.parametrize("formula", ["official", "fedbr_code"])
def test_feddecorr_adds_beta_times_its_formula_on_the_features(formula):
    decorr = plugin("feddecorr", SimpleNamespace(), beta=0.3, formula=formula)
    features = torch.randn(8, 5)
    out = StepOutput(features, torch.randn(8, 3), torch.zeros(8, dtype=torch.long),
                     torch.zeros(()))
    by_hand = official_by_hand if formula == "official" else fedbr_by_hand
    assert float(decorr.extra_loss(SimpleNamespace(), out)) == pytest.approx(
        0.3 * by_hand(features), rel=1e-5)
    off = plugin("feddecorr", SimpleNamespace(), beta=0.0, formula=formula)
    assert off.extra_loss(SimpleNamespace(), out) is None


# -- DANN --------------------------------------------------------------------------------------


def dann_on_toy(lam: float, client: int):
    torch.manual_seed(5)
    dann = plugin("dann", SimpleNamespace(num_clients=4), lam=lam, width=8)
    disc = dann.modules(Toy())["discriminator"]
    ctx = SimpleNamespace(client=client, extra={}, params=torch.zeros(1),
                          hold=lambda name, tensor: tensor,
                          modules=nn.ModuleDict({dann.module_key("discriminator"): disc}))
    dann.client_begin(ctx)  # as the engine does before a client's steps
    z = torch.randn(6, 6, requires_grad=True)
    out = StepOutput(z, torch.randn(6, 4), torch.zeros(6, dtype=torch.long), torch.zeros(()))
    return dann, disc, ctx, z, out


def test_dann_discriminates_the_client_id_and_reverses_its_gradient_into_the_features():
    dann, disc, ctx, z, out = dann_on_toy(lam=0.3, client=2)
    assert [m.out_features for m in disc if isinstance(m, nn.Linear)] == [8, 8, 4]
    term = dann.extra_loss(ctx, out)
    expected = F.cross_entropy(disc(z), torch.full((6,), 2))
    torch.testing.assert_close(term, expected)
    own = torch.autograd.grad(expected, [z, *disc.parameters()])
    term.backward()
    torch.testing.assert_close(z.grad, -0.3 * own[0])  # the features ascend λ_d · CE
    for p, g in zip(disc.parameters(), own[1:]):  # D descends its own CE
        torch.testing.assert_close(p.grad, g)
    off, _, ctx, z, out = dann_on_toy(lam=0.0, client=1)
    off.extra_loss(ctx, out).backward()
    assert torch.equal(z.grad, torch.zeros_like(z))


def test_reverse_gradient_is_the_identity_forward():
    x = torch.randn(3, 2, requires_grad=True)
    y = reverse_gradient(x, 0.7)
    assert torch.equal(y, x)
    (y * torch.arange(6.0).view(3, 2)).sum().backward()
    torch.testing.assert_close(x.grad, -0.7 * torch.arange(6.0).view(3, 2))


def test_dann_discriminator_is_averaged_over_the_clients(roots):
    fed = federation(roots, [{"name": "dann"}])
    (disc,) = fed.modules_global.module.values()
    assert disc[-1].out_features == fed.num_clients == 4
    assert disc[0].in_features == fed.global_.module.feature_dim
    before = fed.modules_global.params.clone()
    result = fed.run_round(1)
    assert all(not torch.equal(u.module_params, before) for u in result.updates)
    n = torch.tensor([u.num_samples for u in result.updates], dtype=torch.float32)
    expected = sum(w * u.module_params for w, u in zip(n / n.sum(), result.updates))
    torch.testing.assert_close(fed.modules_global.params, expected)


def test_plugins_learn_the_runs_number_of_clients():
    centralized = resolve_run({"plugins": [{"name": "dann"}], "partition": {"num_clients": 1},
                               "training": {"centralized": True}})
    spread = resolve_run({"plugins": [{"name": "dann"}], "partition": {"num_clients": 7}})
    assert plugins_of(centralized)[0].num_clients == 1
    assert plugins_of(spread)[0].num_clients == 7


# -- whole runs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("fedbr_plugins")
    return {"data": str(base / "datasets"), "parts": str(base / "partitions"),
            "fedavg": base / "fedavg"}


def plugin_run(roots, plugins=(), rounds=2):
    run = tiny_run(roots["data"], roots["parts"])
    run["training"]["rounds"] = rounds
    run["plugins"] = list(plugins)
    return run


def federation(roots, plugins):
    return federation_of(plugin_run(roots, plugins))


@pytest.fixture(scope="module")
def fedavg(roots):
    train(plugin_run(roots), roots["fedavg"], log=lambda m: None)
    return run_outputs(roots["fedavg"])


def quiet_train(run, out, *args, **kwargs):
    return train(run, out, *args, log=lambda m: None, **kwargs)


@pytest.mark.parametrize("name, off", [("fedmix", {"lam": 0.0}), ("fedntd", {"beta": 0.0}),
                                       ("feddecorr", {"beta": 0.0})])
def test_an_off_plugin_equals_the_fedavg_run(roots, tmp_path, fedavg, name, off):
    quiet_train(plugin_run(roots, [{"name": name, "params": off}]), tmp_path)
    rows, model = run_outputs(tmp_path)
    assert rows == fedavg[0]
    assert model.keys() == fedavg[1].keys()
    assert all(torch.equal(model[k], fedavg[1][k]) for k in model)


def test_dann_without_reversal_trains_the_fedavg_model(roots, tmp_path, fedavg):
    """λ_d = 0: D trains (its loss is in train_loss, its bytes are sent), the model is FedAvg's."""
    quiet_train(plugin_run(roots, [{"name": "dann", "params": {"lam": 0.0}}]), tmp_path)
    rows, model = run_outputs(tmp_path)
    base_rows, base_model = fedavg
    assert all(torch.equal(model[k], base_model[k]) for k in base_model)
    assert {k for k in model if k not in base_model} == {
        f"plugin_modules.dann-discriminator.{i}.{w}" for i in (0, 2, 4) for w in ("weight", "bias")}
    for row, base in zip(rows, base_rows, strict=True):
        assert (row["test_acc"], row["test_loss"]) == (base["test_acc"], base["test_loss"])
        assert row["bytes_up"] > base["bytes_up"]


@pytest.mark.parametrize("name", ["mixup", "fedmix", "fedntd", "feddecorr", "dann"])
def test_a_run_trains_changes_the_model_and_resumes_bit_for_bit(roots, tmp_path, fedavg, name):
    run = plugin_run(roots, [{"name": name}])
    whole = quiet_train(run, tmp_path / "whole")
    assert whole["status"] == "completed"
    rows, model = run_outputs(tmp_path / "whole")
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["test_loss"]) for r in rows)
    assert not all(torch.equal(model[k], fedavg[1][k]) for k in fedavg[1])
    # the saved-run reader rebuilds the model (and DANN's discriminator) and scores it alike
    assert open_run(tmp_path / "whole", device="cpu").evaluate()[0] == pytest.approx(
        whole["last_acc"])
    stopped = quiet_train(copy.deepcopy(run), tmp_path / "cut", tmp_path / "ckpt", stop_after=1)
    assert stopped["status"] == "stopped"
    quiet_train(copy.deepcopy(run), tmp_path / "cut", tmp_path / "ckpt")
    resumed_rows, resumed = run_outputs(tmp_path / "cut")
    assert resumed.keys() == model.keys()
    assert all(torch.equal(resumed[k], model[k]) for k in model)
    assert resumed_rows == rows
