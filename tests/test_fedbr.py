"""FedBR: its losses against hand computations, the max and min steps, the pseudo-data, the
composition with other plug-ins, and whole runs (null plug-in, resume, rotated test sets)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedhet.algorithms.base import task_loss
from fedhet.algorithms.losses import contrastive_loss
from fedhet.methods.fedbr.pseudo import Groups, mixture, rsm, uniform_labels
from fedhet.train import train
from run_outputs import run_outputs
from tiny_runs import federation_of, tiny_run


def run_of(tmp_path, fedbr: dict | None = None, **over) -> dict:
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["plugins"] = [] if fedbr is None else [{"name": "fedbr", "params": fedbr}]
    for key, value in over.items():
        run[key] = {**run.get(key, {}), **value} if isinstance(value, dict) else value
    return run


federation = federation_of


# ----------------------------------------------------------------------------- losses


def test_contrastive_loss_by_hand():
    # two pairs with known cosines: cos(a,g) = 1, 1/√2; cos(a,b) = 0, -1; τ1 ≠ τ2 catches a swap
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    g = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    b = torch.tensor([[0.0, 3.0], [0.0, -1.0]])
    tau1, tau2 = 0.5, 2.0
    expect = []
    for pos, neg in ((1.0, 0.0), (math.sqrt(0.5), -1.0)):
        p, n = math.exp(pos / tau1), math.exp(neg / tau2)
        expect.append(-math.log(p / (p + n)))
    got = contrastive_loss(a, g, b, tau1, tau2)
    assert got.item() == pytest.approx(sum(expect) / 2, rel=1e-6)
    assert contrastive_loss(a, g, b, tau2, tau1).item() != pytest.approx(got.item())


def test_soft_cross_entropy_with_uniform_labels_and_extra_columns():
    logits = torch.tensor([[2.0, 0.0, 1.0, 5.0]])
    q = torch.tensor([[0.5, 0.5, 0.0]])  # the fourth (virtual) class gets no mass
    logp = F.log_softmax(logits, 1)[0]
    assert task_loss(logits, q).item() == pytest.approx(-(0.5 * logp[0] + 0.5 * logp[1]).item())
    u = uniform_labels(3, 4, torch.device("cpu"))
    assert torch.allclose(u.sum(1), torch.ones(3)) and (u == 0.25).all()


# ----------------------------------------------------------------------------- pseudo-data


def test_rsm_samples_are_means_of_one_groups_images():
    images = torch.arange(20, dtype=torch.float32).view(20, 1, 1, 1)
    groups = Groups([torch.arange(0, 10), torch.arange(10, 20), torch.arange(0, 0)])
    gen = torch.Generator().manual_seed(0)
    rows = groups.draw(6, 4, torch.Generator().manual_seed(0))
    assert rows.shape == (6, 4)
    assert all(((r < 10).all() or (r >= 10).all()) for r in rows)  # one group a sample
    x = rsm(groups, lambda take: images[take], 6, 4, gen)
    assert x.shape == (6, 1, 1, 1)
    assert torch.allclose(x.view(6), images[rows].view(6, 4).mean(1))


def test_balanced_groups_are_drawn_uniformly():
    # a chi-square test of the groups' frequencies over 10^4 draws (α = 0.001: 9 dof → 27.9)
    groups = Groups([torch.arange(i * 1000, i * 1000 + 1 + i * 30) for i in range(10)])
    rows = groups.draw(10_000, 1, torch.Generator().manual_seed(3)).view(-1)
    counts = torch.bincount(rows // 1000, minlength=10).double()
    chi2 = ((counts - 1000.0) ** 2 / 1000.0).sum().item()
    assert chi2 < 27.9


def test_mixture_of_eq4():
    x_p, q_p = torch.full((3, 1, 2, 2), 4.0), uniform_labels(3, 4, torch.device("cpu"))
    x_local = torch.stack([torch.full((1, 2, 2), float(v)) for v in (0.0, 2.0)])
    q_local = torch.tensor([[1.0, 0, 0, 0], [0, 0.3, 0.7, 0]])  # one-hot and a soft row
    x, q = mixture(x_p, q_p, x_local, q_local, 0, torch.Generator())
    assert torch.equal(x, x_p) and torch.equal(q, q_p)
    x, q = mixture(x_p, q_p, x_local, q_local, 1, torch.Generator().manual_seed(1))
    for row in range(3):
        picked = 0 if x[row, 0, 0, 0] == 2.0 else 1
        assert x[row, 0, 0, 0] == (4.0 + x_local[picked, 0, 0, 0]) / 2
        assert torch.allclose(q[row], (q_p[row] + q_local[picked]) / 2)
    assert torch.allclose(q.sum(1), torch.ones(3))


def test_rsm_reads_the_clients_rotated_normalised_images(tmp_path):
    run = run_of(tmp_path, {"mu": 0.0, "refresh": "once"},
                 partition={"scheme": "rotation", "options": {"base": "dirichlet_client"}})
    fed = federation(run)
    plugin = fed.plugins[0]
    gen = torch.Generator().manual_seed(5)
    rows = plugin.groups.draw(2, 10, torch.Generator().manual_seed(5))
    x = rsm(plugin.groups, plugin.load, 2, 10, gen)
    angle_of = {}
    for ix, angles in zip(fed.client_indices, fed.client_angles):
        angle_of.update(zip(ix.tolist(), angles.tolist()))
    expect = torch.stack([
        fed.augmenter.test(fed.x_train[r], torch.tensor([angle_of[int(i)] for i in r])).mean(0)
        for r in rows
    ])
    assert torch.allclose(x, expect, atol=1e-6)
    assert len({angle_of[int(i)] for i in rows[0]}) == 1  # one client: one angle (fixed mode)
    assert plugin.x_p.shape == (8, 1, 16, 16)  # pseudo_size null = the batch size


def test_pseudo_data_once_or_every_round(tmp_path):
    once = federation(run_of(tmp_path, {"refresh": "once"})).plugins[0]
    first = once.x_p.clone()
    once.round_begin(5, [0, 1])
    assert torch.equal(once.x_p, first)
    every = federation(run_of(tmp_path, {"refresh": "round"})).plugins[0]
    every.round_begin(1, [0, 1])
    r1 = every.x_p.clone()
    every.round_begin(2, [0, 1])
    assert not torch.equal(every.x_p, r1)
    every.round_begin(1, [0, 1])
    assert torch.equal(every.x_p, r1)  # keyed by the round: a resumed run draws it again


# ----------------------------------------------------------------------------- the two steps


def test_max_step_moves_only_theta_up_and_min_step_never_moves_it(tmp_path):
    fed = federation(run_of(tmp_path, {}))
    plugin = fed.plugins[0]
    plugin.round_begin(1, [0, 1])
    from fedhet.algorithms.base import ClientContext

    work, mods = fed.work, fed.modules_work
    mods.load(fed.modules_global.params, fed.modules_global.buffers)
    ctx = ClientContext(client=0, round=1, lr=0.5, params=work.params, grads=work.grads,
                        buffers=work.buffers, global_params=fed.global_.params,
                        global_buffers=fed.global_.buffers, num_samples=10, model=work.module,
                        modules=mods.module)
    plugin.client_begin(ctx)
    x = fed.augmenter.test(fed.x_train[:8])
    y = fed.y_train[:8]
    head = mods.module[plugin.module_key("proj")]
    z_x = work.module.features(x).detach()
    z_p = work.module.features(plugin.x_p).detach()
    z_g = plugin.global_features(plugin.x_p)
    hp = plugin.hp

    def l_con() -> float:
        with torch.no_grad():
            return contrastive_loss(head(z_p), head(z_g), head(z_x), hp["tau1"], hp["tau2"]).item()

    theta0, model0, before = mods.params.clone(), work.params.clone(), l_con()
    work.module.train()
    mods.zero_grad()
    work.zero_grad()
    out = plugin.forward(ctx, x, y)
    assert not torch.equal(mods.params, theta0) and torch.equal(work.params, model0)
    assert l_con() > before  # the max step raised L_con
    theta1 = mods.params.clone()
    out.loss.backward()
    assert torch.count_nonzero(mods.grads) == 0  # the min step reads θ detached
    assert torch.count_nonzero(work.grads) > 0
    assert torch.equal(mods.params, theta1)
    # StepOutput holds the local batch only
    assert out.features.shape[0] == 8 and out.logits.shape == (8, 10) and out.inputs is x


def test_without_max_step_theta_stays_put(tmp_path):
    run = run_of(tmp_path, {"max_step": False}, training={"rounds": 2})
    fed = federation(run)
    theta0 = fed.modules_global.params.clone()
    fed.run_round(1)
    assert torch.equal(fed.modules_global.params, theta0)


def test_global_features_are_the_received_models_and_fixed_in_a_round(tmp_path):
    fed = federation(run_of(tmp_path, {}))
    plugin = fed.plugins[0]
    plugin.round_begin(1, [0, 1])
    z = plugin.global_features(plugin.x_p)
    module = fed.global_.module.eval()
    with torch.no_grad():
        assert torch.equal(z, module.features(plugin.x_p))
    fed.run_round(1)  # the clients trained on φ_g as they received it, not as it is now
    assert torch.equal(plugin.z_g, z)
    with torch.no_grad():
        assert not torch.equal(z, fed.global_.module.eval().features(plugin.x_p))
    plugin.round_begin(2, [0, 1])
    assert plugin.z_g is None  # a new global model, a new z_g


# ----------------------------------------------------------------------------- whole runs


def test_lambda_and_mu_zero_is_fedavg_bit_for_bit(tmp_path):
    train(run_of(tmp_path), tmp_path / "base", log=lambda m: None)
    train(run_of(tmp_path, {"lam": 0.0, "mu": 0.0}), tmp_path / "null", log=lambda m: None)
    assert _same(run_outputs(tmp_path / "base"), run_outputs(tmp_path / "null"))


def _same(a, b) -> bool:
    (ma, sa), (mb, sb) = a, b
    return ma == mb and sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_theta_is_averaged_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    run = run_of(tmp_path, {}, training={"rounds": 3})
    fed = federation(run)
    result = fed.run_round(1)
    n = torch.tensor([u.num_samples for u in result.updates], dtype=torch.float32)
    expect = sum(w * u.module_params for w, u in zip(n / n.sum(), result.updates))
    torch.testing.assert_close(fed.modules_global.params, expect)

    train(run, tmp_path / "whole", log=lambda m: None)
    train(run, tmp_path / "cut", tmp_path / "ckpt", stop_after=1, log=lambda m: None)
    train(run, tmp_path / "cut", tmp_path / "ckpt", log=lambda m: None)
    assert _same(run_outputs(tmp_path / "whole"), run_outputs(tmp_path / "cut"))
    state = torch.load(tmp_path / "whole" / "model.pt", weights_only=True)
    assert any(k.startswith("plugin_modules.fedbr-proj.") for k in state)


@pytest.mark.parametrize("params", [
    {"pseudo": "mixture", "proxy": "digits100", "mixture_k": 1, "refresh": "once"},
    {"pseudo": "mixture", "proxy": "digits100", "mixture_k": 0},
    {"rsm_source": "balanced", "projection": "identity", "max_step": False},
])
def test_variants_train_and_stay_finite(tmp_path, params):
    final = train(run_of(tmp_path, params), tmp_path / "out", log=lambda m: None)
    assert final["status"] == "completed" and math.isfinite(final["last_acc"])


def test_rotated_test_sets_score_the_mean_over_angles(tmp_path):
    run = run_of(tmp_path, {}, eval={"rotations": [0, 90]})
    fed = federation(run)
    acc, loss, more = fed.evaluate()
    from fedhet.engine.evaluation import evaluate_model

    per = []
    for angle in (0.0, 90.0):
        angles = torch.full((fed.y_test.numel(),), angle)
        per.append(evaluate_model(fed.global_.module, fed.x_test, fed.y_test, fed.augmenter,
                                  angles=angles)[0])
    assert more["rotation_acc"] == {"0": per[0], "90": per[1]}
    assert acc == pytest.approx(sum(per) / 2)


def test_cost_metrics_count_theta_and_the_pseudo_data(tmp_path):
    final = train(run_of(tmp_path, {"refresh": "once"}), tmp_path / "once", log=lambda m: None)
    fed = federation(run_of(tmp_path, {"refresh": "once"}))
    theta = fed.modules_global.params.numel()
    assert final["communicated_params"] == fed.global_.params.numel() + theta
    assert final["mean_step_seconds"] > 0
    plain = train(run_of(tmp_path), tmp_path / "plain", log=lambda m: None)
    assert plain["communicated_params"] == fed.global_.params.numel()
