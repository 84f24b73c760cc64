"""The engine's extension points, each exercised by a toy plug-in declared for the test."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F

from fedhet import catalog
from fedhet.algorithms.base import hard_labels
from fedhet.config import resolve_run, run_id
from fedhet.data import load_dataset
from fedhet.declare import Method
from fedhet.engine.evaluation import evaluate_model
from fedhet.engine.federation import Federation
from fedhet.engine.server import ClientData, EvalSet, ServerView
from fedhet.engine.sgd import sgd_step
from fedhet.models import MODELS, build_model
from fedhet.plugins import PLUGINS, Plugin
from fedhet.partition import client_partition
from fedhet.saved import open_run
from fedhet.train import train
from tiny_runs import BASE, federation_of, tiny_run


@pytest.fixture
def toy(monkeypatch):
    """Declare and register a plug-in class under a test name for one test."""
    declarations = catalog._declarations()

    def declare(name: str, cls: type[Plugin]) -> str:
        cls.name = name
        monkeypatch.setitem(declarations, name, Method(
            name=name, kind="plugin", summary="a toy plug-in of the tests", module=__name__))
        monkeypatch.setitem(PLUGINS._items, name, cls)
        return name

    return declare


def federation(tmp_path, plugins=(), **training):
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["training"].update(training)
    run["plugins"] = [{"name": p} for p in plugins]
    return federation_of(run)


def test_plugins_see_a_narrow_server_view(tmp_path, toy):
    seen = []

    class Spy(Plugin):
        def setup(self, server):
            seen.append(server)

    fed = federation(tmp_path, [toy("spy", Spy)])
    (server,) = seen
    assert isinstance(server, ServerView) and not isinstance(server, Federation)
    assert server.global_model is fed.global_ and server.num_clients == 4
    fresh = server.new_model()
    assert torch.equal(fresh.params, fed.global_.params)  # the run's initial model


def test_a_plugin_supplies_the_clients_data(tmp_path, toy):
    """Clients train on distilled, already normalised images with soft labels and never on
    the raw images of their partition."""
    distilled = torch.randn(5, 1, 16, 16)  # digits10: one channel, 16 × 16
    soft = F.softmax(torch.randn(5, 10), dim=1)
    batches = []

    class Distilled(Plugin):
        def client_data(self, client, round, data):
            assert data.index is not None  # the partition comes first
            return ClientData(x=distilled, y=soft, normalized=True)

        def transform_batch(self, ctx, x, y):
            batches.append((x.clone(), y.clone()))
            return x, y

    fed = federation(tmp_path, [toy("distilled", Distilled)])
    result = fed.run_round(1)
    assert len(batches) == 2 * 3  # two clients, three steps
    for x, y in batches:
        # every row is one of the distilled images, with its own soft label
        match = (x.flatten(1)[:, None, :] == distilled.flatten(1)[None]).all(-1)
        assert match.any(1).all()
        torch.testing.assert_close(y, soft[match.float().argmax(1)])
    assert all(u.num_samples == 5 for u in result.updates)
    assert bool(result.finite)


def test_round_hooks_run_around_the_clients(tmp_path, toy):
    calls = []

    class Rounds(Plugin):
        def round_begin(self, round, clients):
            calls.append(("begin", round, tuple(clients)))

        def client_begin(self, ctx):
            calls.append(("client", ctx.round, ctx.client))

        def round_end(self, round, updates):
            calls.append(("end", round, tuple(u.client for u in updates)))

    fed = federation(tmp_path, [toy("rounds", Rounds)])
    result = fed.run_round(1)
    a, b = result.clients
    assert calls == [("begin", 1, (a, b)), ("client", 1, a), ("client", 1, b), ("end", 1, (a, b))]


def test_a_batch_hook_with_soft_targets(tmp_path, toy):
    """A Mixup-like hook: mixed images and soft targets reach the task loss."""
    losses = []

    class Mix(Plugin):
        def transform_batch(self, ctx, x, y):
            target = F.one_hot(y, 10).float()
            flipped = torch.flip(x, [0])
            return 0.7 * x + 0.3 * flipped, 0.7 * target + 0.3 * torch.flip(target, [0])

        def extra_loss(self, ctx, out):
            assert out.targets.shape == out.logits.shape  # soft targets, N×C
            expected = -(out.targets * F.log_softmax(out.logits, 1)).sum(1).mean()
            torch.testing.assert_close(out.loss, expected)
            losses.append(float(out.loss.detach()))
            return None

    fed = federation(tmp_path, [toy("mix", Mix)])
    fed.run_round(1)
    assert len(losses) == 6


def test_soft_one_hot_targets_give_the_hard_label_loss():
    logits = torch.randn(6, 4, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 1, 2, 0])
    soft = F.one_hot(y, 4).double()
    torch.testing.assert_close(F.cross_entropy(logits, soft), F.cross_entropy(logits, y))
    assert torch.equal(hard_labels(soft), y) and torch.equal(hard_labels(y), y)


def test_per_sample_domain_ids_reach_the_losses(tmp_path, toy):
    seen = []

    class Domains(Plugin):
        def client_data(self, client, round, data):
            return ClientData(x=data.x, y=data.y, index=data.index, angles=data.angles,
                              domains=torch.full((data.size,), 100 + client))

        def extra_loss(self, ctx, out):
            seen.append((ctx.client, ctx.domains.clone()))
            return None

    fed = federation(tmp_path, [toy("domains", Domains)])
    fed.run_round(1)
    assert seen and all(torch.all(d == 100 + k) and d.numel() == 8 for k, d in seen)


def test_domain_ids_of_a_domain_dataset_are_on_every_batch(tmp_path, toy):
    seen = []

    class Record(Plugin):
        def extra_loss(self, ctx, out):
            seen.append((ctx.client, ctx.domains.clone()))
            return None

    run = copy.deepcopy(BASE)
    run["dataset"] = {"name": "digits_domains", "root": str(tmp_path / "data"),
                      "options": {"train_per_class": 6, "test_per_class": 2}}
    run["partition"] = {"scheme": "domain", "num_clients": 5, "root": str(tmp_path / "p")}
    run["plugins"] = [{"name": toy("record", Record)}]
    run = resolve_run(run)
    data = load_dataset(run["dataset"]["name"], run["dataset"]["root"], run["dataset"]["options"])
    indices, angles = client_partition(run, data)
    fed = Federation(run, data, indices, torch.device("cpu"), angles)
    fed.run_round(1)
    domains = torch.as_tensor(data.domain_train)
    for client, d in seen:
        assert set(d.tolist()) <= set(domains[torch.as_tensor(indices[client])].tolist())


def test_sgd_step_is_torch_sgd():
    torch.manual_seed(0)
    w0 = torch.randn(7, dtype=torch.float64)
    grads = [torch.randn(7, dtype=torch.float64) for _ in range(4)]
    ref = torch.nn.Parameter(w0.clone())
    opt = torch.optim.SGD([ref], lr=0.1, momentum=0.9, weight_decay=0.01)
    w, buf = w0.clone(), torch.zeros(7, dtype=torch.float64)
    for g in grads:
        ref.grad = g.clone()
        opt.step()
        sgd_step(w, g.clone(), 0.1, 0.9, 0.01, buf)
    torch.testing.assert_close(w, ref.detach())


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_bytes_per_round(tmp_path, algorithm):
    run = copy.deepcopy(BASE)
    run["algorithm"] = {"name": algorithm}
    run["dataset"]["root"] = str(tmp_path / "data")
    run["partition"]["root"] = str(tmp_path / "parts")
    run = resolve_run(run)
    data = load_dataset("digits10", run["dataset"]["root"], run["dataset"]["options"])
    fed = Federation(run, data, client_partition(run, data)[0], torch.device("cpu"))
    result = fed.run_round(1)
    params, buffers = 4 * fed.global_.params.numel(), 4 * fed.global_.buffers.numel()
    # each of the 2 clients receives the model (+ SCAFFOLD's c) and returns it (+ its Δc)
    per_client = params + buffers + (params if algorithm == "scaffold" else 0)
    assert result.bytes_down == result.bytes_up == 2 * per_client
    assert result.seconds > 0


@pytest.mark.parametrize("name", MODELS.names())
def test_split_points_by_position(name):
    model = build_model(name, 10, 3, 32, 0.125).eval()
    x = torch.randn(2, 3, 32, 32)
    for k, point in enumerate(model.split_points, start=1):
        assert model.split_point(k) == model.split_point(str(k)) == point
        torch.testing.assert_close(model.forward_to(x, k), model.forward_to(x, point))
    with pytest.raises(ValueError, match="out of range"):
        model.split_point(len(model.split_points) + 1)


def test_test_domains_rotated_copies_and_client_models_are_scored(tmp_path, toy):
    """Accuracy per test domain (from the same passes), on a plug-in's rotated copy of the test
    set, and of each local client model, in metrics.jsonl and final.json."""

    class Rotated(Plugin):
        def setup(self, server):
            self.server = server

        def test_sets(self):
            s = self.server
            return [EvalSet("rot90", s.x_test, s.y_test,
                            angles=torch.full((len(s.y_test),), 90.0))]

    run = copy.deepcopy(BASE)
    run["dataset"] = {"name": "digits_domains", "root": str(tmp_path / "data"),
                      "options": {"train_per_class": 6, "test_per_class": 2}}
    run["partition"] = {"scheme": "domain", "num_clients": 5, "root": str(tmp_path / "p")}
    run["training"]["clients_per_round"] = 2
    run["eval"] = {"client_models": True}
    run["plugins"] = [{"name": toy("rotated", Rotated)}]
    final = train(run, tmp_path / "out", log=lambda m: None)
    row = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[-1])
    data = load_dataset("digits_domains", run["dataset"]["root"], run["dataset"]["options"])
    assert set(row["domain_acc"]) == set(data.domain_names)
    counts = torch.bincount(torch.as_tensor(data.domain_test))
    weighted = sum(row["domain_acc"][name] * int(counts[d])
                   for d, name in enumerate(data.domain_names))
    assert weighted / len(data.y_test) == pytest.approx(row["test_acc"])
    assert set(row["test_sets"]) == {"rot90"} and len(row["client_acc"]) == 2
    assert final["last_domain_acc"] == row["domain_acc"]
    assert final["last_test_sets"] == row["test_sets"]

    # the rotated copy is scored on rotated images: equal to evaluating them directly
    saved = open_run(tmp_path / "out", device="cpu")
    x, y = saved.test_set()
    acc = evaluate_model(saved.model, x, y, saved.augmenter, logit_map=saved.logit_map,
                         angles=torch.full((len(y),), 90.0))[0]
    assert acc == pytest.approx(row["test_sets"]["rot90"])


def test_client_model_scores_are_off_by_default_and_keep_run_ids():
    plain = resolve_run({})
    assert plain["eval"]["client_models"] is False
    assert run_id(plain) == run_id(resolve_run({"eval": {"client_models": False}}))


def test_a_plugin_leaves_files_beside_the_model(tmp_path, toy):
    class Stats(Plugin):
        def round_end(self, round, updates):
            self.rounds = round

        def files(self):
            return {"stats.json": {"rounds": self.rounds},
                    "prototypes.pt": {"means": torch.ones(2, 3)}}

    run = copy.deepcopy(BASE)
    run["dataset"]["root"] = str(tmp_path / "data")
    run["partition"]["root"] = str(tmp_path / "parts")
    run["plugins"] = [{"name": toy("stats", Stats)}]
    final = train(run, tmp_path / "out", log=lambda m: None)
    assert final["files"] == ["plugins/stats/stats.json", "plugins/stats/prototypes.pt"]
    files = open_run(tmp_path / "out", device="cpu").files
    assert json.loads(files["plugins/stats/stats.json"].read_text()) == {"rounds": 2}
    assert torch.equal(torch.load(files["plugins/stats/prototypes.pt"])["means"],
                       torch.ones(2, 3))


class _Head(Plugin):
    """A projection head trained with the model through an extra loss (a toy FedBR θ)."""

    def modules(self, model):
        return {"proj": torch.nn.Linear(model.feature_dim, 3)}

    def extra_loss(self, ctx, out):
        return ctx.modules[self.module_key("proj")](out.features).pow(2).mean()


def test_plugin_modules_are_averaged_saved_and_rebuilt(tmp_path, toy):
    name = toy("head", _Head)
    run = copy.deepcopy(BASE)
    run["dataset"]["root"] = str(tmp_path / "data")
    run["partition"]["root"] = str(tmp_path / "parts")
    run["algorithm"] = {"name": "fedprox", "params": {"mu": 10.0}}
    run["plugins"] = [{"name": name}]
    run["runtime"]["save_client_models"] = [2]
    run = resolve_run(run)
    data = load_dataset("digits10", run["dataset"]["root"], run["dataset"]["options"])
    fed = Federation(run, data, client_partition(run, data)[0], torch.device("cpu"))
    assert fed.modules_global is not None and fed.server.plugin_modules is not None
    before = fed.modules_global.params.clone()
    result = fed.run_round(1)
    # every client moved the head; the server's copy is their sample-weighted average
    for u in result.updates:
        assert not torch.equal(u.module_params, before)
    n = torch.tensor([u.num_samples for u in result.updates], dtype=torch.float32)
    expect = sum(w * u.module_params for w, u in zip(n / n.sum(), result.updates))
    torch.testing.assert_close(fed.modules_global.params, expect)
    # FedProx's correction does not touch them: the head's size is not in the model's vector
    assert fed.global_.params.numel() == result.updates[0].params.numel()
    model_bytes = 4 * (fed.global_.params.numel() + fed.global_.buffers.numel())
    head_bytes = 4 * fed.modules_global.params.numel()
    assert result.bytes_up == 2 * (model_bytes + head_bytes)

    final = train(run, tmp_path / "out", log=lambda m: None)
    state = torch.load(tmp_path / "out" / "model.pt", weights_only=True)
    assert {"plugin_modules.head-proj.weight", "plugin_modules.head-proj.bias"} <= set(state)
    saved = open_run(tmp_path / "out", device="cpu")  # no plug-in branch: rebuilt generically
    torch.testing.assert_close(saved.model.plugin_modules["head-proj"].weight,
                               state["plugin_modules.head-proj.weight"])
    assert saved.evaluate()[0] == pytest.approx(final["last_acc"])
    assert all("plugin_modules.head-proj.weight" in m.state_dict()
               for m in saved.client_models().values())


def test_a_resumed_run_with_plugin_modules_equals_an_uninterrupted_one(tmp_path, toy):
    name = toy("head", _Head)
    run = copy.deepcopy(BASE)
    run["training"]["rounds"] = 3
    run["dataset"]["root"] = str(tmp_path / "data")
    run["partition"]["root"] = str(tmp_path / "parts")
    run["plugins"] = [{"name": name}]
    train(run, tmp_path / "whole", log=lambda m: None)
    train(run, tmp_path / "cut", tmp_path / "ckpt", stop_after=1, log=lambda m: None)
    train(run, tmp_path / "cut", tmp_path / "ckpt", log=lambda m: None)
    a = torch.load(tmp_path / "whole" / "model.pt", weights_only=True)
    b = torch.load(tmp_path / "cut" / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_soft_targets_reach_a_plugin_with_extra_classes(tmp_path, toy):
    """Mixup-like soft targets on top of VHL: the virtual classes get no target mass, and
    VHL's calibration reads hard labels."""

    class Mix(Plugin):
        def transform_batch(self, ctx, x, y):
            target = F.one_hot(y, 10).float()
            return 0.5 * (x + torch.flip(x, [0])), 0.5 * (target + torch.flip(target, [0]))

    run = copy.deepcopy(BASE)
    run["dataset"]["root"] = str(tmp_path / "data")
    run["partition"]["root"] = str(tmp_path / "parts")
    run["plugins"] = [{"name": toy("mix", Mix)},
                      {"name": "vhl", "params": {"virtual_kind": "noise", "virtual_per_class": 4}}]
    final = train(run, tmp_path / "out", log=lambda m: None)
    assert final["status"] == "completed"
