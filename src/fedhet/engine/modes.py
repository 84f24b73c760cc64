"""A run's numeric modes: precision, memory format, deterministic kernels and cuDNN's
algorithm search; and their vocabulary, a mode's name (`Mode`: a precision and its speed flags,
e.g. `bf16+channels_last+cudnn_benchmark`), which the command line and the benchmarks speak.

The vocabulary imports without torch (`fedhet --help` reads it); the functions that set
torch's flags import it. The modes live in torch's process-wide flags, so `apply_modes` sets
every one of them for each run (a run never inherits another's from the same process, e.g. a
test session or a notebook), and says which took effect on the device, for
`provenance.execution` in resolved.yaml. The modes are part of the run identity when not at
their default (`fedhet.settings.RUNTIME_IDENTITY`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedhet.declare import ConfigError
from fedhet.settings import DEFAULTS, RUNTIME_IDENTITY

if TYPE_CHECKING:
    import torch

# cuBLAS picks its reduction order by workspace; a fixed configuration, set before CUDA starts,
# makes matrix products deterministic (what torch.use_deterministic_algorithms asks for).
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")


@dataclass(frozen=True)
class Precision:
    """One `runtime.precision`: the autocast type (torch's name of the dtype; None: none) and
    whether convolutions (cuDNN) and matrix products (cuBLAS) may run in TF32 on a GPU that
    has it."""

    autocast: str | None
    tf32_convolutions: bool
    tf32_matmuls: bool


# "default" is what torch does when nobody sets anything; bf16 keeps its flags beside autocast.
PRECISIONS: dict[str, Precision] = {
    "default": Precision(None, True, False),
    "fp32": Precision(None, False, False),
    "tf32": Precision(None, True, True),
    "bf16": Precision("bfloat16", True, False),
}

# A mode's name: a precision, then its speed flags, e.g. `bf16+channels_last+cudnn_benchmark`.
FLAGS = ("channels_last", "cudnn_benchmark")
# What a GPU measures unless told otherwise: the fastest candidates first, so that a run cut
# short still has them.
# (tf32 with channels-last and cuDNN benchmarking measured no faster than tf32 alone on an H100.)
GPU_MODES = ("bf16+channels_last+cudnn_benchmark", "tf32", "fp32", "default")
CPU_MODES = ("default",)


@dataclass(frozen=True)
class Mode:
    """A precision mode (`PRECISIONS`) with its speed flags: channels-last tensors, cuDNN's
    algorithm search."""

    precision: str
    channels_last: bool = False
    cudnn_benchmark: bool = False

    @property
    def name(self) -> str:
        return "+".join([self.precision, *(f for f in FLAGS if getattr(self, f))])

    @classmethod
    def parse(cls, text: str) -> Mode:
        """`bf16`, `tf32+channels_last`, `bf16+channels_last+cudnn_benchmark`, ...; ValueError
        naming the valid forms otherwise."""
        precision, *flags = text.strip().split("+")
        if precision not in PRECISIONS or len(set(flags)) != len(flags) \
                or not set(flags) <= set(FLAGS):
            raise ValueError(f"unknown mode '{text}'; valid: one of {', '.join(PRECISIONS)}, "
                             f"then any of {', '.join('+' + f for f in FLAGS)}")
        return cls(precision, **{f: True for f in flags})

    def runtime(self) -> dict[str, Any]:
        """The run's `runtime` settings of this mode."""
        return {"precision": self.precision, "channels_last": self.channels_last,
                "cudnn_benchmark": self.cudnn_benchmark}

    @classmethod
    def of_runtime(cls, runtime: Mapping[str, Any]) -> Mode:
        """The mode a run's resolved `runtime` settings ask for."""
        return cls(runtime["precision"], bool(runtime["channels_last"]),
                   bool(runtime["cudnn_benchmark"]))


@dataclass
class Modes:
    """What a federation computes with: the autocast context of its forward passes, whether
    models and inputs are channels-last, and the effective modes in words (`provenance`)."""

    autocast: AbstractContextManager
    channels_last: bool
    effective: dict[str, Any]

    def summary(self) -> str:
        """One line for the log, e.g. `precision bf16 (autocast bfloat16), channels-last`."""
        e = self.effective
        parts = [f"precision {e['precision']} (autocast {e['autocast']}, TF32 convolutions "
                 f"{_yes(e['tf32_convolutions'])}, TF32 matrix products {_yes(e['tf32_matmuls'])})"]
        if e["channels_last"]:
            parts.append("channels-last")
        if e["deterministic"]:
            parts.append("deterministic kernels")
        if e["cudnn_benchmark"]:
            parts.append("cuDNN benchmarking")
        return ", ".join(parts)


def _yes(flag: bool) -> str:
    return "on" if flag else "off"


def default_modes(run: dict[str, Any]) -> bool:
    """Whether every numeric mode of `run` is at its default (what ran before they existed)."""
    return all(run["runtime"][key] == DEFAULTS["runtime"][key] for key in RUNTIME_IDENTITY)


def prepare_environment(run: dict[str, Any]) -> None:
    """What must be in place before CUDA starts: the deterministic mode's cuBLAS workspace
    (a value the user set is kept, and checked by torch)."""
    if run["runtime"]["deterministic"]:
        os.environ.setdefault(CUBLAS_WORKSPACE, CUBLAS_DETERMINISTIC[0])


def set_tf32(convolutions: bool, matmuls: bool) -> None:
    """TF32 for cuDNN convolutions and cuBLAS matrix products (torch's newer per-backend
    setting where it has one: the older flags warn there)."""
    import torch

    if hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cuda.matmul,
                                                          "fp32_precision"):
        torch.backends.cudnn.conv.fp32_precision = "tf32" if convolutions else "ieee"
        torch.backends.cuda.matmul.fp32_precision = "tf32" if matmuls else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = convolutions
        torch.backends.cuda.matmul.allow_tf32 = matmuls


def set_deterministic(on: bool, benchmark: bool = False) -> None:
    """Deterministic kernels (an op without one raises) and cuDNN's fixed algorithms, or
    torch's defaults; cuDNN times its algorithms only when `benchmark` (never with `on`).
    Torch's setting is changed only when it differs: setting it imports torch's compiler
    (`torch._inductor`, 2.4 s of a 5 s CPU run in a fresh process), which a run that keeps
    torch's default never uses."""
    import torch

    if (torch.are_deterministic_algorithms_enabled() != on
            or torch.is_deterministic_algorithms_warn_only_enabled()):
        torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = benchmark and not on


def _has_tf32(device: torch.device) -> bool:
    """Whether the device has TF32 units (NVIDIA compute capability 8.0 and later)."""
    import torch

    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def apply_modes(run: dict[str, Any], device: torch.device) -> Modes:
    """Set torch's flags for the run's `runtime.precision`, `channels_last` and
    `deterministic` on `device`; the autocast context and the effective modes."""
    import torch

    rt = run["runtime"]
    precision = PRECISIONS[rt["precision"]]
    deterministic = bool(rt["deterministic"])
    if precision.autocast == "bfloat16" and device.type == "cuda" \
            and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"runtime.precision is bf16 but {torch.cuda.get_device_name(device)} "
                          "has no bf16 arithmetic; use tf32 or fp32")
    if deterministic:
        prepare_environment(run)
        if device.type == "cuda" and os.environ[CUBLAS_WORKSPACE] not in CUBLAS_DETERMINISTIC:
            raise ConfigError(
                f"runtime.deterministic needs {CUBLAS_WORKSPACE} to be one of "
                f"{', '.join(CUBLAS_DETERMINISTIC)}; it is {os.environ[CUBLAS_WORKSPACE]!r}")
    benchmark = bool(rt["cudnn_benchmark"])
    if deterministic and benchmark:
        raise ConfigError("runtime.deterministic and runtime.cudnn_benchmark exclude each other "
                          "(benchmarking picks cuDNN's algorithms by timing them); set one")
    set_tf32(precision.tf32_convolutions, precision.tf32_matmuls)
    set_deterministic(deterministic, benchmark)
    autocast: AbstractContextManager = nullcontext()
    if precision.autocast is not None:
        autocast = torch.autocast(device.type, dtype=getattr(torch, precision.autocast))
    tf32 = _has_tf32(device)
    effective = {
        "precision": rt["precision"],
        "autocast": precision.autocast or "none",
        "tf32_convolutions": tf32 and precision.tf32_convolutions,
        "tf32_matmuls": tf32 and precision.tf32_matmuls,
        "channels_last": bool(rt["channels_last"]),
        "deterministic": deterministic,
        "cudnn_benchmark": benchmark and device.type == "cuda",
    }
    return Modes(autocast, bool(rt["channels_last"]), effective)
