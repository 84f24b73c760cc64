"""Scales: map paper-scale run settings onto what runs at a scale (`config/scales/*.yaml`:
stand-in datasets, narrower models, fewer rounds, plug-in parameters)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedhet import catalog, names
from fedhet.models import GENERIC_OPTIONS
from fedhet.experiments.loading import (
    ExperimentError,
    deep_merge,
    get_path,
    merge_settings,
    plain_copy,
    read_yaml,
    set_path,
)


def load_scale(root: Path, scale: str, where: str = "config/config.yaml") -> dict[str, Any]:
    """A scale file, its dataset and model names checked. `where` names the source of the
    scale's name in errors (the config file or the command line)."""
    path = Path(root) / "config" / "scales" / f"{scale}.yaml"
    if not path.exists():
        valid = names.scales(root)
        raise ExperimentError(where, "scale", f"unknown scale '{scale}'; valid: {', '.join(valid)}")
    data = read_yaml(path)
    sections = [("", data), *((f"papers.{p}.", over or {})
                              for p, over in (data.get("papers") or {}).items())]
    for prefix, section in sections:
        for key, kind, valid in (
            ("datasets", "dataset", names.datasets()),
            ("models", "model", names.models()),
        ):
            for src, dst in (section.get(key) or {}).items():
                for name in (src, (dst or {}).get("name", src)):
                    if name not in valid:
                        raise ExperimentError(
                            path, f"{prefix}{key}.{src}",
                            f"unknown {kind} '{name}'; valid: {', '.join(valid)}",
                        )
    return data


def scale_for_paper(scale: dict[str, Any], paper: str) -> dict[str, Any]:
    """The scale as it applies to one paper's runs: its `papers.<paper>` keys (datasets,
    models, rounds, set, plugins) merged over the scale's own."""
    override = (scale.get("papers") or {}).get(paper)
    return deep_merge(scale, override) if override else scale


def apply_scale(paper_run: dict[str, Any], scale: dict[str, Any], file: str) -> dict[str, Any]:
    """Map paper-scale settings onto the scale (stand-ins, widths, rounds); see
    config/scales/*.yaml for the meaning of each key."""
    run = plain_copy(paper_run)
    ds = run.setdefault("dataset", {})
    name = ds.get("name", "digits10")
    mapping = (scale.get("datasets") or {}).get(name)
    if mapping:
        ds["name"] = mapping.get("name", name)
        ds["options"] = deep_merge(ds.get("options") or {}, mapping.get("options") or {})
        if mapping.get("partition"):  # what the stand-in implies (its number of domains)
            run["partition"] = deep_merge(run.get("partition") or {}, mapping["partition"])
    model = run.setdefault("model", {})
    mname = model.get("name", "simplecnn")
    mmap = (scale.get("models") or {}).get(mname)
    if mmap:
        model["name"] = mmap.get("name", mname)
        if "width" in mmap:
            model["width"] = mmap["width"]
        options = model.get("options") or {}
        if model["name"] != mname:  # a stand-in keeps the options every model takes, not the
            options = {k: v for k, v in options.items() if k in GENERIC_OPTIONS}  # paper model's
        model["options"] = deep_merge(options, mmap.get("options") or {})
    rounds_cfg = scale.get("rounds") or {}
    training = run.setdefault("training", {})
    paper_rounds = training.get("rounds", 10)
    factor = rounds_cfg.get("factor", 1.0)
    rounds = max(int(rounds_cfg.get("min", 1)), int(round(paper_rounds * factor)))
    if rounds_cfg.get("max"):
        rounds = min(rounds, int(rounds_cfg["max"]))
    rounds = min(rounds, paper_rounds) if factor <= 1 else rounds
    training["rounds"] = rounds
    decay = training.get("lr_decay", 1.0)
    if rounds_cfg.get("rescale_lr_decay", False) and decay != 1.0 and rounds != paper_rounds:
        # keep the lr at the last round what the paper's schedule reaches at its last round
        training["lr_decay"] = round(decay ** (paper_rounds / rounds), 6)
    run = merge_settings(run, scale.get("set") or {})
    plugin_params = scale.get("plugins") or {}
    if plugin_params and run.get("plugins"):
        run["plugins"] = [
            {**p, "params": scaled_plugin_params(p, plugin_params.get(p["name"]) or {})}
            for p in run["plugins"]
        ]
    if run.get("plugins"):
        run["plugins"] = [scale_plugin_datasets(p, scale) for p in run["plugins"]]
    run["runtime"] = deep_merge(run.get("runtime") or {}, scale.get("runtime") or {})
    return run


def scaled_plugin_params(plugin: Mapping[str, Any], forced: Mapping[str, Any]) -> dict[str, Any]:
    """A plug-in's parameters at a scale: the scale's values replace the cell's, except that
    `{times: f}` for a numeric parameter multiplies the cell's value (or the declared default)
    by f, so a sweep over that parameter stays a sweep at a smaller scale (FedLGD's local and
    server distillation steps). An int stays an int, and one of at least 1 stays at least 1."""
    params = plugin.get("params") or {}
    declared = (catalog.method(plugin["name"]).params
                if plugin.get("name") in catalog.names("plugin") else {})
    plain, scaled = {}, {}
    for key, value in forced.items():
        param = declared.get(key)
        if (isinstance(value, Mapping) and set(value) == {"times"} and param is not None
                and param.value_kind in ("int", "number")):
            base = params.get(key, param.default)
            if base is None:
                continue
            product = base * float(value["times"])
            if param.value_kind == "int":
                product = max(int(round(product)), 1 if base >= 1 else 0)
            scaled[key] = product
        else:
            plain[key] = value
    return {**deep_merge(params, plain), **scaled}


def scale_plugin_datasets(plugin: dict[str, Any], scale: Mapping[str, Any]) -> dict[str, Any]:
    """A plug-in's parameters that name a dataset (its declaration's `dataset_params`) mapped
    like the run's dataset (FedDF's unlabeled data, VHL's real-image virtual source)."""
    name_ = plugin.get("name")
    if name_ not in catalog.names("plugin"):
        return plugin  # unknown names are reported by the expansion, with the file and cell
    params = plugin.get("params") or {}
    for dparam in catalog.method(name_).dataset_params:
        dataset = get_path(params, dparam.name)
        mapping = (scale.get("datasets") or {}).get(dataset) if dataset else None
        if not mapping:
            continue
        params = plain_copy(params)
        set_path(params, dparam.name, mapping.get("name", dataset))
        options = deep_merge(get_path(params, dparam.options) or {}, mapping.get("options") or {})
        set_path(params, dparam.options, options)
        plugin = {**plugin, "params": params}
    return plugin
