"""Run settings: defaults, validation, and the run identity (torch-free).

A run is one nested dict. `resolve_run` fills defaults and rejects unknown keys,
`run_hash` hashes the parts that change the training maths (everything except the
`runtime` section) together with the implementation version of every algorithm and
plug-in used, and `run_id` prefixes that hash with a readable name.

This module must stay importable without torch: the Snakemake DAG uses it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

# Bump an entry when a bug fix changes what that algorithm computes: every run using
# it gets a new id and retrains (Snakemake does not track the package's code).
IMPLEMENTATION_VERSIONS: dict[str, int] = {
    "engine": 1,
    "data": 1,
    "partition": 1,
    "fedavg": 1,
    "fedprox": 1,
    "scaffold": 2,  # 2: correction applied after the step, outside client momentum
    "fednova": 1,
    "fedavgm": 1,
    "feddyn": 1,
    "moon": 1,
    "clsnorm": 1,
    "clsprox": 1,
    "ccvr": 1,  # post-hoc calibration (fedhet.posthoc); not part of any training run's hash
    "vhl": 1,
    "feddf": 2,
}

ALGORITHM_PARAMS: dict[str, dict[str, Any]] = {
    "fedavg": {},
    "fedprox": {"mu": 0.01},
    "scaffold": {"global_lr": 1.0, "paper_server_update": True},
    "fednova": {},
    "fedavgm": {"server_momentum": 0.9, "server_lr": 1.0},
    "feddyn": {"alpha": 0.1},
    "moon": {"mu": 5.0, "temperature": 0.5},
}

# Plug-ins and their parameters with defaults; each plug-in's module registers the class.
PLUGIN_PARAMS: dict[str, dict[str, Any]] = {
    # CCVR §3.3: logits z·φ_i/‖φ_i‖ (no scale); bias: add the head's bias (the paper has none).
    "clsnorm": {"bias": False},
    # CCVR §3.3: (μ/2)‖φ_k − φ_g‖² on the classifier; μ not given in the paper (assumed).
    "clsprox": {"mu": 0.01},
    # VHL (fedhet.methods.vhl). "code" = the authors' public code, "assumed" = not in the paper.
    "vhl": {
        "variant": "vhl",  # vhl | naive (no calibration) | vfa (Gaussian features) | vftl
        "virtual_kind": "stylegan",  # stylegan | noise | cnn | tinyimagenet10 (fedhet.virtual)
        "virtual_classes": None,  # C_v; None = C natural classes (paper)
        "virtual_per_class": 200,  # code's active setting (a commented variant: 5000)
        "virtual_seed": 0,  # assumed: one virtual dataset for every run seed, as generated once
        "virtual_options": {},  # generator options and defaults: fedhet.virtual.spec
        "virtual_batch_size": None,  # None = training.batch_size (paper: 128 natural + 128 virtual)
        "virtual_augment": True,  # code: RandomCrop + HFlip on virtual images (any dataset)
        "virtual_normalization": "code",  # code: mean 0.5, std 0.25; natural: dataset statistics
        "virtual_ce_weight": 1.0,  # code
        "calibration_weight": 1.0,  # code; Table 6 default (assumed reading)
        "calibration_layer": "penultimate",  # code: avgpool feature before the classifier
        "temperature": 0.07,  # code: SupCon tau = base tau = 0.07, mode "all"
        "virtual_supcon_weight": 0.1,  # assumed (code): extra SupCon on virtual features alone
        "eval_protocol": "all",  # assumed (code): argmax over C + C_v; natural = argmax over C
        "vfa_mean_std": 1.0,  # assumed: VFA class means ~ N(0, 1) at the calibration layer
        "vfa_std": 0.3,  # assumed: VFA samples ~ N(mean, 0.3^2)
        "vftl_steps": 1000,  # assumed: SGD steps of server pre-training on virtual data (VFTL)
    },
    # FedDF (fedhet.methods.feddf): server-side ensemble distillation after aggregation.
    "feddf": {
        "unlabeled": "cifar100",  # dataset name, or "noise"; FedDF's choice for CIFAR-10
        "unlabeled_options": {},  # dataset options (images are converted to the run's shape)
        "unlabeled_size": None,  # None = every training image of the unlabeled dataset
        "steps": 1000,  # most steps a round; assumed: FedDF allows 10^4 (with early stopping)
        # Early stopping on labelled validation images, and the student kept at its best
        # validation accuracy (the aggregated model, step 0, included), as FedDF does.
        "validation_size": 500,  # assumed; 0 = no validation: all `steps`, last student kept
        "eval_every": 100,  # assumed: validate every this many steps
        "patience": 1000,  # FedDF: stop after 10^3 steps without improvement
        "batch_size": None,  # None = training.batch_size (FedDF: 64)
        "lr": 1.0e-3,  # FedDF: Adam, lr 1e-3
        "temperature": 1.0,  # FedDF code default KL temperature
        "augment": True,  # assumed: the training augmentation on the unlabeled images
        "seed": 0,  # which unlabeled subset when unlabeled_size is set
    },
}

DEFAULTS: dict[str, Any] = {
    "name": "",  # readable prefix of the run id; empty = built from the settings
    "seed": 0,
    "dataset": {
        "name": "digits10",
        "root": "resources/datasets",
        "options": {},  # dataset-specific, e.g. stand-in channels/size
    },
    "partition": {
        "scheme": "dirichlet",  # see fedhet.partition.SCHEMES
        "num_clients": 10,
        "alpha": 0.1,
        "classes_per_client": 2,
        "min_size": None,  # None = scheme default
        "cap": True,  # LDA: clients over N/K get no more of a class (official code)
        "root": "resources/partitions",
        "file": None,  # explicit partition file (workflow); None = cached by key
        "options": {},  # scheme-specific, e.g. rotation_mode, dominant_fraction, prior
    },
    "model": {"name": "simplecnn", "width": 1.0, "options": {}},
    "algorithm": {"name": "fedavg", "params": {}},
    "plugins": [],  # list of {name, params}
    "training": {
        "rounds": 10,
        "clients_per_round": 5,
        "local_epochs": 1,
        "local_steps": None,  # fixed number of local steps instead of epochs
        "batch_size": 64,
        "lr": 0.01,
        "lr_decay": 1.0,  # multiplied into lr every round
        "momentum": 0.0,
        "weight_decay": 0.0,
        "keep_client_optimizer_state": False,
        "augment": "auto",  # auto | none | crop_flip | crop | rotate
        "centralized": False,  # one client holding all data, every round
        "max_grad_norm": None,
    },
    "eval": {"every": 1, "batch_size": 512},
    # Not part of the identity: how and where it runs, what extra it saves.
    "runtime": {
        "device": "auto",
        "bf16": False,
        "channels_last": False,
        "checkpoint_every": 10,
        "snapshot_rounds": [],
        "save_client_models": [],
        "log_every": 1,
        "threads": None,
    },
}

IDENTITY_EXCLUDED = ("runtime", "name")
# Paths say where things live, not what is computed.
PATH_KEYS = (("dataset", "root"), ("partition", "root"), ("partition", "file"))


class ConfigError(ValueError):
    """A run setting is missing, misspelled or out of range."""


def _merge(defaults: Mapping[str, Any], given: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(defaults))
    for key, value in given.items():
        if key not in defaults:
            valid = ", ".join(sorted(defaults))
            raise ConfigError(f"unknown setting '{where}{key}'; valid keys here: {valid}")
        default = defaults[key]
        free_form = key in ("options", "params")
        if isinstance(default, dict) and default and not free_form:
            if not isinstance(value, Mapping):
                raise ConfigError(f"setting '{where}{key}' must be a mapping, got {value!r}")
            out[key] = _merge(default, value, f"{where}{key}.")
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve_run(given: Mapping[str, Any]) -> dict[str, Any]:
    """Fill defaults into a run dict and validate names and values.

    Raises ConfigError naming the offending key.
    """
    run = _merge(DEFAULTS, given or {}, "")
    algo = run["algorithm"]["name"]
    if algo not in ALGORITHM_PARAMS:
        raise ConfigError(
            f"unknown algorithm '{algo}'; valid: {', '.join(sorted(ALGORITHM_PARAMS))}"
        )
    run["algorithm"]["params"] = _merge(
        ALGORITHM_PARAMS[algo], run["algorithm"]["params"] or {}, f"algorithm.params({algo})."
    )
    plugins = []
    for i, plugin in enumerate(run["plugins"]):
        if not isinstance(plugin, Mapping) or "name" not in plugin:
            raise ConfigError(f"plugins[{i}] must be a mapping with a 'name'")
        extra = set(plugin) - {"name", "params"}
        if extra:
            raise ConfigError(f"unknown setting 'plugins[{i}].{sorted(extra)[0]}'")
        name = plugin["name"]
        if name not in PLUGIN_PARAMS:
            valid = ", ".join(sorted(PLUGIN_PARAMS)) or "(none)"
            raise ConfigError(f"unknown plug-in '{name}'; valid: {valid}")
        params = _merge(PLUGIN_PARAMS[name], plugin.get("params") or {}, f"plugins[{i}].params({name}).")
        plugins.append({"name": name, "params": params})
    run["plugins"] = plugins
    t = run["training"]
    for section, key in (("training", "rounds"), ("training", "clients_per_round"),
                         ("training", "batch_size"), ("runtime", "checkpoint_every"),
                         ("runtime", "log_every")):
        value = run[section][key]
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{section}.{key} must be a positive integer, got {value!r}")
    if t["clients_per_round"] > run["partition"]["num_clients"] and not t["centralized"]:
        raise ConfigError(
            f"training.clients_per_round ({t['clients_per_round']}) exceeds "
            f"partition.num_clients ({run['partition']['num_clients']})"
        )
    if not t["lr"] > 0:
        raise ConfigError(f"training.lr must be > 0, got {t['lr']!r}")
    if run["eval"]["every"] < 1:
        raise ConfigError("eval.every must be >= 1")
    return run


def identity(run: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a resolved run that determines its results, plus code versions."""
    ident = {k: copy.deepcopy(v) for k, v in run.items() if k not in IDENTITY_EXCLUDED}
    for section, key in PATH_KEYS:
        ident[section].pop(key, None)
    used = ["engine", "data", "partition", run["algorithm"]["name"], *(p["name"] for p in run["plugins"])]
    ident["versions"] = {name: IMPLEMENTATION_VERSIONS.get(name, 1) for name in used}
    return ident


def run_hash(run: Mapping[str, Any], length: int = 8) -> str:
    """Short sha256 of the canonical JSON of `identity(run)`."""
    blob = json.dumps(identity(run), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def run_prefix(run: Mapping[str, Any]) -> str:
    """Readable part of a run id: dataset-algorithm+plugins."""
    if run.get("name"):
        return str(run["name"])
    methods = "+".join([run["algorithm"]["name"], *(p["name"] for p in run["plugins"])])
    if run["training"]["centralized"]:
        methods = "central"
    return f"{run['dataset']['name']}-{methods}"


def run_id(run: Mapping[str, Any]) -> str:
    """`<prefix>-<hash>-s<seed>`, e.g. `cifar10-fedavg+vhl-3fa9c1d2-s0`."""
    return f"{run_prefix(run)}-{run_hash(run)}-s{run['seed']}"


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML mapping, with an error naming the file when it is not one."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data
