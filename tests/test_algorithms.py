"""Each base algorithm's update rule against its equation, with hand-checked numbers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedhet import catalog
from fedhet.algorithms import (
    ALGORITHMS,
    ClientContext,
    ClientUpdate,
    StepOutput,
    weighted_average,
)
from fedhet.config import resolve_run

IMPLEMENTED = catalog.names("algorithm", implemented=True)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def make(name: str, num_clients: int = 4, momentum: float = 0.0, **params):
    hp = {**catalog.method(name).defaults(), **params}
    return catalog.implementation(name)(hp, num_clients, momentum)


def ctx(client: int, params, grads, global_params, lr=0.1) -> ClientContext:
    return ClientContext(client=client, round=1, lr=lr, params=params, grads=grads,
                         buffers=t(), global_params=global_params, global_buffers=t(),
                         num_samples=1, model=torch.nn.Identity())


def update(client, params, n, steps=1, buffers=None) -> ClientUpdate:
    return ClientUpdate(client, params, t() if buffers is None else buffers, n, steps)


def test_registry_and_config_agree():
    for name in IMPLEMENTED:
        catalog.implementation(name)
    assert set(ALGORITHMS.names()) == set(IMPLEMENTED)


def test_weighted_average_uses_sample_counts_for_params_and_bn_buffers():
    ups = [update(0, t(1.0, 0.0), 1, buffers=t(2.0)), update(1, t(4.0, 3.0), 3, buffers=t(6.0))]
    assert torch.allclose(weighted_average(ups, "params"), t(3.25, 2.25))
    assert torch.allclose(weighted_average(ups, "buffers"), t(5.0))
    alg = make("fedavg")
    params, buffers = alg.aggregate(1, t(0.0, 0.0), t(0.0), ups)
    assert torch.allclose(params, t(3.25, 2.25)) and torch.allclose(buffers, t(5.0))


def test_fedprox_gradient_adds_mu_times_distance_to_global():
    alg = make("fedprox", mu=0.5)
    c = ctx(0, params=t(1.0, 2.0), grads=t(0.1, 0.1), global_params=t(0.0, 4.0))
    alg.correct_gradient(c)
    # g + μ(w − w_g) = (0.1 + 0.5·1, 0.1 + 0.5·(−2))
    assert torch.allclose(c.grads, t(0.6, -0.9))


def test_scaffold_control_variates_and_server_step():
    alg = make("scaffold", num_clients=4)
    alg.setup(t(0.0, 0.0))
    alg.c.copy_(t(0.2, -0.2))
    c = ctx(1, params=t(0.0, 0.0), grads=t(1.0, 1.0), global_params=t(1.0, 1.0), lr=0.1)
    alg.client_begin(c)
    alg.correct_gradient(c)
    assert torch.allclose(c.grads, t(1.0, 1.0))  # the gradient itself is left alone
    alg.after_step(c)
    # y ← y − η(c − c_i) with c_i = 0
    assert torch.allclose(c.params, t(-0.02, 0.02))
    c.params.copy_(t(0.0, 0.0))
    up = update(1, t(0.5, 0.8), n=10, steps=5)
    alg.client_end(c, up)
    # c_i⁺ = c_i − c + (x − y)/(K η) = 0 − (0.2, −0.2) + ((0.5, 0.2))/(5·0.1)
    expected_ci = t(-0.2 + 1.0, 0.2 + 0.4)
    assert torch.allclose(alg.c_i.get(1), expected_ci)
    assert torch.allclose(up.extra["delta_c"], expected_ci)
    other = update(2, t(1.5, 1.0), n=30, steps=5)
    other.extra["delta_c"] = t(0.4, 0.0)
    params, _ = alg.aggregate(1, t(1.0, 1.0), t(), [up, other])
    # x + η_g · weighted avg: (10·0.5 + 30·1.5)/40, (10·0.8 + 30·1.0)/40
    assert torch.allclose(params, t(1.25, 0.95))
    # c ← c + (|S|/N) · mean Δc = (0.2, −0.2) + (2/4)·((0.8 + 0.4)/2, (0.6 + 0)/2)
    assert torch.allclose(alg.c, t(0.2 + 0.3, -0.2 + 0.15))


def test_scaffold_code_variant_drops_the_participation_factor():
    alg = make("scaffold", num_clients=4, paper_server_update=False)
    alg.setup(t(0.0))
    ups = [update(0, t(0.0), 1), update(1, t(0.0), 1)]
    ups[0].extra["delta_c"], ups[1].extra["delta_c"] = t(1.0), t(3.0)
    alg.aggregate(1, t(0.0), t(), ups)
    assert torch.allclose(alg.c, t(2.0))


@pytest.mark.parametrize("average, expected", [
    # x + η_g Σ (n_i/Σn)(y_i − x) with η_g = 0.5, n = (10, 30): 1 + 0.5·(0.25·1 + 0.75·3)
    ("samples", 1.0 + 0.5 * (0.25 * 1.0 + 0.75 * 3.0)),
    # x + η_g (1/|S|) Σ (y_i − x), Alg. 1: 1 + 0.5·(1 + 3)/2
    ("mean", 1.0 + 0.5 * (1.0 + 3.0) / 2),
])
def test_scaffold_model_average_by_samples_or_plain_mean(average, expected):
    alg = make("scaffold", num_clients=4, global_lr=0.5, model_average=average)
    alg.setup(t(0.0))
    ups = [update(0, t(2.0), n=10), update(1, t(4.0), n=30)]
    for u in ups:
        u.extra["delta_c"] = t(0.0)
    params, _ = alg.aggregate(1, t(1.0), t(), ups)
    assert torch.allclose(params, t(expected))


def test_scaffold_model_average_default_keeps_run_ids():
    """The option came later: at its default it leaves the run id of a SCAFFOLD run alone."""
    from fedhet.config import run_id

    plain = resolve_run({"algorithm": {"name": "scaffold"}})
    spelled = resolve_run({"algorithm": {"name": "scaffold",
                                         "params": {"model_average": "samples"}}})
    mean = resolve_run({"algorithm": {"name": "scaffold", "params": {"model_average": "mean"}}})
    assert run_id(plain) == run_id(spelled) != run_id(mean)


def test_fednova_normaliser_with_and_without_momentum():
    assert make("fednova").normaliser(7) == 7.0
    rho, tau = 0.9, 3
    expected = (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
    assert math.isclose(make("fednova", momentum=rho).normaliser(tau), expected)
    assert math.isclose(expected, 5.61, rel_tol=1e-9)  # (3 − 0.9·2.71)/0.1


def test_fednova_aggregation_normalises_by_local_steps():
    alg = make("fednova")
    g = t(1.0, 1.0)
    a = update(0, t(0.0, 1.0), n=1, steps=2)
    b = update(1, t(1.0, -2.0), n=3, steps=6)
    for up in (a, b):
        alg.client_end(ctx(up.client, up.params, t(0, 0), g), up)
    params, _ = alg.aggregate(1, g, t(), [a, b])
    # d_a = (1, 0)/2, d_b = (0, 3)/6; τ_eff = ¼·2 + ¾·6 = 5
    # w = g − 5·(¼·(0.5, 0) + ¾·(0, 0.5)) = (1 − 0.625, 1 − 1.875)
    assert torch.allclose(params, t(0.375, -0.875))


def test_fedavgm_server_momentum():
    alg = make("fedavgm", server_momentum=0.5, server_lr=1.0)
    alg.setup(t(0.0))
    g = t(1.0)
    params, _ = alg.aggregate(1, g, t(), [update(0, t(0.0), 1)])
    assert torch.allclose(params, t(0.0))  # v = 1, w = 1 − 1
    params, _ = alg.aggregate(2, params, t(), [update(0, t(-1.0), 1)])
    # Δ = 0 − (−1) = 1, v = 0.5·1 + 1 = 1.5, w = 0 − 1.5
    assert torch.allclose(params, t(-1.5))


def test_feddyn_client_state_and_server_update():
    alg = make("feddyn", num_clients=4, alpha=0.5)
    alg.setup(t(0.0, 0.0))
    g = t(1.0, 1.0)
    c = ctx(2, params=t(2.0, 0.0), grads=t(0.0, 0.0), global_params=g)
    alg.grad_state.get(2).copy_(t(0.2, 0.4))
    alg.client_begin(c)  # as the engine calls it, before the client's steps
    alg.correct_gradient(c)
    # ∇: −∇L_k(θ_k^{t−1}) + α(θ − θ^{t−1}) = −(0.2, 0.4) + 0.5·(1, −1)
    assert torch.allclose(c.grads, t(0.3, -0.9))
    up = update(2, t(3.0, 1.0), n=5)
    alg.client_end(c, up)
    # ∇L_k ← ∇L_k − α(θ_k − θ) = (0.2, 0.4) − 0.5·(2, 0)
    assert torch.allclose(alg.grad_state.get(2), t(-0.8, 0.4))
    other = update(3, t(1.0, 3.0), n=50)
    params, _ = alg.aggregate(1, g, t(), [up, other])
    # h = −α/m · Σ(θ_k − θ) = −0.5/4 · (2 + 0, 0 + 2) = (−0.25, −0.25)
    assert torch.allclose(alg.h, t(-0.25, -0.25))
    # θ = uniform mean − h/α = (2, 2) + (0.5, 0.5)
    assert torch.allclose(params, t(2.5, 2.5))


class _Linear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class _Holder:
    def __init__(self, module):
        self.module = module

    def load(self, params, buffers):
        with torch.no_grad():
            self.module.weight.copy_(params.view_as(self.module.weight))


def test_moon_contrastive_term_matches_equation():
    torch.manual_seed(0)
    alg = make("moon", mu=2.0, temperature=0.5)
    alg.setup(t())
    glob = _Linear(torch.randn(3, 2, dtype=torch.float64))
    prev = _Holder(_Linear(torch.zeros(3, 2, dtype=torch.float64)))
    alg.attach(_Holder(glob))
    prev_w = torch.randn(3, 2, dtype=torch.float64)
    alg.prev_params[0] = prev_w.flatten()
    alg.prev_buffers[0] = t()
    c = ctx(0, params=t(), grads=t(), global_params=glob.weight.detach().flatten())
    c.reference = prev
    alg.client_begin(c)
    x = torch.randn(4, 3, dtype=torch.float64)
    z = torch.randn(4, 2, dtype=torch.float64)
    out = StepOutput(features=z, logits=z, targets=torch.zeros(4, dtype=torch.long),
                     loss=torch.zeros((), dtype=torch.float64), inputs=x)
    got = alg.extra_loss(c, out)
    s_g = F.cosine_similarity(z, x @ glob.weight.detach(), dim=1) / 0.5
    s_p = F.cosine_similarity(z, x @ prev_w, dim=1) / 0.5
    expected = 2.0 * (-torch.log(s_g.exp() / (s_g.exp() + s_p.exp()))).mean()
    assert torch.allclose(got, expected)


def test_moon_first_round_uses_the_received_model_as_previous():
    alg = make("moon")
    alg.setup(t())
    loaded = {}

    class Recorder(_Holder):
        def load(self, params, buffers):
            loaded["params"] = params

    alg.attach(_Holder(_Linear(torch.zeros(1, 1))))
    c = ctx(5, params=t(), grads=t(), global_params=t(7.0))
    c.reference = Recorder(_Linear(torch.zeros(1, 1)))
    alg.client_begin(c)
    assert torch.equal(loaded["params"], t(7.0))


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_misspelled_algorithm_parameter_is_named(name):
    from fedhet.config import ConfigError

    with pytest.raises(ConfigError, match="algorithm.params"):
        resolve_run({"algorithm": {"name": name, "params": {"not_a_param": 1}}})
