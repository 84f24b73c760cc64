"""Analytic tables: cells computed from the paper's models and data sizes, not from runs.

An analytic table (`kind: analytic`, `function: <name>`) names one function here; each of its
cells is that function of the cell's labels (vocabulary keys). The values are those of the
paper's setting at every scale (FedLGD Tables 6-7: parameters sent and FLOPs of a round), so a
table job computes them without a run. Torch-free to import: the counting imports
`fedhet.methods.fedlgd.cost` when a value is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache

from fedhet.registry import Registry

Analytic = Callable[[Mapping[str, str]], float]

ANALYTIC: Registry[Analytic] = Registry("analytic function")

# FedLGD's image sizes: DIGITS and CIFAR10C at 28 px with 10 classes, RETINA at 96 px with 2
SIZES = {"s28": (28, 10), "s96": (96, 2)}
# Table 6's columns: a round of vanilla FedAvg on the real data, FedLGD's rounds in τ and out
# of τ (all clients), and one step of the server's gradient matching
STAGES = {"vanilla": "vanilla_epoch", "tau": "fedlgd_round_in_tau",
          "other": "fedlgd_round_out_tau", "server": "server_gm_step"}
DATASETS = {"digits": "DIGITS", "cifar10c": "CIFAR10C", "retina": "RETINA"}


def _label(labels: Mapping[str, str], axis: str, valid: Mapping[str, object]) -> str:
    value = labels.get(axis)
    if value not in valid:
        raise ValueError(f"analytic cell {dict(labels)}: axis '{axis}' must be one of "
                         f"{', '.join(valid)}, got {value!r}")
    return value


@ANALYTIC.register("fedlgd_communication")
def fedlgd_communication(labels: Mapping[str, str]) -> float:
    """Table 7: parameters of the model (`model`: convnet | resnet18in) or float32 values of
    the global virtual data per IPC (`model: virtual`), at the image size of `size`."""
    from fedhet.methods.fedlgd import cost

    size, classes = SIZES[_label(labels, "size", SIZES)]
    model = labels.get("model")
    if model == "virtual":
        return float(cost.global_virtual_size(size, classes))
    return float(cost.parameter_count(_label(labels, "model", {"convnet": 0, "resnet18in": 0}),
                                      size, classes))


@lru_cache(maxsize=1)
def _computation() -> dict[str, dict[str, float]]:
    from fedhet.methods.fedlgd import cost

    return {row["dataset"]: row for row in cost.computation_table()["rows"]}


@ANALYTIC.register("fedlgd_computation")
def fedlgd_computation(labels: Mapping[str, str]) -> float:
    """Table 6: FLOPs of one round of the `stage` (vanilla FedAvg on the real images, FedLGD in
    and out of τ, one server gradient-matching step) on the paper's `data` with the ConvNet."""
    data = DATASETS[_label(labels, "data", DATASETS)]
    return float(_computation()[data][STAGES[_label(labels, "stage", STAGES)]])
