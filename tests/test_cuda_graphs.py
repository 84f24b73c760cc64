"""A client's local step as a CUDA graph (`fedhet.engine.graphs`), checked on a CPU: which runs
capture and which run eager, and why (the methods' declarations, `fedhet methods`, the log and
resolved.yaml); the runner's held tensors, checked by a stand-in for the graph
(`fedhet.engine.graphcheck.CheckedGraph`) that fails a step reading a value baked in at capture
(the learning rate as a float, the batch's positions or a client's tensor not held, a branch on
the round or the step, a host sync); every built-in method declared capturable replays, with
the numbers of the eager step, and every one declared not is caught by the stand-in.
test_gpu.py compares graph and eager runs on a GPU."""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import pytest
import torch
import yaml

from fedhet import catalog, config
from fedhet.cli.methods import describe
from fedhet.config import ConfigError, resolve_run, run_id
from fedhet.declare import UNDECLARED, Method
from fedhet.engine import client as client_module
from fedhet.engine import graphs
from fedhet.engine.graphcheck import CheckedGraph, GraphBreak
from fedhet.engine.graphs import GraphMode, StepGraphs, graph_mode
from fedhet.methods.baselines.algorithms import Scaffold
from tiny_runs import federation_of

pytestmark = pytest.mark.usefixtures("one_thread")
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
ROUNDS = 2  # the second with another learning rate, and clients met again
# a graph that checks the step at each replay; every batch shape captured after one warm-up
CHECKED = GraphMode(True, "checked on a CPU", cuda=False, new_graph=CheckedGraph,
                    warm_up=nullcontext, warmup_steps=1)
# eager steps as on CUDA: the learning rate read from a tensor (what a replay computes with)
EAGER = GraphMode(False, "eager", cuda=True)
OPTIONS = {"channels": 3, "size": 16, "train_per_class": 12, "test_per_class": 3}
# parameters that keep a method's run small and offline (others run at their defaults)
PARAMS = {
    "vhl": {"virtual_kind": "noise", "virtual_per_class": 6},
    "feddf": {"unlabeled": "noise", "steps": 2, "validation_size": 0},
    "fedbr": {"proxy": "digits10", "proxy_options": OPTIONS},
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return tmp_path_factory.mktemp("datasets"), tmp_path_factory.mktemp("partitions")


def a_run(roots, algorithm: str = "fedavg", plugins: list | None = None, **training) -> dict:
    """Four Dirichlet clients of unequal sizes (short last batches of several lengths), three
    a round, colour images (cropped and flipped), momentum, weight decay and a decaying lr."""
    data, parts = roots
    return {
        "seed": 2,
        "dataset": {"name": "digits10", "root": str(data), "options": OPTIONS},
        "partition": {"scheme": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 5,
                      "root": str(parts)},
        "model": {"name": "cnn4", "width": 0.25},
        "algorithm": {"name": algorithm, "params": PARAMS.get(algorithm, {})},
        "plugins": [{"name": p, "params": PARAMS.get(p, {})} for p in plugins or []],
        "training": {"rounds": ROUNDS, "clients_per_round": 3, "batch_size": 8, "lr": 0.05,
                     "lr_decay": 0.9, "momentum": 0.9, "weight_decay": 1e-4, **training},
        "runtime": {"device": "cpu"},
    }


def trained(run: dict, mode: GraphMode, rounds: int = ROUNDS):
    """The federation of `run` after `rounds` rounds with its steps run as `mode` says, and the
    rounds' mean training losses."""
    fed = federation_of(run)
    fed.graphs = mode
    losses = [fed.run_round(r).train_loss for r in range(1, rounds + 1)]
    return fed, losses


def assert_same(a, b) -> None:
    (fa, la), (fb, lb) = a, b
    assert torch.equal(fa.global_.params, fb.global_.params)
    assert torch.equal(fa.global_.buffers, fb.global_.buffers)
    assert all(torch.equal(x, y) for x, y in zip(la, lb))


def captured(fed) -> dict[int, int]:
    """Batch size → replays of its graph, in the federation's first lane."""
    return {shape: g.replays for shape, g in fed.lanes[0].steps.graphs.items()}


# ----------------------------------------------------------------------------- declarations


def test_every_built_in_algorithm_and_plug_in_says_whether_its_step_can_be_a_graph():
    for decl in catalog.methods():
        if decl.kind != "posthoc":
            assert decl.cuda_graph is True or decl.cuda_graph != UNDECLARED, decl.name


def test_a_method_that_says_nothing_is_not_captured_and_a_bare_no_is_refused():
    plain = Method(name="mine", kind="plugin", summary="s", module="mine")
    assert plain.graph_blocker == UNDECLARED == "undeclared"
    assert dataclasses.replace(plain, cuda_graph=True).graph_blocker is None
    assert dataclasses.replace(plain, cuda_graph="why").graph_blocker == "why"
    for bad in (False, "", "  "):
        with pytest.raises(ValueError, match="cuda_graph is True or the reason"):
            dataclasses.replace(plain, cuda_graph=bad)


def test_fedhet_methods_says_which_steps_are_graphs_and_why_not():
    listing = describe().splitlines()
    at = {line.split(" ", 1)[0]: i for i, line in enumerate(listing) if not line.startswith(" ")}
    assert listing[at["fedavg"] + 1] == "    local step as a CUDA graph: yes"
    assert listing[at["mixup"] + 1] == ("    local step as a CUDA graph: no, runs eager: "
                                        + catalog.method("mixup").cuda_graph)
    assert "CUDA graph" not in listing[at["ccvr"] + 1]  # post-hoc: no local step


# ----------------------------------------------------------------------------- the decision


def test_only_cuda_runs_whose_methods_all_declare_it_capture(roots):
    run = resolve_run(a_run(roots, "scaffold", ["vhl"]))
    assert graph_mode(run, CUDA, stacked=False).capture
    for device, stacked, why in [(CPU, False, "CUDA graphs are for CUDA devices, the device "
                                              "is cpu"),
                                 (CUDA, True, "clients train stacked")]:
        mode = graph_mode(run, device, stacked)
        assert not mode.capture and why in mode.note
        assert mode.as_captured is (device.type == "cuda")
    off = resolve_run({**a_run(roots), "runtime": {"cuda_graphs": False}})
    assert graph_mode(off, CUDA, False).note == ("local steps run eager: runtime.cuda_graphs "
                                                 "is false")
    mixed = resolve_run(a_run(roots, "fedcm", ["vhl", "mixup"]))
    note = graph_mode(mixed, CUDA, False).note
    assert note == ("local steps run eager: not capturable: fedcm: "
                    f"{catalog.method('fedcm').cuda_graph}; mixup: "
                    f"{catalog.method('mixup').cuda_graph}")


def test_an_undeclared_external_method_runs_eager(roots, monkeypatch):
    real = catalog.method
    theirs = Method(name="mixup", kind="plugin", summary="s", module="theirs")
    monkeypatch.setattr(graphs, "method", lambda name: theirs if name == "mixup" else real(name))
    note = graph_mode(resolve_run(a_run(roots, plugins=["mixup"])), CUDA, False).note
    assert note == "local steps run eager: not capturable: mixup: undeclared"


def test_cuda_graphs_is_a_checked_setting_outside_the_run_identity(roots):
    run = a_run(roots)
    assert resolve_run(run)["runtime"]["cuda_graphs"] is True
    off = {**run, "runtime": {"device": "cpu", "cuda_graphs": False}}
    assert run_id(resolve_run(off)) == run_id(resolve_run(run))
    assert "cuda_graphs" not in config.identity(resolve_run(off)).get("runtime", {})
    with pytest.raises(ConfigError, match="runtime.cuda_graphs' is 'no'; allowed: true or false"):
        resolve_run({**run, "runtime": {"cuda_graphs": "no"}})


# ----------------------------------------------------------------------------- the record


def provenance(out) -> dict:
    return yaml.safe_load((out / "resolved.yaml").read_text())["provenance"]


def test_resolved_yaml_and_the_log_say_how_the_steps_ran(roots, tmp_path, monkeypatch):
    from fedhet import train as train_module

    run = a_run(roots, plugins=["mixup"])
    run["training"]["rounds"] = 1
    lines: list[str] = []
    train_module.train(run, tmp_path / "cpu", log=lines.append)
    steps = provenance(tmp_path / "cpu")["execution"]["steps"]
    assert steps == "local steps run eager: CUDA graphs are for CUDA devices, the device is cpu"
    assert not any("local steps" in line for line in lines)  # a CPU run says nothing of it
    # decided as on a GPU: mixup's reason goes to the log and to resolved.yaml (and the step,
    # eager, reads its learning rate from a tensor, as on CUDA)
    as_on_cuda = lambda run, device, stacked: graph_mode(run, CUDA, stacked)  # noqa: E731
    monkeypatch.setattr("fedhet.engine.federation.graph_mode", as_on_cuda)
    train_module.train(run, tmp_path / "gpu", log=lines.append)
    why = f"not capturable: mixup: {catalog.method('mixup').cuda_graph}"
    assert provenance(tmp_path / "gpu")["execution"]["steps"] == f"local steps run eager: {why}"
    assert any(line.endswith(why) for line in lines)


# ----------------------------------------------------------------------------- the runner


def cases(keep) -> list:
    """(algorithm, plug-ins) of every built-in method whose declaration `keep` keeps: each
    algorithm alone, each plug-in on FedAvg."""
    found = []
    for decl in catalog.methods():
        if decl.kind != "posthoc" and not catalog.package(decl.name) and keep(decl):
            algorithm, plugins = ((decl.name, []) if decl.kind == "algorithm"
                                  else ("fedavg", [decl.name]))
            found.append(pytest.param(algorithm, plugins, id=decl.name))
    return found


def capturable() -> list:
    return cases(lambda decl: decl.cuda_graph is True)


@pytest.mark.parametrize(("algorithm", "plugins"), capturable())
def test_every_method_declared_capturable_replays_with_the_eager_numbers(roots, algorithm,
                                                                         plugins):
    """Two rounds (the lr decaying), clients of several sizes: every step after a shape's first
    replays its graph, checked by the stand-in, and the model and losses equal the eager step's
    bit for bit."""
    run = a_run(roots, algorithm, plugins, keep_client_optimizer_state=True)
    graph = trained(run, CHECKED)
    assert_same(graph, trained(run, EAGER))
    replays = captured(graph[0])
    assert replays[8] > 5 and len(replays) > 1, replays  # full batches, short last ones


@pytest.mark.parametrize("setting", [{"max_grad_norm": 1.0}, {"augment": "none"},
                                     {"momentum": 0.0, "weight_decay": 0.0}],
                         ids=["clipping", "no augmentation", "plain SGD"])
def test_training_settings_replay_with_the_eager_numbers(roots, setting):
    run = a_run(roots, "scaffold", ["vhl"], **setting)
    graph = trained(run, CHECKED)
    assert_same(graph, trained(run, EAGER))
    assert captured(graph[0])[8] > 0


def test_rotated_clients_and_bf16_channels_last_replay_with_the_eager_numbers(roots):
    run = a_run(roots, "moon")
    run["partition"] = {**run["partition"], "scheme": "rotation",
                        "options": {"base": "dirichlet", "rotation_mode": "mixture"}}
    run["runtime"].update(precision="bf16", channels_last=True)
    graph = trained(run, CHECKED)
    assert_same(graph, trained(run, EAGER))


def test_shapes_beyond_the_last_graph_run_eager(roots):
    run = a_run(roots)
    one = dataclasses.replace(CHECKED, max_graphs=1)
    graph = trained(run, one)
    assert_same(graph, trained(run, EAGER))
    assert list(captured(graph[0])) == [8]


def non_capturable() -> list:
    """The built-in methods declared not capturable that train on a CPU in seconds (FedLGD's
    and `distilled`'s runs need distilled images built first)."""
    return cases(lambda decl: decl.cuda_graph is not True
                 and decl.name not in ("fedlgd", "distilled"))


@pytest.mark.parametrize(("algorithm", "plugins"), non_capturable())
def test_the_stand_in_catches_every_method_declared_not_capturable(roots, algorithm, plugins):
    with pytest.raises(GraphBreak):
        trained(a_run(roots, algorithm, plugins), CHECKED)


# ----------------------------------------------------------------------------- what it catches


def test_a_learning_rate_read_as_a_float_breaks_the_graph(roots, monkeypatch):
    """A step that reads the round's lr as a Python float replays the first round's."""
    monkeypatch.setattr(StepGraphs, "lr", lambda self, lr, like: lr)
    with pytest.raises(GraphBreak, match="argument 2: the value 0.045"):
        trained(a_run(roots), CHECKED)


def test_batch_positions_not_held_break_the_graph(roots, monkeypatch):
    """A step that reads the positions of the batch it was captured with trains on them."""
    monkeypatch.setattr(client_module.StepInputs, "held", lambda self, hold: self)
    with pytest.raises(GraphBreak, match="index.Tensor.*the tensor at storage"):
        trained(a_run(roots), CHECKED)


def test_a_client_tensor_not_held_breaks_the_graph(roots, monkeypatch):
    """SCAFFOLD's correction c − c_i made anew for each client, not held."""
    def client_begin(self, ctx):
        ctx.extra["correction"] = self.c - self.c_i.get(ctx.client)

    monkeypatch.setattr(Scaffold, "client_begin", client_begin)
    with pytest.raises(GraphBreak, match="the tensor at storage"):
        trained(a_run(roots, "scaffold"), CHECKED)


def test_a_lr_baked_into_a_hook_breaks_the_graph(roots, monkeypatch):
    """SCAFFOLD's step y ← y − η(c − c_i) with η the float ctx.lr."""
    def after_step(self, ctx):
        ctx.params.sub_(ctx.extra["correction"], alpha=ctx.lr)

    monkeypatch.setattr(Scaffold, "after_step", after_step)
    with pytest.raises(GraphBreak, match="the value 0.045"):
        trained(a_run(roots, "scaffold"), CHECKED)


def test_a_host_sync_in_the_step_breaks_the_graph(roots, monkeypatch):
    def after_step(self, ctx):
        if ctx.params.abs().max().item() > 1e9:
            ctx.params.zero_()

    monkeypatch.setattr(Scaffold, "after_step", after_step)
    with pytest.raises(GraphBreak, match="synchronises with the host"):
        trained(a_run(roots, "scaffold"), CHECKED)


def test_values_are_held_outside_the_step_only():
    steps = StepGraphs(CHECKED)
    kept = steps.hold("x", torch.ones(3))
    assert steps.hold("x", torch.full((3,), 2.0)) is kept and kept.tolist() == [2.0] * 3
    assert steps.hold("x", torch.ones(2)) is not kept  # another shape: another tensor
    eager = StepGraphs(dataclasses.replace(EAGER, cuda=False))
    value = torch.ones(3)
    assert eager.hold("x", value) is value and eager.lr(0.1, value) == 0.1
    for runner, replaying in ((steps, True), (steps, False), (eager, False)):
        runner.replaying = replaying
        with pytest.raises(RuntimeError, match="inside a local step"):
            runner.run(lambda: runner.hold("y", torch.ones(1)), shape=1)


def test_a_client_on_other_data_tensors_runs_eager():
    steps = StepGraphs(CHECKED)
    x, y = torch.zeros(4, 3, 2, 2), torch.zeros(4)
    steps.begin_client(x, y, False)
    assert steps.replaying
    with pytest.warns(UserWarning, match="other data tensors"):
        steps.begin_client(x.clone(), y, False)
    assert not steps.replaying
    ran = []
    steps.run(lambda: ran.append(1), shape=4)
    assert ran == [1] and not steps.graphs


def test_a_stand_in_replay_reruns_the_current_step():
    """The stand-in runs the step at each replay (a real graph replays its kernels): the
    runner hands it the current step, so that what the step reads is checked every time."""
    steps = StepGraphs(dataclasses.replace(CHECKED, warmup_steps=0))
    w, g, lr = torch.ones(2), torch.ones(2), steps.lr(0.5, torch.ones(()))
    steps.replaying = True
    for value in (0.5, 0.25):
        steps.lr(value, w)
        steps.run(lambda: w.addcmul_(g, lr, value=-1), shape=2)
    assert w.tolist() == [0.25, 0.25] and captured_replays(steps) == 2


def captured_replays(steps: StepGraphs) -> int:
    return sum(g.replays for g in steps.graphs.values())
