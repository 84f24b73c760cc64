"""Paper configs → run settings (torch-free).

A paper config (`config/papers/<paper>.yaml`) describes each table and figure as one or more
*grids*: named axes whose values are patches of run settings, on top of a *protocol* (the paper's
base settings, its vocabulary of axis values and per-cell look-up tables such as a learning-rate
table). A scale config (`config/scales/<scale>.yaml`) then maps the paper-scale settings onto what
runs at that scale (stand-in datasets, narrower models, fewer rounds).

`load_experiment` expands everything into cells (one per table or figure position) and runs (one
per distinct resolved run, shared by every cell that needs it). The Snakemake workflow
(`workflow/rules/common.smk`) and the package use this one resolver; it must stay importable
without torch so that the DAG builds in seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from fedhet import config as _config
from fedhet.config import (
    ALGORITHM_PARAMS,
    ConfigError,
    resolve_run,
    run_id,
)

PAPERS = ("vhl", "fedlgd", "fedimpro", "ccvr", "fedbr")
SCALES = ("demo", "small", "paper")

# Names the package registers (kept here so the DAG needs no torch; tests/test_experiments.py
# checks them against the package registries when those import).
DATASET_NAMES = (
    "cifar10",
    "cifar100",
    "cinic10",
    "digits10",
    "digits100",
    "digits_domains",
    "fmnist",
    "mnist",
    "svhn",
    "tinyimagenet",
    "usps",
)
MODEL_NAMES = (
    "cnn4",
    "convnet",
    "mobilenetv2",
    "resnet10",
    "resnet18",
    "resnet34",
    "resnet50",
    "simplecnn",
    "vgg11",
    "vgg9",
)
# Offline stand-ins (built locally, nothing to download).
STANDIN_DATASETS = ("digits10", "digits100", "digits_domains")
PARTITION_SCHEMES = (
    "dirichlet",
    "dirichlet_client",
    "domain",
    "iid",
    "nclass",
    "rotation",
    "subset",
)
# Plug-ins the papers use. One counts as implemented once the package declares it in
# fedhet.config.PLUGIN_PARAMS; until then its cells are "pending" (no run, empty cell).
KNOWN_PLUGINS = ("vhl", "fedimpro", "fedbr", "fedlgd", "clsnorm", "clsprox", "feddf")

TABLE_KINDS = ("accuracy", "rounds_to_target", "settings")
# curve: per-round metrics (workflow/rules/figures.smk); tsne and virtual_grid: VHL's feature
# t-SNE and virtual-data samples (workflow/rules/vhl.smk)
# cka, norms, calibration, wasserstein, calibration_tsne: CCVR's analyses of saved models, logged
# classifier norms and calibration outputs (workflow/rules/ccvr.smk)
FIGURE_KINDS = (
    "curve",
    "tsne",
    "virtual_grid",
    "cka",
    "norms",
    "calibration",
    "wasserstein",
    "calibration_tsne",
)
# Metrics a table can show and where they come from.
RUN_METRICS = ("acc", "last_acc", "top5_acc")  # from final.json (percent)
# from metrics.jsonl and the table's target; cost = rounds × passes over the clients' data per
# round (VHL Table 10), see fedhet.tables
DERIVED_METRICS = ("rounds", "speedup", "cost")
CURVE_METRICS = ("test_acc", "test_loss", "train_loss", "client_drift", "lr")
# Post-hoc cells (a vocabulary entry with `posthoc: {method: ccvr | oracle, ...}`, CCVR): the
# cell's accuracies come from the calibration of its run (calibration.json: acc_after) instead of
# final.json; `gain` = accuracy after − before calibration (percentage points).
POSTHOC_METRICS = ("gain",)
# Calibration settings that say how, not what: left out of the calibration key.
POSTHOC_EXECUTION_KEYS = ("device", "feature_batch_size")


class ExperimentError(ConfigError):
    """A paper, scale or workflow config is wrong; the message names the file and the key."""

    def __init__(self, file: str | Path, key: str, message: str) -> None:
        self.file = str(file)
        self.key = key
        super().__init__(f"{file}: '{key}': {message}")


# ----------------------------------------------------------------------------- helpers


def plain_copy(obj: Any) -> Any:
    """Copy of a YAML/JSON-like structure (dicts, lists, scalars); much faster than deepcopy."""
    if isinstance(obj, dict):
        return {k: plain_copy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain_copy(v) for v in obj]
    return obj


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`base` updated by `patch`; mappings merge recursively, everything else is replaced."""
    out = plain_copy(dict(base))
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = plain_copy(value)
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping, with the C parser when PyYAML has it (config files are read on every
    DAG build)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=loader)  # noqa: S506 (a safe loader)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating the mappings on the way."""
    keys = dotted.split(".")
    node = target
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = plain_copy(value)


def get_path(source: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = source
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def short_hash(obj: Any, length: int = 6) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def plugin_available(name: str) -> bool:
    """A plug-in is implemented once the package declares its parameters
    (fedhet.config.PLUGIN_PARAMS); until then its cells are pending."""
    return name in getattr(_config, "PLUGIN_PARAMS", {})


# ----------------------------------------------------------------------------- data classes


@dataclass
class Cell:
    """One position of a table or figure: its labels, the runs behind it (one per seed)."""

    paper: str
    item: str  # table or figure id, e.g. "t1", "fig3a"
    grid: int
    labels: dict[str, str]  # axis → vocabulary key
    display: dict[str, str]  # axis → printed label
    row: str
    column: str
    metrics: list[str]
    run_ids: list[str] = field(default_factory=list)  # one per seed, empty when pending
    pending: str | None = None  # why no run exists yet
    reference: dict[str, Any] = field(default_factory=dict)  # metric → transcribed value
    settings: dict[str, Any] = field(default_factory=dict)  # resolved run (first seed)
    values: dict[str, Any] = field(default_factory=dict)  # settings tables: metric → setting
    # post-hoc cells: one calibration id ("<run_id>/<key>") per seed, parallel to run_ids
    calibrations: list[str] = field(default_factory=list)

    def key(self) -> dict[str, Any]:
        return {
            "calibrations": self.calibrations,
            "grid": self.grid,
            "labels": self.labels,
            "display": self.display,
            "row": self.row,
            "column": self.column,
            "metrics": self.metrics,
            "run_ids": self.run_ids,
            "pending": self.pending,
            "reference": self.reference,
            "values": self.values,
        }


@dataclass
class Item:
    """A table or figure of one paper, expanded."""

    paper: str
    id: str
    kind: str
    is_figure: bool
    spec: dict[str, Any]
    cells: list[Cell]

    @property
    def target(self) -> str:
        return f"{self.paper}_{self.id}"

    def run_ids(self) -> list[str]:
        """Every cell's runs, each once, in cell order."""
        return list(dict.fromkeys(rid for cell in self.cells for rid in cell.run_ids))

    def calibration_ids(self) -> list[str]:
        """Every cell's calibrations, each once, in cell order."""
        return list(dict.fromkeys(cid for cell in self.cells for cid in cell.calibrations))

    def payload(self) -> dict[str, Any]:
        """Everything a table/figure script needs (passed as Snakemake params)."""
        return {
            "paper": self.paper,
            "id": self.id,
            "kind": self.kind,
            "spec": self.spec,
            "cells": [c.key() for c in self.cells],
        }


@dataclass
class Experiment:
    """All cells and runs of the selected papers at one scale."""

    scale: str
    scale_config: dict[str, Any]
    seeds: list[int]
    papers: dict[str, dict[str, Any]]  # paper → loaded config
    items: dict[str, Item]  # "<paper>_<id>" → item
    runs: dict[str, dict[str, Any]]  # run id → resolved run
    datasets: dict[str, dict[str, Any]]  # dataset key → {name, options}
    run_dataset: dict[str, str]  # run id → dataset key
    # run id → keys of the datasets its plug-ins read while training (FedDF's unlabeled data)
    run_plugin_datasets: dict[str, list[str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)  # key → partition job
    run_partition: dict[str, str] = field(default_factory=dict)  # run id → partition key
    # calibration id ("<run_id>/<key>") → {run_id, key, settings} (post-hoc steps, CCVR)
    calibrations: dict[str, dict[str, Any]] = field(default_factory=dict)

    def items_of(self, paper: str) -> list[Item]:
        return [item for item in self.items.values() if item.paper == paper]

    def claims(self) -> list[dict[str, Any]]:
        out = []
        for paper, cfg in self.papers.items():
            for claim in cfg.get("claims", []) or []:
                out.append({"paper": paper, **claim})
        return out


# ----------------------------------------------------------------------------- loading


class _Loader:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cache: dict[str, dict[str, Any]] = {}

    def paper_file(self, paper: str) -> Path:
        return self.root / "config" / "papers" / f"{paper}.yaml"

    def paper(self, paper: str, referenced_from: str | None = None) -> dict[str, Any]:
        if paper not in self.cache:
            path = self.paper_file(paper)
            if paper not in PAPERS or not path.exists():
                where = referenced_from or "config/config.yaml"
                raise ExperimentError(
                    where, "papers", f"unknown paper '{paper}'; valid: {', '.join(PAPERS)}"
                )
            data = read_yaml(path)
            if data.get("paper") != paper:
                raise ExperimentError(
                    path, "paper", f"must be '{paper}', got {data.get('paper')!r}"
                )
            self.cache[paper] = data
        return self.cache[paper]

    def protocol(self, paper: str, name: str, file: str, stack: tuple = ()) -> dict[str, Any]:
        """A protocol with its `extends` chain merged. `name` may be `<paper>/<protocol>`."""
        if "/" in name:
            paper, name = name.split("/", 1)
        cfg = self.paper(paper, referenced_from=file)
        protocols = cfg.get("protocols") or {}
        if name not in protocols:
            raise ExperimentError(
                self.paper_file(paper),
                f"protocols.{name}",
                f"unknown protocol; valid: {', '.join(sorted(protocols))}",
            )
        if (paper, name) in stack:
            raise ExperimentError(self.paper_file(paper), f"protocols.{name}.extends", "cycle")
        proto = protocols[name] or {}
        base: dict[str, Any] = {"settings": {}, "values": {}, "defaults": {}, "lookups": []}
        if proto.get("extends"):
            base = self.protocol(
                paper, proto["extends"], str(self.paper_file(paper)), stack + ((paper, name),)
            )
        merged = {
            "settings": deep_merge(base["settings"], proto.get("settings") or {}),
            "values": plain_copy(base["values"]),
            "defaults": {**base["defaults"], **(proto.get("defaults") or {})},
            # look-up tables are not inherited: a protocol that extends another one states its
            # own per-cell values (a silently inherited learning rate would be a wrong cell)
            "lookups": list(proto.get("lookups") or []),
            "file": str(self.paper_file(paper)),
            "name": f"{paper}/{name}",
        }
        for axis, values in (proto.get("values") or {}).items():
            merged["values"].setdefault(axis, {}).update(values or {})
        return merged


def _vocab_entry(proto: dict[str, Any], axis: str, key: str, file: str, where: str):
    values = proto["values"].get(axis)
    if values is None:
        raise ExperimentError(
            file,
            where,
            f"axis '{axis}' has no values in protocol {proto['name']}; "
            f"valid axes: {', '.join(sorted(proto['values']))}",
        )
    if key not in values:
        raise ExperimentError(
            file,
            where,
            f"unknown {axis} '{key}' in protocol {proto['name']}; valid: {', '.join(values)}",
        )
    entry = values[key] or {}
    return entry.get("label", key), entry.get("set") or {}


def _posthoc_of(proto: dict[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """Calibration settings of a cell: the `posthoc` patches of its axis values, in axis order
    (fedhet.posthoc.settings keys). A cell is post-hoc when they name a `method`."""
    out: dict[str, Any] = {}
    for axis, value in labels.items():
        entry = (proto["values"].get(axis) or {}).get(value) or {}
        out.update(entry.get("posthoc") or {})
    return out


def calibration_job(run_id_: str, posthoc: Mapping[str, Any], file: str, where: str):
    """(calibration id, job) of a post-hoc step on a run: the id is `<run_id>/<key>` with key =
    method + hash of the resolved calibration settings (execution settings left out), so equal
    calibrations of one run are one job whichever table or figure asks for them."""
    from fedhet.posthoc.settings import resolve_settings

    try:
        settings = resolve_settings(posthoc)
    except ConfigError as err:
        raise ExperimentError(file, f"{where} → posthoc", str(err)) from None
    ident = {k: v for k, v in settings.items() if k not in POSTHOC_EXECUTION_KEYS}
    ident["version"] = _config.IMPLEMENTATION_VERSIONS.get(settings["method"], 1)
    key = f"{settings['method']}-{short_hash(ident, 8)}"
    cid = f"{run_id_}/{key}"
    return cid, {"run_id": run_id_, "key": key, "settings": settings}


def _merge_runtime(existing: dict[str, Any], new: Mapping[str, Any]) -> None:
    """Two cells naming one run may ask for different extras (runtime is not part of the id):
    keep the union of the rounds whose snapshots / client models are saved."""
    rt = existing.setdefault("runtime", {})
    for key in ("snapshot_rounds", "save_client_models"):
        extra = (new.get("runtime") or {}).get(key) or []
        if extra:
            rt[key] = sorted({*(rt.get(key) or []), *extra})


def _last_round_runtime(run: dict[str, Any]) -> dict[str, Any]:
    """`-1` in runtime.save_client_models / snapshot_rounds = the last round at this scale."""
    rt = run.get("runtime") or {}
    rounds = (run.get("training") or {}).get("rounds", 10)
    for key in ("snapshot_rounds", "save_client_models"):
        if -1 in (rt.get(key) or []):
            rt[key] = sorted({rounds if r == -1 else int(r) for r in rt[key]})
    return run


def _lookup(
    values: Mapping[str, Any], by: list[str], labels: Mapping[str, str]
) -> tuple[bool, Any]:
    node: Any = values
    for axis in by:
        label = labels.get(axis)
        if not isinstance(node, Mapping) or label not in node:
            return False, None
        node = node[label]
    return True, node


def _check_lookup_keys(lookup: dict, proto: dict[str, Any], file: str, where: str) -> None:
    """Every key of a look-up table must be a vocabulary key (catches typos)."""

    def walk(node: Any, depth: int, path: str) -> None:
        if depth == len(lookup["by"]):
            return
        axis = lookup["by"][depth]
        valid = proto["values"].get(axis, {})
        if not isinstance(node, Mapping):
            raise ExperimentError(file, f"{where}{path}", f"expected a mapping keyed by {axis}")
        for key, child in node.items():
            if key not in valid:
                raise ExperimentError(
                    file,
                    f"{where}{path}.{key}",
                    f"unknown {axis} '{key}'; valid: {', '.join(valid)}",
                )
            walk(child, depth + 1, f"{path}.{key}")

    walk(lookup.get("values") or {}, 0, "")


# ----------------------------------------------------------------------------- scale


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
    model = run.setdefault("model", {})
    mname = model.get("name", "simplecnn")
    mmap = (scale.get("models") or {}).get(mname)
    if mmap:
        model["name"] = mmap.get("name", mname)
        if "width" in mmap:
            model["width"] = mmap["width"]
        model["options"] = deep_merge(model.get("options") or {}, mmap.get("options") or {})
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
    run = deep_merge(run, scale.get("set") or {})
    plugin_params = scale.get("plugins") or {}
    if plugin_params and run.get("plugins"):
        run["plugins"] = [
            {**p, "params": deep_merge(p.get("params") or {}, plugin_params.get(p["name"]) or {})}
            for p in run["plugins"]
        ]
    if run.get("plugins"):
        run["plugins"] = [_scale_plugin_datasets(p, scale) for p in run["plugins"]]
    run["runtime"] = deep_merge(run.get("runtime") or {}, scale.get("runtime") or {})
    return run


# Plug-in parameters naming a dataset (name key, options key), mapped like the run's dataset:
# FedDF's unlabeled data, VHL's real-image virtual data (Tiny-ImageNet subset).
PLUGIN_DATASET_PARAMS = {
    "feddf": ("unlabeled", "unlabeled_options"),
    "vhl": ("virtual_options.dataset", "virtual_options.dataset_options"),
}


def _scale_plugin_datasets(plugin: dict[str, Any], scale: Mapping[str, Any]) -> dict[str, Any]:
    keys = PLUGIN_DATASET_PARAMS.get(plugin.get("name"))
    params = plugin.get("params") or {}
    name = get_path(params, keys[0]) if keys else None
    mapping = (scale.get("datasets") or {}).get(name) if name else None
    if not mapping:
        return plugin
    params = plain_copy(params)
    set_path(params, keys[0], mapping.get("name", name))
    options = deep_merge(get_path(params, keys[1]) or {}, mapping.get("options") or {})
    set_path(params, keys[1], options)
    return {**plugin, "params": params}


def dataset_key(run: Mapping[str, Any]) -> str:
    """File-name key of a dataset variant (name + options)."""
    ds = run["dataset"]
    options = ds.get("options") or {}
    if not options:
        return ds["name"]
    return f"{ds['name']}-{short_hash(options)}"


def plugin_datasets(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Registered datasets a run's training job reads through its plug-ins ({name, options}
    each): FedDF's unlabeled images (not `noise`). They get the same prepare-data jobs as the
    runs' own datasets. (VHL's real-image virtual source is read by its virtual-data job, not
    by the run: workflow/rules/vhl_common.smk.)"""
    found = []
    for plugin in run.get("plugins") or []:
        params = plugin.get("params") or {}
        if plugin.get("name") == "feddf" and params.get("unlabeled", "noise") != "noise":
            found.append(
                {"name": params["unlabeled"], "options": params.get("unlabeled_options") or {}}
            )
    return found


PARTITION_FLAGS = ("scheme", "num_clients", "alpha", "classes_per_client", "min_size", "cap")


def partition_job(run: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The partition file a run trains on, as its own job: (key, settings for `fedhet
    partition`). None for centralized runs (no partition) and for scheme options the
    command line cannot pass (the run then builds its partition itself, cached)."""
    if run["training"]["centralized"]:
        return None
    part = run["partition"]
    if part.get("options"):
        return None
    settings = {k: part.get(k) for k in PARTITION_FLAGS}
    key_src = {"dataset": dataset_key(run), "partition": settings, "seed": run["seed"]}
    key = f"{dataset_key(run)}-{part['scheme']}-n{part['num_clients']}-{short_hash(key_src, 8)}"
    key = f"{key}-s{run['seed']}"
    job = {
        "dataset_key": dataset_key(run),
        "dataset": run["dataset"]["name"],
        "options": run["dataset"]["options"],
        "seed": run["seed"],
        **settings,
    }
    return key, job


def partition_args(job: Mapping[str, Any]) -> str:
    """Command-line flags of `fedhet partition` for a partition job (see `partition_job`)."""
    args = [
        f"--scheme {job['scheme']}",
        f"--clients {job['num_clients']}",
        f"--alpha {job['alpha']}",
        f"--classes-per-client {job['classes_per_client']}",
    ]
    if job.get("min_size") is not None:
        args.append(f"--min-size {job['min_size']}")
    if not job.get("cap", True):
        args.append("--no-cap")
    args.append(f"--seed {job['seed']}")
    return " ".join(args)


def dataset_epochs(run: Mapping[str, Any]) -> float:
    """Training work in passes over the whole training set (for runtime estimates)."""
    t = run["training"]
    if t["centralized"]:
        return float(t["rounds"] * t["local_epochs"])
    share = t["clients_per_round"] / max(1, run["partition"]["num_clients"])
    return float(t["rounds"] * t["local_epochs"] * share)


# ----------------------------------------------------------------------------- validation


def _check_names(run: dict[str, Any], file: str, where: str) -> None:
    checks = (
        ("dataset.name", run["dataset"]["name"], DATASET_NAMES, "dataset"),
        ("model.name", run["model"]["name"], MODEL_NAMES, "model"),
        ("partition.scheme", run["partition"]["scheme"], PARTITION_SCHEMES, "partition scheme"),
        ("algorithm.name", run["algorithm"]["name"], tuple(ALGORITHM_PARAMS), "algorithm"),
    )
    for key, value, valid, kind in checks:
        if value not in valid:
            raise ExperimentError(
                file, f"{where} → {key}", f"unknown {kind} '{value}'; valid: {', '.join(valid)}"
            )
    for plugin in run.get("plugins") or []:
        if plugin.get("name") not in KNOWN_PLUGINS:
            raise ExperimentError(
                file,
                f"{where} → plugins",
                f"unknown plug-in '{plugin.get('name')}'; valid: {', '.join(KNOWN_PLUGINS)}",
            )


def _axes_of(grid: dict[str, Any], file: str, where: str) -> list[tuple[str, list[str]]]:
    axes = []
    for axis, values in (grid.get("axes") or {}).items():
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list) or not values:
            raise ExperimentError(file, f"{where}.axes.{axis}", "must be a non-empty list")
        axes.append((axis, [str(v) for v in values]))
    return axes


def _row_column(
    grid: dict[str, Any], spec: dict[str, Any], display: dict[str, str], axes: list
) -> tuple[str, str]:
    names = [a for a, _ in axes]
    rows = grid.get("rows", [a for a in spec.get("rows", []) if a in names])
    cols = grid.get("columns", [a for a in spec.get("columns", []) if a in names])
    row_parts = [display[a] for a in rows]
    if grid.get("row_label"):
        row_parts.append(str(grid["row_label"]))
    col_parts = [display[a] for a in cols]
    if grid.get("column_label"):
        col_parts.append(str(grid["column_label"]))
    return " · ".join(row_parts), " · ".join(col_parts)


def _reference_for(grid: dict[str, Any], spec: dict, labels: dict[str, str], axes: list, metrics):
    """Transcribed paper values of one cell: grid `reference` nested by row axes, column axes,
    then metric (the metric level is left out when the grid shows one metric)."""
    ref = grid.get("reference")
    if ref is None:
        return {}
    names = [a for a, _ in axes]
    rows = grid.get("rows", [a for a in spec.get("rows", []) if a in names])
    cols = grid.get("columns", [a for a in spec.get("columns", []) if a in names])
    node: Any = ref
    for axis in [*rows, *cols]:
        if not isinstance(node, Mapping) or labels[axis] not in node:
            return {}
        node = node[labels[axis]]
    if len(metrics) == 1 and not (isinstance(node, Mapping) and metrics[0] in node):
        return {metrics[0]: node}
    if not isinstance(node, Mapping):
        return {}
    return {m: node[m] for m in metrics if m in node}


def _restrict(axes: list, scale: Mapping[str, Any], target: str, where: str) -> list:
    """Axis values kept at this scale: the scale's `restrict.<paper>_<id>.<axis>` list (a
    table too costly to run whole at a small scale), in the grid's order."""
    keep = (scale.get("restrict") or {}).get(target) or {}
    out = []
    for axis, values in axes:
        if axis in keep:
            wanted = {str(v) for v in keep[axis]}
            values = [v for v in values if v in wanted]
            if not values:
                raise ExperimentError(
                    "config/scales", f"restrict.{target}.{axis}", f"leaves no value in {where}"
                )
        out.append((axis, values))
    return out


def cost_factor(run: Mapping[str, Any]) -> float:
    """Passes over all clients' training data per round (VHL Table 10): the share of clients
    sampled × local epochs, × (1 + virtual batch / natural batch) with VHL virtual images."""
    t = run["training"]
    share = 1.0 if t["centralized"] else t["clients_per_round"] / run["partition"]["num_clients"]
    factor = share * t["local_epochs"]
    for plugin in run.get("plugins") or []:
        hp = {**_config.PLUGIN_PARAMS.get(plugin["name"], {}), **(plugin.get("params") or {})}
        if plugin["name"] == "vhl" and hp.get("variant") != "vfa":
            vbs = hp.get("virtual_batch_size")
            factor *= 1.0 + (t["batch_size"] if vbs is None else vbs) / t["batch_size"]
    return factor


# ----------------------------------------------------------------------------- expansion


def expand_item(
    loader: _Loader,
    paper: str,
    item_id: str,
    spec: dict[str, Any],
    is_figure: bool,
    scale: dict[str, Any],
    seeds: list[int],
    runs: dict[str, dict[str, Any]],
    skip_plugins: Iterable[str] = (),
    calibrations: dict[str, dict[str, Any]] | None = None,
) -> Item:
    file = str(loader.paper_file(paper))
    section = "figures" if is_figure else "tables"
    base = f"{section}.{item_id}"
    kind = spec.get("kind", "curve" if is_figure else "accuracy")
    valid_kinds = FIGURE_KINDS if is_figure else TABLE_KINDS
    if kind not in valid_kinds:
        raise ExperimentError(
            file, f"{base}.kind", f"unknown kind '{kind}'; valid: {', '.join(valid_kinds)}"
        )
    default_metrics = [spec.get("metric", "test_acc")] if is_figure else spec.get("metrics", ["acc"])
    cells: list[Cell] = []
    for g, grid in enumerate(spec.get("grids") or []):
        where = f"{base}.grids[{g}]"
        proto_name = grid.get("protocol", spec.get("protocol"))
        if not proto_name:
            raise ExperimentError(
                file, f"{where}.protocol", "missing (set it on the grid or table)"
            )
        if "/" not in proto_name:
            proto_name = f"{paper}/{proto_name}"
        proto = loader.protocol(paper, proto_name, file)
        for li, lookup in enumerate(proto["lookups"]):
            _check_lookup_keys(lookup, proto, proto["file"], f"lookups[{li}]({lookup['key']})")
        axes = _restrict(_axes_of(grid, file, where), scale, f"{paper}_{item_id}", where)
        metrics = grid.get("metrics", default_metrics)
        for combo in product(*[values for _, values in axes]):
            labels: dict[str, str] = dict(proto["defaults"])
            labels.update({axis: value for (axis, _), value in zip(axes, combo, strict=True)})
            display: dict[str, str] = {}
            patch: dict[str, Any] = deep_merge(proto["settings"], grid.get("set") or {})
            for axis, value in labels.items():
                label, vpatch = _vocab_entry(proto, axis, value, file, f"{where}.axes.{axis}")
                display[axis] = str(label)
                patch = deep_merge(patch, vpatch)
            for lookup in proto["lookups"]:
                found, value = _lookup(lookup.get("values") or {}, lookup["by"], labels)
                if found:
                    set_path(patch, lookup["key"], value)
                elif not lookup.get("partial", False):
                    missing = ".".join(labels.get(a, "?") for a in lookup["by"])
                    raise ExperimentError(
                        proto["file"],
                        f"lookups({lookup['key']}).values.{missing}",
                        f"no value for this cell of {paper} {item_id}",
                    )
            row, column = _row_column(grid, spec, display, axes)
            cell = Cell(
                paper=paper,
                item=item_id,
                grid=g,
                labels=labels,
                display=display,
                row=row,
                column=column,
                metrics=list(metrics),
                reference=_reference_for(grid, spec, labels, axes, metrics),
            )
            names = [p.get("name") for p in patch.get("plugins") or []]
            pending = [n for n in names if not plugin_available(n) or n in skip_plugins]
            if pending:
                # resolve without the missing plug-ins: the cell still shows its settings
                patch = {
                    **patch,
                    "plugins": [p for p in patch["plugins"] if p.get("name") not in pending],
                }
            scaled = _last_round_runtime(apply_scale({**patch, "seed": seeds[0]}, scale, file))
            try:
                first = resolve_run(scaled)
            except ConfigError as err:
                raise ExperimentError(
                    file, f"{where} cell {labels}", f"{err} (after applying the scale)"
                ) from None
            _check_names(first, file, f"{where} cell {labels}")
            cell.settings = first
            if kind == "settings":
                key = spec.get("setting_key", "training.lr")
                cell.values = {m: get_path(first, key) for m in metrics}
            elif "cost" in metrics:
                cell.values = {"cost_factor": cost_factor(first)}
            if not pending and kind != "settings":
                for seed in seeds:
                    # the seed changes nothing else of the resolved settings
                    resolved = first if seed == seeds[0] else {**plain_copy(first), "seed": seed}
                    rid = run_id(resolved)
                    _merge_runtime(runs.setdefault(rid, resolved), resolved)
                    cell.run_ids.append(rid)
                posthoc = _posthoc_of(proto, labels)
                if posthoc.get("method"):
                    for rid in cell.run_ids:
                        cid, job = calibration_job(rid, posthoc, file, f"{where} cell {labels}")
                        if calibrations is not None:
                            calibrations.setdefault(cid, job)
                        cell.calibrations.append(cid)
            if pending and kind != "settings":
                skipped = [n for n in pending if n in skip_plugins]
                cell.pending = (
                    f"method skipped by config (skip_plugins): {', '.join(skipped)}"
                    if skipped
                    else f"method not implemented yet: {', '.join(pending)}"
                )
            cells.append(cell)
    if not cells:
        raise ExperimentError(file, f"{base}.grids", "no grids: a table or figure needs one")
    restricted = (scale.get("restrict") or {}).get(f"{paper}_{item_id}")
    if restricted:
        shown = "; ".join(f"{a}: {', '.join(map(str, v))}" for a, v in restricted.items())
        spec = {**spec, "scale_note": f"This scale runs only {shown} (config/scales → restrict)."}
    return Item(paper=paper, id=item_id, kind=kind, is_figure=is_figure, spec=spec, cells=cells)


def load_scale(root: Path, scale: str) -> dict[str, Any]:
    path = Path(root) / "config" / "scales" / f"{scale}.yaml"
    if not path.exists():
        valid = sorted(p.stem for p in (Path(root) / "config" / "scales").glob("*.yaml"))
        raise ExperimentError(
            "config/config.yaml", "scale", f"unknown scale '{scale}'; valid: {', '.join(valid)}"
        )
    data = read_yaml(path)
    for key, kind, valid in (
        ("datasets", "dataset", DATASET_NAMES),
        ("models", "model", MODEL_NAMES),
    ):
        for src, dst in (data.get(key) or {}).items():
            for name in (src, (dst or {}).get("name", src)):
                if name not in valid:
                    raise ExperimentError(
                        path, f"{key}.{src}", f"unknown {kind} '{name}'; valid: {', '.join(valid)}"
                    )
    return data


def load_experiment(
    config: Mapping[str, Any],
    root: str | Path = ".",
    papers: Iterable[str] | None = None,
) -> Experiment:
    """Expand the workflow config (`config/config.yaml` plus overrides) into cells and runs.

    `papers` defaults to every paper with a config file, so targets such as `snakemake ccvr`
    exist even when `config['papers']` (what `snakemake` builds by default) leaves it out.
    """
    root = Path(root)
    scale_name = str(config.get("scale", "demo"))
    scale = load_scale(root, scale_name)
    seeds = config.get("seeds") or scale.get("seeds") or [0]
    seeds = [int(s) for s in seeds]
    skip = {str(p) for p in config.get("skip_plugins") or []}
    for name in skip:
        if name not in KNOWN_PLUGINS:
            raise ExperimentError(
                "config/config.yaml",
                "skip_plugins",
                f"unknown plug-in '{name}'; valid: {', '.join(KNOWN_PLUGINS)}",
            )
    loader = _Loader(root)
    selected = list(papers) if papers is not None else list(PAPERS)
    for paper in config.get("papers") or []:
        loader.paper(paper)  # unknown names fail here, listing the valid ones
    items: dict[str, Item] = {}
    runs: dict[str, dict[str, Any]] = {}
    calibrations: dict[str, dict[str, Any]] = {}
    loaded: dict[str, dict[str, Any]] = {}
    for paper in selected:
        if not loader.paper_file(paper).exists():
            continue
        cfg = loader.paper(paper)
        loaded[paper] = cfg
        for section, is_figure in (("tables", False), ("figures", True)):
            for item_id, spec in (cfg.get(section) or {}).items():
                item = expand_item(
                    loader, paper, item_id, spec, is_figure, scale, seeds, runs, skip, calibrations
                )
                items[item.target] = item
        for ci, claim in enumerate(cfg.get("claims") or []):
            for side in ("better", "than"):
                table = (claim.get(side) or {}).get("table")
                if f"{paper}_{table}" not in items:
                    raise ExperimentError(
                        loader.paper_file(paper),
                        f"claims[{ci}].{side}.table",
                        f"unknown table '{table}'; valid: "
                        + ", ".join(i.id for i in items.values() if i.paper == paper),
                    )
    datasets: dict[str, dict[str, Any]] = {}
    run_dataset: dict[str, str] = {}
    run_plugin_datasets: dict[str, list[str]] = {}
    partitions: dict[str, dict[str, Any]] = {}
    run_partition: dict[str, str] = {}
    for rid, run in runs.items():
        key = dataset_key(run)
        datasets.setdefault(
            key, {"name": run["dataset"]["name"], "options": run["dataset"]["options"]}
        )
        run_dataset[rid] = key
        for extra in plugin_datasets(run):
            extra_key = dataset_key({"dataset": extra})
            datasets.setdefault(extra_key, extra)
            run_plugin_datasets.setdefault(rid, []).append(extra_key)
        pjob = partition_job(run)
        if pjob is not None:
            partitions.setdefault(pjob[0], pjob[1])
            run_partition[rid] = pjob[0]
    return Experiment(
        scale=scale_name,
        scale_config=scale,
        seeds=seeds,
        papers=loaded,
        items=items,
        runs=runs,
        datasets=datasets,
        run_dataset=run_dataset,
        run_plugin_datasets=run_plugin_datasets,
        partitions=partitions,
        run_partition=run_partition,
        calibrations=calibrations,
    )


def ci_selection(exp: Experiment, ci: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The `ci` target: whole items plus the runs of selected cells (`config.yaml` → ci)."""
    items = []
    for name in ci.get("targets") or []:
        if name not in exp.items:
            raise ExperimentError(
                "config/config.yaml",
                "ci.targets",
                f"unknown target '{name}'; valid: {', '.join(sorted(exp.items))}",
            )
        items.append(name)
    run_ids: dict[str, None] = {}
    for i, sel in enumerate(ci.get("cells") or []):
        name = sel.get("target")
        if name not in exp.items:
            raise ExperimentError(
                "config/config.yaml",
                f"ci.cells[{i}].target",
                f"unknown target '{name}'; valid: {', '.join(sorted(exp.items))}",
            )
        where = sel.get("where") or {}
        for cell in exp.items[name].cells:
            if all(cell.labels.get(k) == str(v) for k, v in where.items()):
                for rid in cell.run_ids:
                    run_ids[rid] = None
    return items, list(run_ids)
