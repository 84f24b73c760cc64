"""Run settings: defaults, validation, and the run identity (torch-free).

A run is one nested dict. `resolve_run` fills defaults and rejects unknown keys,
`run_hash` hashes the parts that change the training maths (everything except the
`runtime` section, but with its numeric modes, `fedhet.settings.RUNTIME_IDENTITY`) together
with the implementation version of every algorithm and plug-in used (for a method of another
installed package, also that package's version and a hash of its source:
`fedhet.catalog.identity_version`), and `run_id` prefixes that hash with a readable name.

This module must stay importable without torch: the Snakemake DAG uses it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from collections.abc import Mapping
from typing import Any

from fedhet import catalog, names
from fedhet.declare import ConfigError, Param, late_defaults, resolve_params
from fedhet.settings import DEFAULTS, RUNTIME_IDENTITY, SETTINGS

__all__ = ["ConfigError", "SETTINGS", "DEFAULTS", "resolve_run", "run_hash", "run_id", "identity"]

# Bump an entry when a bug fix changes what that part of the package computes: every run gets a
# new id and retrains (Snakemake does not track the package's code). Methods carry their own
# version in their declaration (fedhet.methods.<package>).
CORE_VERSIONS: dict[str, int] = {"engine": 1, "data": 1, "partition": 1}


IDENTITY_EXCLUDED = ("runtime", "name")
# Paths say where things live, not what is computed.
PATH_KEYS = (("dataset", "root"), ("partition", "root"), ("partition", "file"))


def _resolve(node: Mapping[str, Any], given: Any, where: str) -> dict[str, Any]:
    """The section `node` of SETTINGS with `given` checked against its declarations."""
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"setting '{where.rstrip('.') or 'run'}' must be a mapping, got {given!r}")
    params = {k: v for k, v in node.items() if isinstance(v, Param)}
    sections = {k: v for k, v in node.items() if not isinstance(v, Param)}
    for key in given:
        if key not in node:
            raise ConfigError(f"unknown setting '{where}{key}'; valid keys here: "
                              f"{', '.join(sorted(node))}")
    out = resolve_params(params, {k: v for k, v in given.items() if k in params}, where)
    out.update({k: _resolve(sub, given.get(k), f"{where}{k}.") for k, sub in sections.items()})
    return {key: out[key] for key in node}


# Settings that name a registered dataset, model or partition scheme.
_REGISTERED = (("dataset", "name", names.datasets), ("model", "name", names.models),
               ("partition", "scheme", names.schemes))


def _declared(name: str, kind: str, where: str):
    """The declaration of an implemented method of `kind`, or a ConfigError naming `where`."""
    valid = catalog.names(kind)
    if name not in valid:
        raise ConfigError(f"unknown {kind} '{name}' at '{where}'; valid: {', '.join(valid)}"
                          f"{catalog.refusal_note()}")
    decl = catalog.method(name, kind)
    if not decl.implemented:
        implemented = ", ".join(catalog.names(kind, implemented=True))
        raise ConfigError(
            f"{kind} '{name}' at '{where}' is declared but not implemented yet; "
            f"implemented: {implemented}"
        )
    return decl


def _renamed_bf16(given: Mapping[str, Any]) -> Mapping[str, Any]:
    """`given` with the former `runtime.bf16` read as `runtime.precision` (true: bf16; false:
    no autocast, the precision as given), so configurations written before keep working."""
    runtime = given.get("runtime")
    if not isinstance(runtime, Mapping) or "bf16" not in runtime:
        return given
    runtime = dict(runtime)
    bf16, precision = runtime.pop("bf16"), runtime.get("precision")
    if not isinstance(bf16, bool):
        raise ConfigError(f"setting 'runtime.bf16' is {bf16!r}; allowed: true or false "
                          "(it is replaced by runtime.precision: bf16)")
    if precision is not None and (precision == "bf16") != bf16:
        raise ConfigError(f"runtime.bf16 ({bf16}) and runtime.precision ({precision}) "
                          "disagree; runtime.bf16 is replaced by runtime.precision: set only that")
    if bf16:
        runtime["precision"] = "bf16"
        warnings.warn("runtime.bf16 is replaced by runtime.precision: bf16 (read as that)",
                      FutureWarning, stacklevel=3)
    return {**given, "runtime": runtime}


def resolve_run(given: Mapping[str, Any]) -> dict[str, Any]:
    """Fill defaults into a run dict and validate names and values.

    Raises ConfigError naming the offending key.
    """
    if isinstance(given, Mapping):
        given = _renamed_bf16(given)
    run = _resolve(SETTINGS, given, "")
    for section, key, valid in _REGISTERED:
        if run[section][key] not in valid():
            raise ConfigError(f"unknown {section} '{run[section][key]}' at '{section}.{key}'; "
                              f"valid: {', '.join(valid())}")
    algo = run["algorithm"]["name"]
    decl = _declared(algo, "algorithm", "algorithm.name")
    run["algorithm"]["params"] = resolve_params(
        decl.params, run["algorithm"]["params"], f"algorithm.params({algo})."
    )
    plugins = []
    for i, plugin in enumerate(run["plugins"]):
        if not isinstance(plugin, Mapping) or "name" not in plugin:
            raise ConfigError(f"plugins[{i}] must be a mapping with a 'name'")
        extra = set(plugin) - {"name", "params"}
        if extra:
            raise ConfigError(f"unknown setting 'plugins[{i}].{sorted(extra)[0]}'; "
                              "valid keys here: name, params")
        name = plugin["name"]
        decl = _declared(name, "plugin", f"plugins[{i}].name")
        params = resolve_params(decl.params, plugin.get("params"), f"plugins[{i}].params({name}).")
        plugins.append({"name": name, "params": params})
    run["plugins"] = plugins
    t = run["training"]
    if t["client_fraction"] is not None:
        per_round = max(1, int(t["client_fraction"] * run["partition"]["num_clients"]))
        asked = (given.get("training") or {}).get("clients_per_round")
        if asked is not None and asked != per_round:
            raise ConfigError(
                f"training.clients_per_round ({asked}) and training.client_fraction "
                f"({t['client_fraction']} of {run['partition']['num_clients']} clients = "
                f"{per_round}) disagree; set one of them"
            )
        t["clients_per_round"] = per_round
    if t["clients_per_round"] > run["partition"]["num_clients"] and not t["centralized"]:
        raise ConfigError(
            f"training.clients_per_round ({t['clients_per_round']}) exceeds "
            f"partition.num_clients ({run['partition']['num_clients']})"
        )
    return run


def _drop_late(ident: dict[str, Any], settings: Mapping[str, Any]) -> None:
    """Leave out settings added after the first run ids (`since` > 0) that hold their default,
    so adding a setting changes no existing run id."""
    for key, decl in settings.items():
        if key not in ident:
            continue
        if isinstance(decl, Mapping):
            if isinstance(ident[key], dict):
                _drop_late(ident[key], decl)
        elif decl.since > 0 and ident[key] == decl.default:
            del ident[key]


def _drop_late_params(params: dict[str, Any], name: str) -> None:
    for key, default in late_defaults(catalog.method(name).params).items():
        if key in params and params[key] == default:
            del params[key]


def identity(run: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a resolved run that determines its results, plus code versions."""
    ident = {k: copy.deepcopy(v) for k, v in run.items() if k not in IDENTITY_EXCLUDED}
    ident["runtime"] = {key: run["runtime"][key] for key in RUNTIME_IDENTITY}
    for section, key in PATH_KEYS:
        ident[section].pop(key, None)
    _drop_late(ident, SETTINGS)
    if not ident["runtime"]:  # every numeric mode at today's default: ids as before
        del ident["runtime"]
    _drop_late_params(ident["algorithm"]["params"], run["algorithm"]["name"])
    for plugin in ident["plugins"]:
        _drop_late_params(plugin["params"], plugin["name"])
    versions = {name: CORE_VERSIONS[name] for name in ("engine", "data", "partition")}
    for name in (run["algorithm"]["name"], *(p["name"] for p in run["plugins"])):
        versions[name] = catalog.identity_version(name)
    ident["versions"] = versions
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
        try:
            data = yaml.safe_load(fh)
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data
