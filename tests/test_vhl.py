"""VHL and FedDF plug-ins: SupCon maths, detached virtual features, the do-nothing setting
equals the base run bit for bit, the engine hooks, FedDF changes the global model."""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from fedhet.algorithms.base import ClientContext
from fedhet.config import resolve_run
from fedhet.engine.augment import Augmenter
from fedhet.engine.flat import FlatModel
from fedhet.methods.feddf.plugin import (
    distillation_loss,  # importing registers the plug-ins
)
from fedhet.algorithms.losses import supcon_loss
from fedhet.methods.vhl.plugin import VHL, calibration_loss
from fedhet.models import build_model
from fedhet.plugins import PLUGINS
from fedhet.train import train
from run_outputs import run_outputs

DATA = {"name": "digits10", "options": {"channels": 3, "size": 16, "train_per_class": 30,
                                        "test_per_class": 10}}
OFF = {"virtual_classes": 0, "virtual_batch_size": 0, "calibration_weight": 0.0}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("vhl")
    return {"data": str(base / "datasets"), "parts": str(base / "partitions")}


def tiny_run(roots, algorithm="fedavg", plugins=(), rounds=2):
    return {
        "seed": 5,
        "dataset": {**DATA, "root": roots["data"]},
        "partition": {"scheme": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 5,
                      "root": roots["parts"]},
        "model": {"name": "cnn4", "width": 0.125},
        "algorithm": {"name": algorithm},
        "plugins": list(plugins),
        "training": {"rounds": rounds, "clients_per_round": 2, "batch_size": 16, "lr": 0.05,
                     "momentum": 0.9, "weight_decay": 1e-4},
        "runtime": {"device": "cpu"},
    }


# -- SupCon ----------------------------------------------------------------------------------


def test_supcon_matches_hand_computation():
    tau = 0.5
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])
    labels = torch.tensor([0, 1, 0, 1])
    e = math.exp
    # anchor 0: others 1, 2, 3 with dot products 0, 1, 0.6; positive 2
    l0 = -(1 / tau - math.log(e(0) + e(1 / tau) + e(0.6 / tau)))
    # anchor 1: others 0, 2, 3 with 0, 0, 0.8; positive 3
    l1 = -(0.8 / tau - math.log(e(0) + e(0) + e(0.8 / tau)))
    # anchor 2 mirrors anchor 0; anchor 3: others 0, 1, 2 with 0.6, 0.8, 0.6; positive 1
    l3 = -(0.8 / tau - math.log(e(0.6 / tau) + e(0.8 / tau) + e(0.6 / tau)))
    expected = (l0 + l1 + l0 + l3) / 4
    assert supcon_loss(z, labels, tau).item() == pytest.approx(expected, rel=1e-6)
    # τ / base τ scales the loss; anchors without positives are left out of the mean
    assert supcon_loss(z, labels, tau, base_temperature=1.0).item() == pytest.approx(tau * expected, rel=1e-6)
    lone = supcon_loss(torch.cat([z, torch.tensor([[0.0, -1.0]])]), torch.tensor([0, 1, 0, 1, 7]), tau)
    assert torch.isfinite(lone)


def test_supcon_equals_a_loop_over_anchors_with_several_positives():
    gen = torch.Generator().manual_seed(0)
    z = torch.nn.functional.normalize(torch.randn(9, 5, generator=gen), dim=1)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 0, 2, 3])
    tau, terms = 0.07, []
    for i in range(9):
        others = [a for a in range(9) if a != i]
        positives = [p for p in others if labels[p] == labels[i]]
        if not positives:
            continue
        denom = torch.logsumexp(torch.stack([z[i] @ z[a] / tau for a in others]), 0)
        terms.append(-sum((z[i] @ z[p] / tau - denom) for p in positives) / len(positives))
    assert supcon_loss(z, labels, tau).item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)


def test_supcon_without_any_positive_is_zero_and_differentiable():
    z = torch.nn.functional.normalize(torch.randn(4, 3, generator=torch.Generator().manual_seed(2)),
                                      dim=1).requires_grad_()
    loss = supcon_loss(z, torch.tensor([0, 1, 2, 3]))
    assert loss.item() == 0.0
    loss.backward()
    assert z.grad is not None and float(z.grad.abs().sum()) == 0.0


def test_no_gradient_reaches_virtual_features_through_calibration():
    gen = torch.Generator().manual_seed(1)
    natural = torch.randn(6, 8, generator=gen, requires_grad=True)
    virtual = torch.randn(6, 8, generator=gen, requires_grad=True)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    calibration_loss(natural, virtual, y, y.flip(0)).backward()
    assert virtual.grad is None or float(virtual.grad.abs().sum()) == 0.0
    assert natural.grad is not None and float(natural.grad.abs().sum()) > 0.0


# -- the do-nothing setting -------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_vhl_switched_off_equals_the_base_run_bit_for_bit(roots, tmp_path, algorithm):
    train(tiny_run(roots, algorithm), tmp_path / "base", log=lambda m: None)
    train(tiny_run(roots, algorithm, [{"name": "vhl", "params": OFF}]), tmp_path / "vhl",
          log=lambda m: None)
    base_rows, base_model = run_outputs(tmp_path / "base")
    vhl_rows, vhl_model = run_outputs(tmp_path / "vhl")
    assert base_rows == vhl_rows
    assert base_model.keys() == vhl_model.keys()
    for key in base_model:
        assert torch.equal(base_model[key], vhl_model[key]), key


# -- engine hooks ------------------------------------------------------------------------------


def test_extra_classes_and_eval_logits():
    resolved = resolve_run({"plugins": [{"name": "vhl"}]})["plugins"][0]["params"]
    assert VHL.extra_classes(10, resolved) == 10  # C_v = C by default
    assert VHL.extra_classes(10, {**resolved, "virtual_classes": 4}) == 4
    assert VHL.extra_classes(10, {**resolved, **OFF}) == 0
    assert VHL.extra_classes(10, {**resolved, "variant": "vfa"}) == 0
    logits = torch.tensor([[0.1, 0.2, 0.9, 0.0], [0.5, 0.1, 0.2, 0.3]])
    natural = VHL({**resolved, "eval_protocol": "natural"}).eval_logits(logits, 2)
    assert natural.argmax(1).tolist() == [1, 0]
    every = VHL({**resolved, "eval_protocol": "all"}).eval_logits(logits, 2)
    assert every.argmax(1).tolist() == [2, 0]  # a virtual prediction: wrong for any label < 2


def fake_federation(tmp_path, params, num_classes=10, cv=10):
    """What VHL.setup reads from a Federation, with a model of C + C_v outputs."""
    run = resolve_run({"dataset": {"name": "digits10", "root": str(tmp_path)},
                       "training": {"batch_size": 8},
                       "plugins": [{"name": "vhl", "params": params}]})
    def flat():
        torch.manual_seed(0)
        return FlatModel(build_model("cnn4", num_classes + cv, 3, 16, 0.125))
    return SimpleNamespace(
        run=run, device=torch.device("cpu"), seed=3, num_classes=num_classes,
        global_model=flat(), work_model=flat(), x_train=torch.zeros(1, 3, 16, 16, dtype=torch.uint8),
        augmenter=Augmenter("crop_flip", (0.5,) * 3, (0.25,) * 3, 16, torch.device("cpu")),
        channels_last=False, autocast=nullcontext(),
    ), run["plugins"][0]["params"]


@pytest.mark.parametrize("layer", ["penultimate", "block2"])
def test_vhl_step_trains_on_natural_and_virtual_in_one_pass(tmp_path, layer):
    opts = {"virtual_kind": "noise", "virtual_per_class": 6, "calibration_layer": layer}
    fed, params = fake_federation(tmp_path, opts)
    plugin = PLUGINS.get("vhl")(params)
    plugin.setup(fed)
    work = fed.work_model
    ctx = ClientContext(client=1, round=2, lr=0.1, params=work.params, grads=work.grads,
                        buffers=work.buffers, global_params=fed.global_model.params,
                        global_buffers=fed.global_model.buffers, num_samples=8, model=work.module)
    x = torch.randn(8, 3, 16, 16)
    y = torch.arange(8) % 10
    plugin.client_begin(ctx)
    plugin.prepare_step(ctx)  # the step's virtual batch, drawn outside the step
    out = plugin.forward(ctx, x, y)
    assert out.logits.shape == (16, 20) and out.features.shape[0] == 16
    assert out.targets[8:].min() >= 10  # virtual labels k + C
    out.loss.backward()
    assert torch.isfinite(out.loss) and float(work.grads.abs().sum()) > 0
    first = out.inputs[8:].clone()
    plugin.client_begin(ctx)  # the same (seed, round, client) draws the same virtual batch
    plugin.prepare_step(ctx)
    assert torch.equal(plugin.forward(ctx, x, y).inputs[8:], first)
    ctx.client = 2
    plugin.client_begin(ctx)
    plugin.prepare_step(ctx)
    assert not torch.equal(plugin.forward(ctx, x, y).inputs[8:], first)


def test_setup_refuses_a_model_without_virtual_outputs(tmp_path):
    fed, params = fake_federation(tmp_path, {"virtual_kind": "noise"}, cv=0)
    with pytest.raises(ValueError, match="engine must build"):
        PLUGINS.get("vhl")(params).setup(fed)


def _train_or_skip(run, out):
    try:
        return train(run, out, log=lambda m: None)
    except ValueError as err:
        if "engine must build" in str(err):
            pytest.skip("the engine does not add Plugin.extra_classes outputs yet")
        raise


@pytest.mark.parametrize("params", [
    {"virtual_kind": "noise", "eval_protocol": "natural"},
    {"virtual_kind": "noise", "variant": "naive"},
    {"variant": "vfa", "calibration_layer": "block3"},
    {"virtual_kind": "noise", "variant": "vftl", "vftl_steps": 3},
])
def test_vhl_variants_train_end_to_end(roots, tmp_path, params):
    final = _train_or_skip(tiny_run(roots, "fednova", [{"name": "vhl", "params": params}]),
                           tmp_path)
    assert final["status"] == "completed"
    model = torch.load(tmp_path / "model.pt", weights_only=True)
    cv = 0 if params.get("variant") == "vfa" else 10
    assert model["head.weight"].shape[0] == 10 + cv


def test_evaluate_run_reads_a_vhl_model_with_virtual_outputs(roots, tmp_path):
    from fedhet.saved import evaluate_run

    params = {"virtual_kind": "noise", "virtual_per_class": 8, "eval_protocol": "natural"}
    _train_or_skip(tiny_run(roots, plugins=[{"name": "vhl", "params": params}]), tmp_path)
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    result = evaluate_run(tmp_path, device="cpu")
    assert result["test_acc"] == pytest.approx(last["test_acc"])
    assert result["test_loss"] == pytest.approx(last["test_loss"], rel=1e-5)


# -- FedDF ----------------------------------------------------------------------------------------


def test_distillation_loss_is_zero_for_identical_logits():
    logits = torch.randn(4, 10)
    assert distillation_loss(logits, logits, 2.0).item() == pytest.approx(0.0, abs=1e-6)
    assert distillation_loss(logits, torch.randn(4, 10), 2.0).item() > 0


@pytest.mark.parametrize("unlabeled", ["noise", "digits100"])
def test_feddf_runs_and_changes_the_global_model(roots, tmp_path, unlabeled):
    params = {"unlabeled": unlabeled, "steps": 3, "batch_size": 8, "validation_size": 0,
              "unlabeled_options": {"train_per_class": 2, "test_per_class": 1}}
    if unlabeled == "noise":
        params.pop("unlabeled_options")
    train(tiny_run(roots, rounds=1), tmp_path / "base", log=lambda m: None)
    final = train(tiny_run(roots, rounds=1, plugins=[{"name": "feddf", "params": params}]),
                  tmp_path / "feddf", log=lambda m: None)
    assert final["status"] == "completed"
    _, base = run_outputs(tmp_path / "base")
    _, distilled = run_outputs(tmp_path / "feddf")
    changed = [k for k in base if base[k].is_floating_point() and not torch.equal(base[k], distilled[k])]
    assert changed and all(torch.isfinite(distilled[k]).all() for k in changed)



@pytest.mark.parametrize("scores, steps_taken, kept", [
    ([1.0, 0.5, 0.5], 4, 0),  # never better than the aggregated model: stop, keep it
    ([0.1, 0.2, 0.9, 0.3, 0.3], 8, 2),  # best at step 4: keep that student, stop at step 8
])
def test_feddf_early_stopping_keeps_the_best_validated_student(roots, scores, steps_taken, kept):
    """FedDF's early stopping: validated every `eval_every` steps, stopped after `patience`
    steps without improvement, the round's student reset to its best-validated state."""
    from fedhet.config import resolve_run
    from fedhet.data import load_dataset
    from fedhet.engine.federation import Federation
    from fedhet.partition import client_partition

    params = {"unlabeled": "noise", "steps": 12, "batch_size": 8,
              "validation_size": 16, "eval_every": 2, "patience": 4}
    run = resolve_run(tiny_run(roots, rounds=1, plugins=[{"name": "feddf", "params": params}]))
    data = load_dataset(run["dataset"]["name"], run["dataset"]["root"], run["dataset"]["options"])
    indices, angles = client_partition(run, data)
    fed = Federation(run, data, indices, torch.device("cpu"), angles)
    plugin = fed.plugins[0]
    states = []

    def scripted_score(f):
        states.append(f.global_model.params.clone())
        return scores[len(states) - 1]

    plugin._validation_accuracy = scripted_score
    fed.run_round(1)
    assert len(states) == len(scores) and plugin.last_steps == steps_taken
    assert not torch.equal(states[0], states[-1])  # distillation did move the student
    assert torch.equal(fed.global_.params, states[kept])
    assert plugin.last_gain == pytest.approx(scores[kept] - scores[0])
