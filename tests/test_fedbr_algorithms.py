"""FedBR's comparison-set base algorithms (FedCM, GroupDRO, Local-only) against their
equations, with hand-checked numbers on tiny flat vectors, and in short real runs."""

from __future__ import annotations

import io
import json
import math

import pytest
import torch

from fedhet import catalog
from fedhet.algorithms import ClientContext, ClientUpdate, StepOutput, weighted_average
from fedhet.engine.federation import Federation
from fedhet.train import train
from tiny_runs import federation_of, tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def make(name: str, num_clients: int = 4, momentum: float = 0.0, **params):
    hp = {**catalog.method(name).defaults(), **params}
    return catalog.implementation(name)(hp, num_clients, momentum)


def ctx(client: int, params, grads=None, global_params=None, lr=0.1, round=1, buffers=None,
        global_buffers=None) -> ClientContext:
    return ClientContext(
        client=client, round=round, lr=lr, params=params,
        grads=torch.zeros_like(params) if grads is None else grads,
        buffers=t() if buffers is None else buffers,
        global_params=torch.zeros_like(params) if global_params is None else global_params,
        global_buffers=t() if global_buffers is None else global_buffers,
        num_samples=1, model=torch.nn.Identity())


def update(client, params, n=1, steps=1, buffers=None, **extra) -> ClientUpdate:
    return ClientUpdate(client, params, t() if buffers is None else buffers, n, steps,
                        extra=dict(extra))


def roundtrip(state):
    """A state dict as a checkpoint holds it: saved and read back as tensors only."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def algorithm_run(tmp_path, algorithm: str, **params) -> dict:
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["algorithm"] = {"name": algorithm, "params": params}
    return run


def federation(tmp_path, algorithm: str, run_over: dict | None = None, **params) -> Federation:
    run = algorithm_run(tmp_path, algorithm, **params)
    for section, values in (run_over or {}).items():
        run.setdefault(section, {}).update(values)
    return federation_of(run)


# ----------------------------------------------------------------------------------- FedCM
def test_fedcm_mixes_the_local_gradient_with_the_last_global_direction():
    alg = make("fedcm", alpha=0.25)
    alg.setup(t(0.0, 0.0))
    alg.delta.copy_(t(2.0, -4.0))
    c = ctx(0, params=t(0.0, 0.0), grads=t(1.0, 1.0), round=2)
    alg.correct_gradient(c)
    # α·g + (1−α)·Δ = 0.25·(1, 1) + 0.75·(2, −4)
    assert torch.allclose(c.grads, t(1.75, -2.75))
    # round 1 has no Δ: plain SGD, the gradient not even scaled by α (FedBR's code)
    first = ctx(0, params=t(0.0, 0.0), grads=t(1.0, 1.0), round=1)
    alg.correct_gradient(first)
    assert torch.equal(first.grads, t(1.0, 1.0))


def test_fedcm_delta_is_the_mean_local_gradient_of_the_round():
    alg = make("fedcm")
    alg.setup(t(0.0, 0.0))
    g = t(1.0, 1.0)
    a, b = update(0, t(0.0, 1.0), n=1, steps=4), update(1, t(1.0, -2.0), n=3, steps=6)
    for up in (a, b):
        alg.client_end(ctx(up.client, up.params, global_params=g, lr=0.1), up)
    params, _ = alg.aggregate(1, g, t(), [a, b])
    # w = ¼·(0, 1) + ¾·(1, −2) = (0.75, −1.25), as FedAvg
    assert torch.allclose(params, t(0.75, -1.25))
    assert torch.allclose(params, weighted_average([a, b], "params"))
    # Δ = (w_t − w)/(η·K) with K = mean(4, 6) = 5: (0.25, 2.25)/0.5
    assert torch.allclose(alg.delta, t(0.5, 4.5))
    assert alg.broadcast_tensors()[0] is alg.delta


def test_fedcm_broadcasts_one_model_more_than_fedavg(tmp_path):
    cm, avg = federation(tmp_path, "fedcm"), federation(tmp_path, "fedavg")
    numel = cm.global_.params.numel()
    assert [x.numel() for x in cm.algorithm.broadcast_tensors()] == [numel]
    assert cm.communicated_params() == 2 * avg.communicated_params() == 2 * numel
    down_cm, down_avg = cm.run_round(1).bytes_down, avg.run_round(1).bytes_down
    assert down_cm - down_avg == 2 * 4 * numel  # two clients, float32


def test_fedcm_state_dict_round_trip():
    alg = make("fedcm")
    alg.setup(t(0.0, 0.0))
    alg.delta.copy_(t(0.5, -1.5))
    state = roundtrip(alg.state_dict())
    other = make("fedcm")
    other.setup(t(0.0, 0.0))
    other.load_state_dict(state)
    assert torch.equal(other.delta, t(0.5, -1.5))


def test_fedcm_with_alpha_one_is_fedavg_and_the_default_is_not(tmp_path):
    def two_rounds(name, **params):
        fed = federation(tmp_path, name, **params)
        fed.run_round(1)
        fed.run_round(2)
        return fed.global_.params

    fedavg = two_rounds("fedavg")
    assert torch.equal(two_rounds("fedcm", alpha=1.0), fedavg)
    assert not torch.allclose(two_rounds("fedcm"), fedavg)  # Δ acts from round 2


# -------------------------------------------------------------------------------- GroupDRO
def test_groupdro_weights_and_aggregation_on_a_hand_example():
    alg = make("groupdro", num_clients=4, eta=0.5)
    alg.setup(t(0.0, 0.0))
    assert torch.equal(alg.q, t(1.0, 1.0, 1.0, 1.0))
    # q_k ← q_k·exp(η ℓ_k): ℓ = (2 ln 2, 0, 2 ln 3) → q = (2, 1, 3); sample counts play no part
    ups = [update(0, t(6.0, 0.0), n=1, buffers=t(6.0), loss=t(2 * math.log(2))[0]),
           update(1, t(0.0, 6.0), n=10, buffers=t(0.0), loss=t(0.0)[0]),
           update(2, t(2.0, 2.0), n=100, buffers=t(2.0), loss=t(2 * math.log(3))[0])]
    params, buffers = alg.aggregate(1, t(0.0, 0.0), t(0.0), ups)
    assert torch.allclose(alg.q, t(2.0, 1.0, 3.0, 1.0))
    # (2·(6, 0) + 1·(0, 6) + 3·(2, 2)) / 6
    assert torch.allclose(params, t(3.0, 2.0)) and torch.allclose(buffers, t(3.0))
    # q is kept per client id: round 2's clients 1, 2, 3 carry q = (1·2, 3·1, 1·1)
    ups = [update(1, t(6.0, 0.0), loss=t(2 * math.log(2))[0]),
           update(2, t(0.0, 6.0), loss=t(0.0)[0]),
           update(3, t(0.0, 0.0), loss=t(0.0)[0])]
    params, _ = alg.aggregate(2, params, t(), ups)
    assert torch.allclose(alg.q, t(2.0, 2.0, 3.0, 1.0))
    assert torch.allclose(params, t(2.0, 3.0))  # (2·(6, 0) + 3·(0, 6)) / 6


def test_groupdro_with_eta_zero_is_the_uniform_average_over_the_round():
    """FedBR's aggregation Σ q_k w_k / Σ q_k: with η = 0 every q_k stays 1, so each of the
    round's clients weighs the same whatever its sample count (not FedAvg's n_k/Σn)."""
    torch.manual_seed(0)
    alg = make("groupdro", eta=0.0)
    alg.setup(torch.zeros(5, dtype=torch.float64))
    ups = [update(k, torch.randn(5, dtype=torch.float64), n=n,
                  buffers=torch.randn(2, dtype=torch.float64), loss=t(float(k + 1))[0])
           for k, n in enumerate((1, 5, 50))]
    params, buffers = alg.aggregate(1, torch.zeros(5, dtype=torch.float64), t(0, 0), ups)
    assert torch.allclose(params, torch.stack([u.params for u in ups]).mean(0))
    assert torch.allclose(buffers, torch.stack([u.buffers for u in ups]).mean(0))
    assert not torch.allclose(params, weighted_average(ups, "params"))


@pytest.mark.parametrize("reading, expected", [("first_step", 3.0), ("mean", 2.0)])
def test_groupdro_client_loss_first_step_or_mean(reading, expected):
    alg = make("groupdro", loss=reading)
    alg.setup(t(0.0))
    c = ctx(0, params=t(0.0))
    for loss in (3.0, 1.0, 2.0):
        value = torch.tensor(loss, dtype=torch.float64, requires_grad=True)
        out = StepOutput(features=t(), logits=t(), targets=t(), loss=value * 1.0)
        assert alg.extra_loss(c, out) is None  # the objective is left alone
        c.steps += 1
    up = update(0, t(0.0), steps=c.steps)
    alg.client_end(c, up)
    assert isinstance(up.extra["loss"], torch.Tensor) and not up.extra["loss"].requires_grad
    assert up.extra["loss"].item() == pytest.approx(expected)


def test_groupdro_state_dict_round_trip():
    alg = make("groupdro", num_clients=3, eta=1.0)
    alg.setup(t(0.0))
    alg.aggregate(1, t(0.0), t(), [update(1, t(1.0), loss=t(0.5)[0])])
    other = make("groupdro", num_clients=3, eta=1.0)
    other.setup(t(0.0))
    other.load_state_dict(roundtrip(alg.state_dict()))
    assert torch.allclose(other.q, t(1.0, math.exp(0.5), 1.0))


# ----------------------------------------------------------------------------- Local-only
def test_local_clients_continue_their_own_model_and_never_see_others():
    alg = make("local")
    init, init_b = t(1.0, 1.0), t(5.0)
    alg.setup(init)
    ends = {0: (t(2.0, 3.0), t(4.0)), 1: (t(7.0, 7.0), t(9.0))}
    ups = []
    for k, (params, buffers) in ends.items():
        c = ctx(k, params=t(0.0, 0.0), buffers=t(0.0), global_params=init,
                global_buffers=init_b)
        alg.client_begin(c)  # round 1: the common initial model
        assert torch.equal(c.params, init) and torch.equal(c.buffers, init_b)
        ups.append(update(k, params.clone(), n=1 + 2 * k, buffers=buffers.clone()))
        alg.client_end(c, ups[-1])
    avg, avg_b = alg.aggregate(1, init, init_b, ups)
    assert torch.allclose(avg, weighted_average(ups, "params"))  # logged only
    ups[0].params.add_(100.0)  # what the engine does with an update later changes nothing
    for k, (params, buffers) in ends.items():
        c = ctx(k, params=avg.clone(), buffers=avg_b.clone(), global_params=avg,
                global_buffers=avg_b, round=2)
        alg.client_begin(c)  # round 2: its own model of round 1, not the average
        assert torch.equal(c.params, params) and torch.equal(c.buffers, buffers)
    new = ctx(2, params=avg.clone(), buffers=avg_b.clone(), global_params=avg,
              global_buffers=avg_b, round=2)
    alg.client_begin(new)  # first seen in round 2: the initial model, not the average
    assert torch.equal(new.params, init) and torch.equal(new.buffers, init_b)
    other = make("local")
    other.setup(init)
    other.load_state_dict(roundtrip(alg.state_dict()))
    for k, (params, _) in ends.items():
        c = ctx(k, params=avg.clone(), buffers=avg_b.clone(), global_params=avg,
                global_buffers=avg_b, round=2)
        other.client_begin(c)
        assert torch.equal(c.params, params)


def test_local_federation_keeps_one_model_per_client(tmp_path):
    fed = federation(tmp_path, "local", {"training": {"clients_per_round": 4},
                                         "eval": {"client_models": True}})
    starts = {}
    begin = fed.algorithm.client_begin

    def spy(c):
        begin(c)
        starts[c.client] = c.params.clone()  # the working model as training starts

    fed.algorithm.client_begin = spy
    init = fed.global_.params.clone()
    first = {u.client: u.params for u in fed.run_round(1).updates}
    assert all(torch.equal(s, init) for s in starts.values())
    result = fed.run_round(2)
    assert sorted(starts) == sorted(first) == [0, 1, 2, 3]
    for k, params in first.items():
        assert torch.equal(starts[k], params)  # round 2 starts from its own round-1 model
        assert not torch.allclose(starts[k], fed.global_.params)
    second = [u.params for u in result.updates]
    assert all(not torch.allclose(a, b) for i, a in enumerate(second) for b in second[i + 1:])
    acc, loss, more = fed.evaluate(updates=result.updates)
    assert math.isfinite(acc) and math.isfinite(loss)
    assert sorted(more["client_acc"]) == ["0", "1", "2", "3"]
    assert all(0.0 <= a <= 1.0 for a in more["client_acc"].values())
    assert math.isfinite(more["local_test_acc"])


# ---------------------------------------------------------------------------- all three
@pytest.mark.parametrize("name, params", [
    ("fedcm", {}),
    ("groupdro", {"eta": 0.5}),
    ("local", {}),
])
def test_a_run_finishes_and_resumes_bit_identically(tmp_path, name, params):
    run = algorithm_run(tmp_path, name, **params)
    run["eval"] = {"client_models": True}
    # rounds 1 and 2 share client 0 (seed 1), so round 2 reads the state round 1 left
    final = train(run, tmp_path / "whole", log=lambda m: None)
    assert final["status"] == "completed" and final["rounds_trained"] == 2
    rows = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").open()]
    assert len(rows) == 2
    for row in rows:
        values = [row["test_acc"], row["test_loss"], row["train_loss"],
                  *row["client_acc"].values()]
        assert all(math.isfinite(v) for v in values)
    assert train(run, tmp_path / "cut", tmp_path / "ckpt", stop_after=1,
                 log=lambda m: None)["status"] == "stopped"
    train(run, tmp_path / "cut", tmp_path / "ckpt", log=lambda m: None)
    a = torch.load(tmp_path / "whole" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "cut" / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
