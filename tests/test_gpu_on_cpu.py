"""What the CUDA tests of test_gpu.py rely on that needs no GPU, run in every suite so that a
change elsewhere breaks it here and not first on a GPU machine: the fork server started as the
workflow starts it runs the fork-server test's job, and the runs of the CUDA tests resolve to
the modes those tests expect on a GPU (TF32 where the GPU has it, bf16 autocast, channels-last,
cuDNN's algorithm search, deterministic kernels, stacked clients)."""

from __future__ import annotations

import argparse
import os
import warnings

import pytest
import torch

from fedhet.bench import throughput
from fedhet.cli import build_parser
from fedhet.config import resolve_run
from fedhet.declare import ConfigError
from fedhet.engine.graphs import graph_mode
from fedhet.engine.modes import CUBLAS_WORKSPACE, apply_modes, set_deterministic, set_tf32
from fedhet.engine.vectorised import vectorise_decision
from fedhet.models import build_model
from test_gpu import (
    GRAPH_RUNS,
    GRAPHED,
    SPEED_MODES,
    STACKED_RUNS,
    data_root,  # noqa: F401  (a fixture)
    fork_server_run,
    gpu_run,
    graph_pair,
    stacked_pair,
    train_through_the_server_and_alone,
)

CUDA = torch.device("cuda")
# compute capabilities: an H100/H200 (TF32 units) and a V100 (none)
HOPPER, VOLTA = (9, 0), (7, 0)


@pytest.fixture()
def a_gpu(monkeypatch):
    """torch told it has a GPU of compute capability HOPPER with bf16 (set `capability` and
    `bf16` to change it); torch's flags and the cuBLAS variable restored afterwards."""
    gpu = argparse.Namespace(capability=HOPPER, bf16=True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: gpu.capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kw: gpu.bf16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    monkeypatch.delenv(CUBLAS_WORKSPACE, raising=False)
    yield gpu
    set_tf32(True, False)  # torch's defaults
    set_deterministic(False)


def effective_on_a_gpu(run: dict) -> dict:
    """The modes `apply_modes` says a run computes in on the GPU (autocast on a device torch
    cannot use is only built, never entered)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "CUDA is not available")
        return apply_modes(resolve_run(run), CUDA).effective


def test_a_job_through_the_fork_server_started_as_the_gpu_test_starts_it(data_root, tmp_path,
                                                                         monkeypatch):
    run = fork_server_run(data_root, tmp_path)
    run["runtime"]["device"] = "cpu"
    train_through_the_server_and_alone(run, tmp_path, monkeypatch, "cpu")


@pytest.mark.parametrize(("runtime", "expected"), SPEED_MODES)
@pytest.mark.parametrize("capability", [HOPPER, VOLTA])
def test_the_speed_modes_resolve_on_a_gpu_as_the_cuda_tests_expect(data_root, tmp_path, a_gpu,
                                                                    runtime, expected, capability):
    a_gpu.capability = capability
    done = effective_on_a_gpu(gpu_run(data_root, tmp_path, runtime=runtime))
    assert {k: done[k] for k in expected} == expected
    assert done["tf32_convolutions"] is (capability >= (8, 0))
    assert done["tf32_matmuls"] is False
    assert not done["deterministic"] and not done["cudnn_benchmark"]
    strict = effective_on_a_gpu(gpu_run(data_root, tmp_path, runtime={"precision": "fp32"}))
    assert strict["tf32_convolutions"] is False and strict["autocast"] == "none"


def test_cudnn_benchmarking_and_deterministic_kernels_resolve_on_a_gpu(data_root, tmp_path, a_gpu):
    strict = {"precision": "fp32"}
    fast = effective_on_a_gpu(gpu_run(data_root, tmp_path, "cnn4",
                                      {**strict, "cudnn_benchmark": True}))
    assert fast["cudnn_benchmark"] is True and torch.backends.cudnn.benchmark
    assert effective_on_a_gpu(gpu_run(data_root, tmp_path, "cnn4", strict))[
        "cudnn_benchmark"] is False
    exact = effective_on_a_gpu(fork_server_run(data_root, tmp_path))
    assert exact["deterministic"] is True and torch.backends.cudnn.deterministic
    assert os.environ[CUBLAS_WORKSPACE] == ":4096:8"  # set before CUDA starts


def test_bf16_on_a_gpu_without_it_is_refused(data_root, tmp_path, a_gpu):
    a_gpu.bf16 = False
    with pytest.raises(ConfigError, match="Tesla V100 has no bf16 arithmetic; use tf32 or fp32"):
        effective_on_a_gpu(gpu_run(data_root, tmp_path, runtime={"precision": "bf16"}))


@pytest.mark.parametrize(("algorithm", "model", "cudnn"), STACKED_RUNS)
def test_the_stacked_clients_test_s_runs_stack(data_root, tmp_path, algorithm, model, cudnn):
    one_at_a_time, stacked = (resolve_run(r) for r in stacked_pair(data_root, tmp_path,
                                                                     algorithm, model))
    options = stacked["dataset"]["options"]
    net = build_model(model, 10, options["channels"], options["size"], stacked["model"]["width"])
    assert vectorise_decision(stacked, net)[0] is True
    assert vectorise_decision(one_at_a_time, net)[0] is False


@pytest.mark.parametrize(("algorithm", "plugins", "model", "runtime"), GRAPH_RUNS)
def test_the_cuda_graph_test_s_runs_capture_on_a_gpu_and_eagerly_when_told(
        data_root, tmp_path, algorithm, plugins, model, runtime):
    eager, graph = (resolve_run(r) for r in graph_pair(data_root, tmp_path, algorithm, plugins,
                                                        model, runtime))
    assert graph_mode(graph, CUDA, stacked=False).note == GRAPHED
    assert graph_mode(eager, CUDA, stacked=False).note == ("local steps run eager: "
                                                           "runtime.cuda_graphs is false")


def test_fedhet_bench_resolves_its_gpu_run_in_the_current_settings():
    """bf16 and channels-last on a GPU, written as `runtime.precision` (the retired
    `runtime.bf16` would warn on every GPU bench)."""
    args = build_parser().parse_args(["bench"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpu = throughput.throughput_run(args, CUDA)
        cpu = throughput.throughput_run(args, torch.device("cpu"))
    assert (gpu["runtime"]["precision"], gpu["runtime"]["channels_last"]) == ("bf16", True)
    assert (cpu["runtime"]["precision"], cpu["runtime"]["channels_last"]) == ("default", False)
