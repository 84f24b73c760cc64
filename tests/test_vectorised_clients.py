"""Clients trained as one stacked model (`training.vectorise_clients`) give the sequential
numbers to float tolerance, and anything that cannot be stacked falls back, saying why.

Tolerance: the stacked step runs batched kernels (a grouped convolution per layer for all
clients) that add in another order than one client's kernels, so a step differs in the last
bits. In float32 those bits are 6e-8 of a weight, and some steps amplify them (BatchNorm on
tiny batches, where a channel is nearly constant, turned them into 1e-2 of a gradient) by an
amount that depends on the CPU's kernels: no float32 tolerance holds on every CPU. So the
equality tests run both paths in float64 (torch's default float type set for the test: models,
inputs and methods' state follow it), where the maths is the same and only the order of the
sums differs: measured, every case agrees to 4.4e-16 after three rounds (BatchNorm models
included), and the tests allow 1e-9, which even a 1e5-fold amplification of float64's
rounding stays far below, while a wrong batch, a client stepped once too often or a hook on
another client's row is 1e-3 or more. Every round is compared from the same state (the
sequential federation's), so client state carried across rounds is checked as sharply. Whole
float32 runs differ more: each round's last-bit differences are fed back through the global
model, and some methods amplify them (FedDecorr's and FedNTD's 3-round runs differ by 1e-3 in
the test loss, BatchNorm ones by 1 %, as one client at a time on 1 and 2 torch threads
already does).
"""

from __future__ import annotations

import copy

import pytest
import torch

from fedhet.config import run_id
from fedhet.engine.vectorised import StackedClients
from fedhet.train import train
from run_outputs import run_outputs, without_step_time
# the same tiny federation and fixtures as the concurrent-clients tests
from test_concurrent_clients import data_root, keep_torch_threads, run_of  # noqa: F401


def trained(data_root, tmp_path, name, algorithm, plugins=(), model="cnn4", **training):
    lines: list[str] = []
    out = tmp_path / name
    final = train(run_of(data_root, tmp_path, 1, algorithm, plugins, model, **training), out,
                  log=lines.append)
    return without_step_time(final), *run_outputs(out), "\n".join(lines)


STACKABLE = [
    ("fedavg", (), "cnn4"),
    ("fedprox", (), "cnn4"),
    ("scaffold", (), "cnn4"),
    ("fednova", (), "cnn4"),
    ("feddyn", (), "cnn4"),
    ("moon", (), "simplecnn"),  # a loss term against the global and the previous model
    ("fedavg", ("fedntd",), "cnn4"),  # a plug-in's loss term against the global model
    ("fedavg", ("feddecorr",), "cnn4"),  # a plug-in's loss on the batch's features
    ("fedavg", (), "resnet10"),  # BatchNorm: running statistics stay each client's own
    ("moon", (), "resnet10"),  # reference models in eval mode, on their own statistics
]


# the stacked and the sequential path agree to this in float64 (see the module's docstring)
ATOL = 1e-9


@pytest.fixture
def float64():
    """torch's default float type float64 while the test runs: a federation built then has
    float64 models, inputs and method state."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize(("algorithm", "plugins", "model"), STACKABLE)
def test_one_stacked_round_is_one_at_a_time_to_float_precision(data_root, tmp_path, float64,
                                                               monkeypatch, algorithm,
                                                               plugins, model):
    """One round of clients with unequal step counts (6 to 20 steps, short last batches)."""
    stacked_rounds = []  # the stacked path really trains (not the sequential one renamed)
    stacked_train = StackedClients.train

    def counted(self, *args):
        stacked_rounds.append(args)
        return stacked_train(self, *args)

    monkeypatch.setattr(StackedClients, "train", counted)
    seq = trained(data_root, tmp_path, "seq", algorithm, plugins, model, rounds=1)
    assert not stacked_rounds
    vec = trained(data_root, tmp_path, "vec", algorithm, plugins, model, rounds=1,
                  vectorise_clients=True)
    assert "clients train stacked" in vec[3] and len(stacked_rounds) == 1
    model_s, model_v = seq[2], vec[2]
    assert model_v.keys() == model_s.keys()
    assert model_s["head.weight"].dtype == torch.float64
    for key in model_s:
        torch.testing.assert_close(model_v[key], model_s[key], rtol=0, atol=ATOL)


# Not the BatchNorm models, for time: their clients keep no state across rounds that the
# smaller models' cases do not check, and their first round is compared above.
@pytest.mark.parametrize(("algorithm", "plugins", "model"),
                         [case for case in STACKABLE if case[2] != "resnet10"])
def test_every_round_from_the_same_state_is_one_at_a_time_to_float_precision(
        data_root, tmp_path, float64, algorithm, plugins, model):
    """Rounds 2 and 3 too, where client state matters (SCAFFOLD's control variates, MOON's
    previous models, FedDyn's gradients, kept momentum): the stacked federation takes the
    sequential one's state before each round and must end it in the same place."""
    from tiny_runs import federation_of

    settings = {"keep_client_optimizer_state": True}
    seq = federation_of(run_of(data_root, tmp_path, 1, algorithm, plugins, model, **settings))
    vec = federation_of(run_of(data_root, tmp_path, 1, algorithm, plugins, model,
                               vectorise_clients=True, **settings))
    assert vec.stacked is not None and seq.global_.params.dtype == torch.float64
    for round_ in (1, 2, 3):
        vec.load_state_dict(copy.deepcopy(seq.state_dict()))
        seq.run_round(round_)
        vec.run_round(round_)
        torch.testing.assert_close(vec.global_.params, seq.global_.params, rtol=0, atol=ATOL)
        torch.testing.assert_close(vec.global_.buffers, seq.global_.buffers, rtol=0,
                                   atol=ATOL)


def test_vectorising_is_part_of_the_run_identity(data_root, tmp_path):
    run = run_of(data_root, tmp_path, 1, "fedavg")
    stacked = run_of(data_root, tmp_path, 1, "fedavg", vectorise_clients=True)
    from fedhet.config import resolve_run

    assert run_id(resolve_run(run)) != run_id(resolve_run(stacked))


@pytest.mark.parametrize(("algorithm", "plugins", "training", "why"), [
    ("scaffold", ({"name": "vhl", "params": {"virtual_kind": "noise", "virtual_per_class": 6,
                                             "virtual_batch_size": 8}},), {},
     "vhl not declared vectorisable"),
    ("fedavg", ("mixup",), {}, "mixup not declared vectorisable"),
    ("fedavg", (), {"max_grad_norm": 1.0}, "gradient clipping is not vectorised"),
])
def test_what_cannot_be_stacked_trains_one_client_at_a_time(data_root, tmp_path, algorithm,
                                                             plugins, training, why):
    seq = trained(data_root, tmp_path, "seq", algorithm, plugins, **training)
    asked = trained(data_root, tmp_path, "vec", algorithm, plugins, vectorise_clients=True,
                    **training)
    assert why in asked[3]
    assert asked[1] == seq[1]  # the sequential numbers, bit for bit


@pytest.mark.parametrize("algorithm", ["scaffold", "moon"])
def test_a_stopped_stacked_run_resumes_exactly(data_root, tmp_path, algorithm):
    """Client state (control variates, kept momentum, MOON's previous models) survives the
    checkpoint: stopped after round 2 and resumed equals uninterrupted, bit for bit."""
    model = "simplecnn" if algorithm == "moon" else "cnn4"
    run = run_of(data_root, tmp_path, 1, algorithm, (), model, vectorise_clients=True,
                 keep_client_optimizer_state=True)
    train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None, stop_after=2)
    resumed = train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None)
    whole = train(run, tmp_path / "whole", log=lambda m: None)
    assert without_step_time(resumed) == without_step_time(whole)
    assert run_outputs(tmp_path / "resumed")[0] == run_outputs(tmp_path / "whole")[0]


def test_a_stacked_round_leaves_the_global_generator_as_one_at_a_time_does(data_root, tmp_path):
    from tiny_runs import federation_of

    states = []
    for stacked in (False, True):
        fed = federation_of(run_of(data_root, tmp_path, 1, "fedavg",
                                   vectorise_clients=stacked))
        torch.manual_seed(123)
        fed.run_round(1)
        states.append(torch.random.get_rng_state())
    assert torch.equal(states[0], states[1])
