"""The names a figure prints for things the code keys differently (torch-free): a dataset's
domains (`synthdigits` → SynthDigits), a model's layers and split stages (`blocks.0.0` →
layer 1, `head` → classifier), an axis of a figure's cells (`algorithm` → method), and the
part of a cell's labels that says which runs a figure shows. A reader sees no internal key."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# domain names as the datasets key them → as the papers write them
DOMAIN_NAMES = {
    "mnist": "MNIST",
    "svhn": "SVHN",
    "usps": "USPS",
    "synthdigits": "SynthDigits",
    "mnistm": "MNIST-M",
    "art_painting": "art painting",
}

# split stages and layers every model names alike → printed
STAGE_NAMES = {
    "head": "classifier",
    "classifier": "classifier",
    "penultimate": "penultimate stage",
    "representation": "representation",
    "tokens": "tokeniser",
    "conv": "convolutions",
    "hidden": "hidden layer",
}
BLOCK = re.compile(r"(?:block|stage|layer)_?(\d+)")

# axes of a figure's cells → the name of what their values are (a legend's or an x axis's
# title); an axis not listed here gets no title (its values name themselves)
AXIS_NAMES = {
    "method": "method",
    "algorithm": "algorithm",
    "data": "dataset",
    "dataset": "dataset",
    "arch": "model",
    "model": "model",
    "calibration": "calibration",
}


# a run's final metric (final.json) → how an axis showing it is titled
FINAL_METRICS = {
    "top5_acc": "accuracy, mean of the 5 best rounds (%)",
    "local_top5_acc": "client-model accuracy, mean of the 5 best rounds (%)",
    "last_acc": "last-round accuracy (%)",
    "best_acc": "best-round accuracy (%)",
    "mean_domain_acc": "last-round accuracy, mean over domains (%)",
    "mean_domain_loss": "last-round test loss, mean over domains",
}


def metric_label(metric: str) -> str:
    """How an axis showing a run's final `metric` is titled (its key in words otherwise)."""
    return FINAL_METRICS.get(metric, metric.replace("_", " "))


def domain_label(name: str) -> str:
    """A domain's printed name: the papers' spelling, else its key with spaces for `_`."""
    return DOMAIN_NAMES.get(name, name.replace("_", " "))


def layer_labels(names: Sequence[str]) -> list[str]:
    """Printed names of a model's layers or stages, shallow to deep: `head` → classifier,
    `block2` → block 2, any other key (`blocks.0.0`, `features.3.weight`) → its position,
    `layer k of n`."""
    out = []
    for k, name in enumerate(names):
        base = name.removesuffix(".weight").removesuffix(".bias")
        if base in STAGE_NAMES:
            out.append(STAGE_NAMES[base])
        elif BLOCK.fullmatch(base):
            out.append(f"block {BLOCK.fullmatch(base).group(1)}")
        else:
            out.append(f"layer {k + 1} of {len(names)}")
    return out


def axis_title(axis: str | None, spec: Mapping[str, Any] | None = None) -> str | None:
    """The title of a legend or axis whose entries are the values of `axis`: the figure's own
    (`<axis>_title` in its spec, e.g. `hue_title`) when given, else the axis's printed name,
    else None (no title: the values say what they are)."""
    if not axis:
        return None
    for role in ("hue", "style"):
        if spec and spec.get(role) == axis and spec.get(f"{role}_title"):
            return str(spec[f"{role}_title"])
    return AXIS_NAMES.get(axis)


def grid_axes(spec: Mapping[str, Any]) -> list[str]:
    """The axes a figure's grids list (in order): what tells its runs apart from the paper's
    other runs. A protocol's defaults the grid does not name (a test domain, the default
    model) are left out."""
    return list(dict.fromkeys(a for g in spec.get("grids") or [] for a in (g.get("axes") or {})))


def runs_label(cell: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """The printed values of the figure's grid axes for one cell ("DIGITS, IPC=10, FedLGD"):
    which runs a single-run figure shows (all its values when the spec names no grid)."""
    display = cell.get("display") or {}
    return ", ".join(display[a] for a in grid_axes(spec) or display if a in display)
