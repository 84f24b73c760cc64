"""The training engine: SGD maths, aggregation, determinism, resume, divergence, outputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedhet.algorithms.base import ClientUpdate
from fedhet.config import ConfigError, resolve_run, run_id
from fedhet.data import load_dataset
from fedhet.engine.augment import random_crop
from fedhet.engine.divergence import group_divergence, layer_groups, segment_sq_norms, stage_groups
from fedhet.engine.federation import Federation, batch_slices, sample_clients
from fedhet.engine.flat import FlatModel
from fedhet.engine.seeding import generator
from fedhet.models import build_model
from fedhet.train import train
from run_outputs import metrics_without_wall_times, without_step_time

DATA = {"name": "digits10", "options": {"channels": 1, "size": 16, "train_per_class": 40,
                                        "test_per_class": 10}}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("datasets"))


def tiny_run(data_root, tmp_path, **training):
    return {
        "seed": 3,
        "dataset": {**DATA, "root": data_root},
        "partition": {"scheme": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 5,
                      "root": str(tmp_path / "partitions")},
        "model": {"name": "cnn4", "width": 0.25},
        "algorithm": {"name": "fedavg"},
        "training": {"rounds": 4, "clients_per_round": 2, "batch_size": 16, "lr": 0.05,
                     "momentum": 0.9, "weight_decay": 1e-4, **training},
        "runtime": {"device": "cpu", "checkpoint_every": 1},
    }


def test_flat_views_back_parameters_and_gradients():
    torch.manual_seed(0)
    model = build_model("cnn4", 10, 1, 16, 0.25)
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    flat = FlatModel(model)
    for n, p in model.named_parameters():
        assert torch.equal(p, reference[n])
    x, y = torch.randn(8, 1, 16, 16), torch.randint(0, 10, (8,))
    F.cross_entropy(model(x), y).backward()
    assert torch.equal(flat.grads, torch.cat([p.grad.flatten() for p in model.parameters()]))
    flat.params.zero_()
    assert all(float(p.detach().abs().sum()) == 0 for p in model.parameters())


def test_local_sgd_step_equals_torch_sgd(data_root, tmp_path):
    """One client, two local steps of our flat SGD = torch.optim.SGD on the same batches."""
    run = resolve_run(tiny_run(data_root, tmp_path, local_steps=2, augment="none",
                               clients_per_round=1))
    data = load_dataset(DATA["name"], data_root, DATA["options"])
    idx = [np.arange(0, 64)]
    fed = Federation(run, data, idx, torch.device("cpu"))
    ref = build_model("cnn4", 10, 1, 16, 0.25)
    ref.load_state_dict(fed.global_state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    update, _ = fed.train_client(0, 1, 0.05)

    gen = generator(torch.device("cpu"), run["seed"], "batches", 1, 0)
    perm = torch.randperm(64, generator=gen)
    ref.train()
    for sl in batch_slices(64, 16)[:2]:
        x = fed.augmenter.test(data.x_train[perm[sl]])
        opt.zero_grad()
        F.cross_entropy(ref(x), data.y_train[perm[sl]]).backward()
        opt.step()
    fed.work.load(update.params, update.buffers)
    for (n, p), (_, q) in zip(fed.work.module.named_parameters(), ref.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), n
    assert update.steps == 2


def test_aggregation_weights_models_and_bn_buffers_by_sample_count(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path, clients_per_round=2)
    run = resolve_run({**run, "model": {"name": "resnet10", "width": 0.125}})
    data = load_dataset(DATA["name"], data_root, DATA["options"])
    fed = Federation(run, data, [np.arange(0, 30), np.arange(30, 120)], torch.device("cpu"))
    result = fed.run_round(1)
    a, b = result.updates
    assert (a.num_samples, b.num_samples) == (30, 90)
    assert torch.allclose(fed.global_.params, 0.25 * a.params + 0.75 * b.params, atol=1e-6)
    assert fed.global_.buffers.numel() > 0  # the model has BatchNorm running statistics
    assert torch.allclose(fed.global_.buffers, 0.25 * a.buffers + 0.75 * b.buffers, atol=1e-6)


def test_client_sampling_depends_on_seed_and_round_only():
    first = [sample_clients(0, r, 10, 5) for r in range(1, 20)]
    assert first == [sample_clients(0, r, 10, 5) for r in range(1, 20)]
    assert first != [sample_clients(1, r, 10, 5) for r in range(1, 20)]
    assert all(len(set(c)) == 5 for c in first)


def test_batch_slices_never_leave_a_single_sample_batch():
    assert [s.stop - s.start for s in batch_slices(33, 16)] == [16, 17]
    assert [s.stop - s.start for s in batch_slices(32, 16)] == [16, 16]
    assert [s.stop - s.start for s in batch_slices(1, 16)] == [1]


def test_random_crop_shifts_within_padding():
    x = torch.arange(16.0).view(1, 1, 4, 4).repeat(64, 1, 1, 1)
    out = random_crop(x, 1, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    assert any(torch.equal(o, x[0]) for o in out)  # offset (1, 1) is the identity
    assert not all(torch.equal(o, x[0]) for o in out)
    assert all(set(o.unique().tolist()) <= set(range(16)) | {0.0} for o in out)


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "moon"])
def test_resumed_run_equals_uninterrupted_run(data_root, tmp_path, algorithm):
    run = tiny_run(data_root, tmp_path, keep_client_optimizer_state=True)
    run["algorithm"] = {"name": algorithm}
    if algorithm == "moon":
        run["model"] = {"name": "simplecnn", "width": 0.5}
    whole = train(run, tmp_path / "whole", tmp_path / "ckpt_whole", log=lambda m: None)
    stopped = train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None, stop_after=2)
    assert stopped["status"] == "stopped"
    assert (tmp_path / "ckpt" / "checkpoint.pt").exists()
    resumed = train(run, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None)
    assert without_step_time(resumed) == without_step_time(whole)
    assert metrics_without_wall_times(tmp_path / "whole" / "metrics.jsonl") == \
        metrics_without_wall_times(tmp_path / "resumed" / "metrics.jsonl")
    a = torch.load(tmp_path / "whole" / "model.pt")
    b = torch.load(tmp_path / "resumed" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "ckpt" / "checkpoint.pt").exists()  # removed after success


def test_same_seed_same_metrics_and_outputs(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path, rounds=2)
    first = train(run, tmp_path / "a", log=lambda m: None)
    second = train(run, tmp_path / "b", log=lambda m: None)
    assert without_step_time(first) == without_step_time(second)
    assert first["mean_step_seconds"] > 0
    assert metrics_without_wall_times(tmp_path / "a" / "metrics.jsonl") == \
        metrics_without_wall_times(tmp_path / "b" / "metrics.jsonl")
    final = json.loads((tmp_path / "a" / "final.json").read_text())
    assert final["status"] == "completed" and final["rounds_trained"] == 2
    assert set(final) >= {"best_acc", "best_round", "last_acc", "top5_mean_acc"}
    row = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert set(row) >= {"round", "test_acc", "test_loss", "train_loss", "seconds",
                        "client_drift", "weight_divergence", "weight_divergence_total"}
    assert row["client_drift"] > 0 and "head" in row["weight_divergence"]


def test_exploding_loss_ends_run_as_diverged(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path, lr=1e12, momentum=0.0)
    final = train(run, tmp_path / "out", log=lambda m: None)
    assert final["status"] == "diverged"
    assert final["diverged_round"] == final["rounds_trained"] <= 4
    assert json.loads((tmp_path / "out" / "final.json").read_text())["status"] == "diverged"


def test_snapshots_and_client_models_do_not_change_the_run_id(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path, rounds=2)
    plain = run_id(resolve_run(run))
    run["runtime"].update(snapshot_rounds=[1], save_client_models=[2])
    assert run_id(resolve_run(run)) == plain
    train(run, tmp_path / "out", log=lambda m: None)
    assert (tmp_path / "out" / "snapshots" / "round_1.pt").exists()
    assert len(list((tmp_path / "out" / "clients" / "round_2").glob("client_*.pt"))) == 2
    norms = [json.loads(line) for line in open(tmp_path / "out" / "classifier_norms.jsonl")]
    assert len(norms[0]["global"]) == 10 and len(norms[0]["clients"]) == 2


def test_centralized_training_uses_one_client_with_all_data(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path, rounds=1, centralized=True, clients_per_round=1)
    final = train(run, tmp_path / "out", log=lambda m: None)
    assert final["status"] == "completed"
    assert run_id(resolve_run(run)).startswith("digits10-central-")


def test_checkpoint_of_another_run_is_refused(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path)
    train(run, tmp_path / "a", tmp_path / "ckpt", log=lambda m: None, stop_after=1)
    run["training"]["lr"] = 0.01
    with pytest.raises(ConfigError, match="checkpoint"):
        train(run, tmp_path / "b", tmp_path / "ckpt", log=lambda m: None)


def test_bad_names_and_keys_are_reported(data_root, tmp_path):
    run = tiny_run(data_root, tmp_path)
    with pytest.raises(ConfigError, match="training.lrr"):
        resolve_run({**run, "training": {"lrr": 0.1}})
    with pytest.raises(ConfigError, match="valid: .*fedavg"):
        resolve_run({**run, "algorithm": {"name": "fedavgx"}})
    with pytest.raises(ConfigError, match="valid: .*resnet18"):
        train({**run, "model": {"name": "resnet19"}}, tmp_path / "o", log=lambda m: None)
    with pytest.raises(ConfigError, match="valid: .*digits10"):
        train({**run, "dataset": {"name": "cifar11"}}, tmp_path / "o", log=lambda m: None)


def test_weight_divergence_total_is_the_mean_distance_to_the_new_global_model(data_root, tmp_path):
    """Two clients at known offsets: client A (1 sample) at w + 4u, client B (3 samples) at w,
    so FedAvg's new model is w + u and the distances are 3 and 1 (‖u‖ = 1)."""
    run = resolve_run(tiny_run(data_root, tmp_path, clients_per_round=2))
    data = load_dataset(DATA["name"], data_root, DATA["options"])
    fed = Federation(run, data, [np.arange(0, 30), np.arange(30, 60)], torch.device("cpu"))
    w = fed.global_.params.clone()
    u = torch.zeros_like(w)
    u[:2] = torch.tensor([0.6, 0.8])
    buffers = fed.global_.buffers.clone()
    offsets = {0: (w + 4 * u, 1), 1: (w.clone(), 3)}

    def fake_client(client, round, lr):
        params, n = offsets[client]
        return ClientUpdate(client, params, buffers, n, 1), torch.zeros(())

    fed.train_client = fake_client
    result = fed.run_round(1)
    assert torch.allclose(fed.global_.params, w + u, atol=1e-6)
    assert result.weight_divergence_total.item() == pytest.approx(2.0, rel=1e-5)  # (3 + 1) / 2
    assert result.client_drift.item() == pytest.approx(5.0, rel=1e-5)  # (9 + 1) / 2


def test_stage_and_layer_divergence_group_the_parameters_of_the_model():
    torch.manual_seed(0)
    flat = FlatModel(build_model("resnet18", 10, 3, 16, 0.125))
    layers, stages = layer_groups(flat), stage_groups(flat)
    convs = [n for n, m in flat.module.named_modules()
             if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert list(layers) == convs  # every weight layer, in model order
    # the pooled penultimate stage has no parameters of its own
    assert list(stages) == ["layer1", "layer2", "layer3", "layer4", "head"]
    # client 0 moved only layer2.0.conv1 by 0.5 per weight, client 1 did not move
    diffs = torch.zeros(2, flat.params.numel())
    seg = next(s for s in flat.param_segments if s.name == "layer2.0.conv1.weight")
    diffs[0, seg.offset:seg.offset + seg.numel] = 0.5
    sq = segment_sq_norms(flat, diffs)
    by_layer = group_divergence(sq, layers)
    by_stage = group_divergence(sq, stages)
    expected = 0.5 * math.sqrt(seg.numel) / 2  # mean over the two clients
    assert by_layer["layer2.0.conv1"].item() == pytest.approx(expected)
    assert by_stage["layer2"].item() == pytest.approx(expected)
    assert sum(v.item() for v in by_layer.values()) == pytest.approx(expected)
    assert by_stage["layer1"].item() == 0 and by_stage["head"].item() == 0


def test_seed_global_seeds_the_cpu_generator_as_torch_manual_seed_does():
    from fedhet.engine.seeding import derive_seed, seed_global

    torch.manual_seed(derive_seed(3, "client", 1, 2))
    expected = torch.rand(5)
    torch.rand(7)  # move the state on
    seed_global(torch.device("cpu"), 3, "client", 1, 2)
    assert torch.equal(torch.rand(5), expected)


def test_client_fraction_sets_the_clients_of_a_round():
    run = resolve_run({"partition": {"num_clients": 57}, "training": {"client_fraction": 0.2}})
    assert run["training"]["clients_per_round"] == 11  # FedLGD's int(0.2 · 57)
    assert resolve_run(run) == run  # resolving again changes nothing
    assert run_id(run) != run_id(resolve_run({"partition": {"num_clients": 57},
                                              "training": {"clients_per_round": 11}}))
    tiny = resolve_run({"partition": {"num_clients": 3}, "training": {"client_fraction": 0.1}})
    assert tiny["training"]["clients_per_round"] == 1
    with pytest.raises(ConfigError, match="disagree"):
        resolve_run({"partition": {"num_clients": 57},
                     "training": {"client_fraction": 0.2, "clients_per_round": 5}})
    with pytest.raises(ConfigError, match="client_fraction"):
        resolve_run({"training": {"client_fraction": 1.5}})
