"""On a CUDA GPU (`pytest -m gpu`; skipped without one): the deterministic mode resumes bit for
bit in a fresh process, a run replaying CUDA graphs of its local steps (short last batches
included) equals the eager run bit for bit, stacked clients equal one client at a time to a
stated tolerance, bf16, channels-last and cuDNN-benchmarking runs train and say so in
resolved.yaml, `runtime.device: auto` picks the GPU, and the fork server's workers get a CUDA
of their own (it never forks one once CUDA started).

Runs are tiny (the digits stand-in in colour, 32 px, a BatchNorm ResNet and a plain CNN): the
point is the GPU's kernels (cuDNN convolutions and BatchNorm, cuBLAS, the augmentation, vmap's
grouped convolutions), not its speed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from fedhet.config import resolve_run
from fedhet.data import load_dataset
from fedhet.engine.device import pick_device
from fedhet.engine.federation import Federation
from fedhet.engine.modes import set_deterministic
from fedhet.partition import client_partition
from fedhet.train import train
from run_outputs import run_outputs, without_step_time
# the tiny federation of the concurrent-clients tests, at the sizes set here
from test_concurrent_clients import data_root, dirichlet_run  # noqa: F401

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
SRC = str(Path(__file__).resolve().parents[1] / "src")
DATA = {"name": "digits10", "options": {"channels": 3, "size": 32, "train_per_class": 40,
                                        "test_per_class": 20}}


@pytest.fixture(autouse=True)
def default_flags_after():
    yield
    set_deterministic(False)


def gpu_run(data_root, tmp_path, model: str = "resnet10", runtime: dict | None = None,
            **training) -> dict:
    """Four Dirichlet(0.5) clients of unequal sizes, two a round, on the GPU."""
    return dirichlet_run(data_root, tmp_path, seed=7, data=DATA, clients=4, per_round=2,
                         min_size=8, model=model,
                         runtime={"device": "cuda", "checkpoint_every": 1, **(runtime or {})},
                         **training)


def fedhet(args: list[str], **kw) -> subprocess.CompletedProcess:
    """`fedhet ARGS` in a process of its own (a fresh CUDA context, as after a kill)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    env.pop("FEDHET_FORKSERVER", None)
    return subprocess.run([sys.executable, "-m", "fedhet.cli", *args], env=env,
                          capture_output=True, text=True, **kw)


def execution(out: Path) -> dict:
    return yaml.safe_load((out / "resolved.yaml").read_text())["provenance"]["execution"]


# ----------------------------------------------------------------------------- resume


def test_the_deterministic_mode_resumes_bit_for_bit_after_a_kill(data_root, tmp_path):
    """Uninterrupted, and stopped after round 1 (checkpointed, exiting as a killed job would)
    then resumed by a new process: the same metrics and model, bit for bit."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(gpu_run(data_root, tmp_path,
                                             runtime={"deterministic": True})))

    def train_in_a_process(out: str, *more: str) -> None:
        done = fedhet(["train", "--config", str(config), "--out", str(tmp_path / out), *more])
        assert done.returncode == 0, done.stderr

    train_in_a_process("whole")
    train_in_a_process("resumed", "--ckpt-dir", str(tmp_path / "ckpt"), "--stop-after", "1")
    assert (tmp_path / "ckpt" / "checkpoint.pt").exists()
    train_in_a_process("resumed", "--ckpt-dir", str(tmp_path / "ckpt"))
    metrics_w, model_w = run_outputs(tmp_path / "whole")
    metrics_r, model_r = run_outputs(tmp_path / "resumed")
    assert len(metrics_w) == 3 and metrics_r == metrics_w
    assert model_r.keys() == model_w.keys()
    assert all(torch.equal(model_r[k], model_w[k]) for k in model_w)
    assert execution(tmp_path / "resumed")["deterministic"] is True
    assert yaml.safe_load((tmp_path / "whole" / "resolved.yaml").read_text()
                          )["provenance"]["device"].startswith("cuda")


# ----------------------------------------------------------------------------- stacked clients


def federation(run: dict) -> Federation:
    run = resolve_run(run)
    data = load_dataset(run["dataset"]["name"], run["dataset"]["root"], run["dataset"]["options"])
    indices, angles = client_partition(run, data)
    return Federation(run, data, indices, pick_device(run["runtime"]["device"]), angles)


# Strict fp32 (TF32 would round every product to 10 bits) and deterministic kernels. The stacked
# step's grouped convolutions add in another order than one client's convolutions, so a round's
# models differ in the last bits of float32: 1e-7 on a CPU. Other GPUs' kernels may differ more:
# 1e-5 allows for that, while a wrong batch or a client stepped once too often is 1e-3 or more.
# At 16 px: at 32 px the ResNet's last BatchNorm layers normalise 4×4 maps of batches of 16,
# where float32 is ill-conditioned (on a CPU the two paths then differ by 1e-4 after one round).
# The ResNet runs on torch's own convolutions (`cudnn`: False): on an H200 cuDNN's algorithms
# for grouped and for plain float32 convolutions put the two paths 9.2e-4 apart after one round
# (conv1's weight; one at a time against itself: 0), torch's own 6.0e-8 (measured 2026-12-04),
# so that gap is cuDNN's arithmetic, amplified by the BatchNorm, not the stacked step's.
STACKED_ATOL = 1e-5


# (algorithm, model, cuDNN's convolutions or torch's own)
STACKED_RUNS = [("fedavg", "cnn4", True), ("scaffold", "cnn4", True), ("fedavg", "resnet10", False)]


@contextlib.contextmanager
def cudnn_enabled(enabled: bool):
    """cuDNN on or off for the block, as it was after."""
    was = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = was


def stacked_pair(data_root, tmp_path, algorithm: str, model: str) -> tuple[dict, dict]:
    """The runs the stacked-clients test compares: one client at a time, and stacked."""
    settings = {"keep_client_optimizer_state": True, "lr": 0.01, "momentum": 0.5}
    runtime = {"precision": "fp32", "deterministic": True}
    base = gpu_run(data_root, tmp_path, model, runtime, **settings)
    base["algorithm"] = {"name": algorithm}
    base["dataset"]["options"]["size"] = 16
    stacked = copy.deepcopy(base)
    stacked["training"]["vectorise_clients"] = True
    return base, stacked


@pytest.mark.parametrize(("algorithm", "model", "cudnn"), STACKED_RUNS)
def test_stacked_clients_equal_one_at_a_time_on_the_gpu(data_root, tmp_path, algorithm, model,
                                                        cudnn):
    with cudnn_enabled(cudnn):
        stacked_clients_equal_one_at_a_time(data_root, tmp_path, algorithm, model)


def stacked_clients_equal_one_at_a_time(data_root, tmp_path, algorithm: str, model: str) -> None:
    base, stacked = stacked_pair(data_root, tmp_path, algorithm, model)
    seq = federation(base)
    vec = federation(stacked)
    again = federation(base)  # one at a time once more: is that path itself repeatable here?
    assert vec.stacked is not None and seq.stacked is None
    # the BatchNorm ResNet's first round only, as on a CPU (test_vectorised_clients.py): later,
    # nearly constant channels make float32 ill-conditioned (a CPU's round 2 here: 1.6e-3)
    for round_ in (1,) if model == "resnet10" else (1, 2):
        vec.load_state_dict(copy.deepcopy(seq.state_dict()))
        again.load_state_dict(copy.deepcopy(seq.state_dict()))
        seq.run_round(round_)
        vec.run_round(round_)
        again.run_round(round_)
        # shown when the test fails: how far apart, where, and one-at-a-time against itself
        gaps = (vec.global_.params - seq.global_.params).abs()
        where = next(s.name for s in seq.global_.param_segments
                     if s.offset <= gaps.argmax().item() < s.offset + s.numel)
        repeat = (again.global_.params - seq.global_.params).abs().max().item()
        print(f"{algorithm} {model} round {round_}: stacked vs one at a time, max |Δ| "
              f"{gaps.max().item():.3g} in {where}; one at a time twice, max |Δ| {repeat:.3g}")
        torch.testing.assert_close(vec.global_.params, seq.global_.params, rtol=0,
                                   atol=STACKED_ATOL)
        torch.testing.assert_close(vec.global_.buffers, seq.global_.buffers, rtol=0,
                                   atol=STACKED_ATOL)
    assert not torch.equal(vec.global_.params, seq.global_.params)  # really other kernels


# ----------------------------------------------------------------------------- CUDA graphs


VHL = {"name": "vhl", "params": {"virtual_kind": "noise", "virtual_per_class": 6,
                                 "virtual_batch_size": 8}}
GRAPHED = "local steps replay a CUDA graph captured once per batch shape"
# (algorithm, plug-ins, model, runtime besides the deterministic mode): FedAvg, FedProx,
# SCAFFOLD, MOON and VHL, BatchNorm (resnet10), dropout (vgg9: torch's default CUDA generator,
# which the capture registers) and bf16 autocast with channels-last
GRAPH_RUNS = [
    ("fedavg", [], "resnet10", {}),
    ("fedprox", [], "cnn4", {}),
    ("scaffold", [], "cnn4", {}),
    ("moon", [], "resnet10", {}),
    ("fedavg", [VHL], "resnet10", {}),
    ("scaffold", [VHL], "cnn4", {}),
    ("fedavg", [], "vgg9", {}),
    ("fedavg", [], "resnet10", {"precision": "bf16", "channels_last": True}),
]


def graph_pair(data_root, tmp_path, algorithm: str, plugins: list, model: str,
               runtime: dict) -> tuple[dict, dict]:
    """The runs a CUDA-graph test compares: eager (`cuda_graphs: false`) and replayed, in the
    deterministic mode, the learning rate decaying, clients keeping their momentum."""
    graph = gpu_run(data_root, tmp_path, model, {"deterministic": True, **runtime}, rounds=2,
                    lr_decay=0.9, keep_client_optimizer_state=True)
    graph.update(algorithm={"name": algorithm}, plugins=copy.deepcopy(plugins))
    eager = copy.deepcopy(graph)
    eager["runtime"]["cuda_graphs"] = False
    return eager, graph


@pytest.mark.parametrize(("algorithm", "plugins", "model", "runtime"), GRAPH_RUNS)
def test_a_run_replaying_cuda_graphs_gives_the_eager_numbers_bit_for_bit(
        data_root, tmp_path, algorithm, plugins, model, runtime):
    """The same kernels, launched by a graph: the metrics and the model of the graph run equal
    the eager run's bit for bit (so `runtime.cuda_graphs` stays outside the run identity)."""
    outputs = {}
    for name, run in zip(("eager", "graph"), graph_pair(data_root, tmp_path, algorithm, plugins,
                                                         model, runtime)):
        assert train(run, tmp_path / name, log=lambda m: None)["status"] == "completed"
        outputs[name] = run_outputs(tmp_path / name)
    assert execution(tmp_path / "graph")["steps"] == GRAPHED
    assert execution(tmp_path / "eager")["steps"] == ("local steps run eager: "
                                                      "runtime.cuda_graphs is false")
    (metrics_e, model_e), (metrics_g, model_g) = outputs["eager"], outputs["graph"]
    assert metrics_g == metrics_e
    assert model_g.keys() == model_e.keys()
    assert all(torch.equal(model_g[k], model_e[k]) for k in model_e)


def test_short_last_batches_replay_graphs_of_their_own_with_the_eager_numbers(data_root,
                                                                              tmp_path):
    """Clients of unequal sizes end their pass on batches of other lengths: each length gets a
    graph (after one warm-up step here), and the models equal the eager ones bit for bit."""
    eager_run, graph_run = graph_pair(data_root, tmp_path, "scaffold", [VHL], "resnet10", {})
    eager, graph = federation(eager_run), federation(graph_run)
    assert graph.graphs.capture and not eager.graphs.capture
    graph.graphs = dataclasses.replace(graph.graphs, warmup_steps=1)
    for round_ in (1, 2, 3):
        eager.run_round(round_)
        graph.run_round(round_)
        assert torch.equal(graph.global_.params, eager.global_.params), round_
        assert torch.equal(graph.global_.buffers, eager.global_.buffers), round_
    graphs = graph.lanes[0].steps.graphs
    print("replays per batch length:", {k: g.replays for k, g in graphs.items()})
    assert 16 in graphs and len(graphs) > 1 and all(g.replays for g in graphs.values())


# ----------------------------------------------------------------------------- speed modes


def test_runtime_device_auto_picks_the_gpu(data_root, tmp_path):
    assert pick_device("auto") == torch.device("cuda")
    train(gpu_run(data_root, tmp_path, "cnn4", {"device": "auto"}, rounds=1), tmp_path / "out",
          log=lambda m: None)
    provenance = yaml.safe_load((tmp_path / "out" / "resolved.yaml").read_text())["provenance"]
    assert provenance["device"] == "cuda"
    assert provenance["device_name"] == torch.cuda.get_device_name()


# Speed modes and what resolved.yaml says of each on a GPU (test_gpu_on_cpu.py resolves them
# without one).
SPEED_MODES = [
    ({"precision": "bf16"}, {"autocast": "bfloat16", "channels_last": False}),
    ({"channels_last": True}, {"autocast": "none", "channels_last": True}),
    ({"precision": "bf16", "channels_last": True}, {"autocast": "bfloat16",
                                                    "channels_last": True}),
]


@pytest.mark.parametrize(("runtime", "expected"), SPEED_MODES)
def test_bf16_and_channels_last_runs_train_and_say_so(data_root, tmp_path, runtime, expected):
    """Trained in the mode: the loss falls, the first round's is close to strict fp32's (and
    not equal to it in bf16), and resolved.yaml records the modes in effect."""
    runs = {}
    for name, modes in (("fp32", {"precision": "fp32"}), ("mode", runtime)):
        out = tmp_path / name
        final = train(gpu_run(data_root, tmp_path, runtime=modes, rounds=4), out,
                      log=lambda m: None)
        assert final["status"] == "completed"
        runs[name] = run_outputs(out)[0]
    done = execution(tmp_path / "mode")
    assert {k: done[k] for k in expected} == expected
    tensor_cores = torch.cuda.get_device_capability()[0] >= 8
    assert done["tf32_convolutions"] is tensor_cores  # the default's and bf16's flags
    assert done["tf32_matmuls"] is False
    assert execution(tmp_path / "fp32")["tf32_convolutions"] is False
    loss = [row["train_loss"] for row in runs["mode"]]
    assert loss[-1] < loss[0], loss
    reference = [row["train_loss"] for row in runs["fp32"]]
    # the first round is where both start from the same model: bf16 keeps 8 bits of mantissa,
    # and its round's mean loss was 2.6 % off fp32's on an H200 (channels-last, in the default's
    # TF32 convolutions, 0.6 to 0.9 %)
    print(f"{runtime}: first round's train loss {loss[0]:.5f}, strict fp32 {reference[0]:.5f}")
    assert loss[0] == pytest.approx(reference[0], rel=0.05)
    if expected["autocast"] == "bfloat16":
        assert loss != reference


def test_a_run_with_cudnn_benchmarking_trains_and_says_so(data_root, tmp_path):
    """cuDNN's algorithm search trains the clients on the GPU: the loss falls, the first
    round's is close to the run without it (same model and batches; other algorithms round
    differently), and resolved.yaml says so."""
    runs = {}
    strict = {"precision": "fp32"}  # no TF32 rounding between the two
    for name, runtime in (("plain", strict), ("fast", {**strict, "cudnn_benchmark": True})):
        out = tmp_path / name
        final = train(gpu_run(data_root, tmp_path, "cnn4", runtime, rounds=2), out,
                      log=lambda m: None)
        assert final["status"] == "completed"
        runs[name] = [row["train_loss"] for row in run_outputs(out)[0]]
    assert execution(tmp_path / "fast")["cudnn_benchmark"] is True
    assert execution(tmp_path / "plain")["cudnn_benchmark"] is False
    assert runs["fast"][-1] < runs["fast"][0], runs["fast"]
    print(f"first round's train loss: benchmarking {runs['fast'][0]:.7f}, "
          f"without {runs['plain'][0]:.7f}")
    assert runs["fast"][0] == pytest.approx(runs["plain"][0], rel=1e-4)


# ----------------------------------------------------------------------------- fork server


def test_a_process_that_started_cuda_forks_no_worker():
    """The server declines a job once CUDA is initialised in it, or in the server its handler
    was forked from (torch marks that child a bad fork), instead of forking a worker."""
    script = textwrap.dedent("""
        import os, torch
        from fedhet.local.protocol import job_request
        from fedhet.local.server import _decline_reason
        request = {**job_request(["run-id"]), "fingerprint": 0.0}
        print("before:", _decline_reason(request, 1.0, 2), flush=True)
        torch.zeros(1, device="cuda")
        print("server:", _decline_reason(request, 1.0, 2), flush=True)
        pid = os.fork()
        if pid == 0:
            print("handler:", _decline_reason(request, 1.0, 2), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["before"] == "None"
    assert "initialised CUDA" in lines["server"] and "initialised CUDA" in lines["handler"]


def train_through_the_server_and_alone(run: dict, tmp_path: Path, monkeypatch,
                                       device: str) -> None:
    """`fedhet train` of `run` through a fork server started as the workflow starts it
    (`fedhet.local.launcher.start_server`) and in a process of its own: the served job ran in
    the server's worker, on `device`, and gave the numbers of the run alone."""
    from fedhet.local import launcher, protocol

    # the server, and the commands, run this checkout's package
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [SRC,
                                                                 os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv(protocol.ENV, raising=False)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run))
    args = ["train", "--config", str(config)]
    log = tmp_path / "server.log"
    server = launcher.start_server(log, max_jobs=1)
    try:
        served = subprocess.run([sys.executable, "-m", "fedhet.cli", *args, "--out",
                                 str(tmp_path / "served")], capture_output=True, text=True,
                                env={**os.environ, protocol.ENV: server.address})
    finally:
        launcher.stop_server(server.process)
    alone = fedhet([*args, "--out", str(tmp_path / "alone")])
    server_log = log.read_text()
    assert served.returncode == 0 and alone.returncode == 0, served.stderr + alone.stderr
    assert "serving on" in server_log and "declined" not in server_log, server_log
    assert "running this command in its own process" not in served.stderr
    assert yaml.safe_load((tmp_path / "served" / "resolved.yaml").read_text()
                          )["provenance"]["device"] == device
    final = {d: without_step_time(json.loads((tmp_path / d / "final.json").read_text()))
             for d in ("served", "alone")}
    assert final["served"] == final["alone"]
    assert run_outputs(tmp_path / "served")[0] == run_outputs(tmp_path / "alone")[0]


def fork_server_run(data_root, tmp_path) -> dict:
    """The run of the fork-server test: two deterministic rounds of a plain CNN on the GPU."""
    return gpu_run(data_root, tmp_path, "cnn4", {"deterministic": True}, rounds=2)


def test_a_cuda_job_through_the_fork_server_trains_on_the_gpu(data_root, tmp_path, monkeypatch):
    """The server imports torch without starting CUDA, so its worker starts its own: a CUDA
    run through the server gives the numbers of the run in a process of its own."""
    train_through_the_server_and_alone(fork_server_run(data_root, tmp_path), tmp_path,
                                       monkeypatch, "cuda")
