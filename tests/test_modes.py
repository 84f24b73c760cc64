"""Numeric modes (`runtime.precision`, `channels_last`, `deterministic`, `cudnn_benchmark`): in
the run identity
only when not at their default, the former `runtime.bf16` read as a precision, torch's flags
set for every run, the effective modes in resolved.yaml, and a deterministic run resuming
equal. The GPU's side of the same is in test_gpu.py."""

from __future__ import annotations

import copy
import subprocess
import sys
import warnings

import pytest
import torch
import yaml

from fedhet.config import ConfigError, resolve_run, run_id
from fedhet.engine import modes
from fedhet.local.server import _decline_reason
from fedhet.settings import SETTINGS
from fedhet.train import train
from run_outputs import run_outputs, without_step_time
from tiny_runs import tiny_run

NON_DEFAULT = [{"precision": "fp32"}, {"precision": "tf32"}, {"precision": "bf16"},
               {"channels_last": True}, {"deterministic": True}, {"cudnn_benchmark": True}]


def with_runtime(run: dict, **runtime) -> dict:
    run = copy.deepcopy(run)
    run["runtime"].update(runtime)
    return run


@pytest.fixture()
def run(tmp_path):
    return tiny_run(tmp_path / "data", tmp_path / "parts")


@pytest.fixture(autouse=True)
def torch_defaults_after():
    """The modes set process-wide flags: leave torch as the other tests expect it."""
    threads = torch.get_num_threads()
    yield
    default = modes.PRECISIONS["default"]
    modes.set_tf32(default.tf32_convolutions, default.tf32_matmuls)
    modes.set_deterministic(False)
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- identity


def test_default_modes_keep_the_run_id(run):
    spelled_out = with_runtime(run, precision="default", channels_last=False,
                               deterministic=False, cudnn_benchmark=False)
    assert run_id(resolve_run(spelled_out)) == run_id(resolve_run(run))


def test_every_non_default_mode_is_a_run_of_its_own(run):
    ids = {run_id(resolve_run(run))}
    for mode in NON_DEFAULT:
        rid = run_id(resolve_run(with_runtime(run, **mode)))
        assert rid not in ids, mode
        ids.add(rid)


def test_the_identity_does_not_depend_on_the_device(run):
    """Ids are made where there is no GPU (the workflow's DAG): the device never enters."""
    bf16 = with_runtime(run, precision="bf16")
    assert run_id(resolve_run(with_runtime(bf16, device="cuda:1"))) == run_id(resolve_run(bf16))


def test_the_former_bf16_key_reads_as_precision_bf16(run):
    old = with_runtime(run, bf16=True)
    with pytest.warns(FutureWarning, match="runtime.precision: bf16"):
        resolved = resolve_run(old)
    assert "bf16" not in resolved["runtime"] and resolved["runtime"]["precision"] == "bf16"
    assert run_id(resolved) == run_id(resolve_run(with_runtime(run, precision="bf16")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # false is what every earlier resolved.yaml holds
        assert run_id(resolve_run(with_runtime(run, bf16=False))) == run_id(resolve_run(run))
    with pytest.warns(FutureWarning):
        assert run_id(resolve_run(with_runtime(run, bf16=True, precision="bf16"))) == \
            run_id(resolved)
    with pytest.raises(ConfigError, match=r"runtime.bf16 \(True\) and runtime.precision "
                                          r"\(fp32\) disagree"):
        resolve_run(with_runtime(run, bf16=True, precision="fp32"))
    with pytest.raises(ConfigError, match=r"runtime.bf16 \(False\) and runtime.precision"):
        resolve_run(with_runtime(run, bf16=False, precision="bf16"))
    with pytest.raises(ConfigError, match="'runtime.bf16' is 'yes'"):
        resolve_run(with_runtime(run, bf16="yes"))


def test_an_unknown_precision_names_the_choices(run):
    with pytest.raises(ConfigError, match="runtime.precision.*one of default, fp32, tf32, bf16"):
        resolve_run(with_runtime(run, precision="fp16"))


def test_every_declared_precision_has_its_flags():
    assert set(modes.PRECISIONS) == set(SETTINGS["runtime"]["precision"].choices)


# ----------------------------------------------------------------------------- torch's flags


def tf32_flags() -> tuple[bool, bool]:
    """(convolutions, matrix products) may run in TF32, as torch holds them."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        return (torch.backends.cudnn.conv.fp32_precision == "tf32",
                torch.backends.cuda.matmul.fp32_precision == "tf32")
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


@pytest.mark.parametrize(("precision", "flags"), [
    ("fp32", (False, False)), ("tf32", (True, True)), ("default", (True, False)),
    ("bf16", (True, False))])
def test_each_precision_sets_torchs_tf32_flags(run, precision, flags):
    # from the opposite state, so that a flag left alone shows
    modes.set_tf32(not flags[0], not flags[1])
    applied = modes.apply_modes(resolve_run(with_runtime(run, precision=precision)),
                                torch.device("cpu"))
    assert tf32_flags() == flags
    assert applied.effective["tf32_convolutions"] is False  # no TF32 units on a CPU
    assert applied.effective["tf32_matmuls"] is False


def test_deterministic_mode_sets_torchs_flags_and_the_default_unsets_them(run, monkeypatch):
    monkeypatch.delenv(modes.CUBLAS_WORKSPACE, raising=False)
    torch.backends.cudnn.benchmark = True
    modes.apply_modes(resolve_run(with_runtime(run, deterministic=True)), torch.device("cpu"))
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert modes.os.environ[modes.CUBLAS_WORKSPACE] in modes.CUBLAS_DETERMINISTIC
    modes.apply_modes(resolve_run(run), torch.device("cpu"))  # a later run in this process
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic


def test_the_default_mode_undoes_a_warn_only_setting_and_imports_no_compiler():
    """Torch's setting is left alone where it already is the mode's (setting it imports
    torch's compiler, seconds in a fresh process); a warn-only setting is not the mode's."""
    torch.use_deterministic_algorithms(False, warn_only=True)
    modes.set_deterministic(False)
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    fresh = subprocess.run(
        [sys.executable, "-c", "import sys, torch; from fedhet.engine import modes; "
         "modes.set_deterministic(False); print(sorted(m for m in sys.modules "
         "if m.startswith(('torch._inductor', 'torch._dynamo'))))"],
        capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "[]"


def test_cudnn_benchmarking_sets_torchs_flag_and_excludes_the_deterministic_mode(run):
    applied = modes.apply_modes(resolve_run(with_runtime(run, cudnn_benchmark=True)),
                                torch.device("cpu"))
    assert torch.backends.cudnn.benchmark
    assert applied.effective["cudnn_benchmark"] is False  # no cuDNN on a CPU
    modes.apply_modes(resolve_run(run), torch.device("cpu"))
    assert not torch.backends.cudnn.benchmark  # a run never inherits it
    with pytest.raises(ConfigError, match="deterministic and runtime.cudnn_benchmark exclude"):
        modes.apply_modes(resolve_run(with_runtime(run, cudnn_benchmark=True,
                                                   deterministic=True)), torch.device("cpu"))


def test_a_users_cublas_workspace_setting_is_kept(run, monkeypatch):
    monkeypatch.setenv(modes.CUBLAS_WORKSPACE, ":16:8")
    modes.prepare_environment(resolve_run(with_runtime(run, deterministic=True)))
    assert modes.os.environ[modes.CUBLAS_WORKSPACE] == ":16:8"


# ----------------------------------------------------------------------------- whole runs


def execution(out) -> dict:
    return yaml.safe_load((out / "resolved.yaml").read_text())["provenance"]["execution"]


CPU_STEPS = "local steps run eager: CUDA graphs are for CUDA devices, the device is cpu"


def test_resolved_yaml_records_the_effective_modes_on_a_cpu(run, tmp_path):
    lines: list[str] = []
    train(run, tmp_path / "plain", log=lines.append)
    assert execution(tmp_path / "plain") == {
        "clients": "clients train one at a time", "steps": CPU_STEPS, "precision": "default",
        "autocast": "none",
        "tf32_convolutions": False, "tf32_matmuls": False, "channels_last": False,
        "deterministic": False, "cudnn_benchmark": False}
    assert not any("precision" in line for line in lines)  # the default says nothing
    fast = with_runtime(run, precision="bf16", channels_last=True)
    train(fast, tmp_path / "fast", log=lines.append)
    assert execution(tmp_path / "fast") == {
        "clients": "clients train one at a time", "steps": CPU_STEPS, "precision": "bf16",
        "autocast": "bfloat16",
        "tf32_convolutions": False, "tf32_matmuls": False, "channels_last": True,
        "deterministic": False, "cudnn_benchmark": False}
    assert any("precision bf16 (autocast bfloat16" in line and "channels-last" in line
               for line in lines)
    # bf16 really ran: other numbers than fp32's
    assert run_outputs(tmp_path / "fast")[0] != run_outputs(tmp_path / "plain")[0]


def test_channels_last_is_honoured_on_a_cpu(run):
    from tiny_runs import federation_of

    fed = federation_of(with_runtime(run, channels_last=True))
    convs = [m.weight for m in fed.global_.module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    assert not all(w.is_contiguous() for w in convs)  # really another layout
    fed.run_round(1)  # trains in that layout


def test_a_deterministic_run_resumes_equal_on_a_cpu(run, tmp_path):
    """Stopped after round 1 and resumed (a kill, checkpointed) equals uninterrupted, and on a
    CPU equals the run without the mode (its kernels are deterministic either way)."""
    run["training"]["rounds"] = 3
    det = with_runtime(run, deterministic=True, checkpoint_every=1)
    whole = train(det, tmp_path / "whole", log=lambda m: None)
    assert torch.are_deterministic_algorithms_enabled()
    stopped = train(det, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None,
                    stop_after=1)
    assert stopped["status"] == "stopped"
    modes.set_deterministic(False)  # a fresh process: the resumed run sets the mode again
    resumed = train(det, tmp_path / "resumed", tmp_path / "ckpt", log=lambda m: None)
    assert torch.are_deterministic_algorithms_enabled()
    assert without_step_time(resumed) == without_step_time(whole)
    metrics_w, model_w = run_outputs(tmp_path / "whole")
    metrics_r, model_r = run_outputs(tmp_path / "resumed")
    assert metrics_r == metrics_w
    assert all(torch.equal(model_r[k], model_w[k]) for k in model_w)
    train(run, tmp_path / "plain", log=lambda m: None)
    assert run_outputs(tmp_path / "plain")[0] == metrics_w


# ----------------------------------------------------------------------------- fork server


def test_the_fork_server_forks_no_worker_once_cuda_started(monkeypatch):
    import os
    import sys

    from fedhet.local import jobstate, protocol

    ours = {"python": os.path.realpath(sys.executable), "package": str(protocol.PACKAGE),
            "fingerprint": 1.0, "state": jobstate.capture()}
    assert _decline_reason(ours, started=2.0, nfds=2) is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # in the server itself
    assert "initialised CUDA" in _decline_reason(ours, started=2.0, nfds=2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # forked from it
    assert "initialised CUDA" in _decline_reason(ours, started=2.0, nfds=2)
