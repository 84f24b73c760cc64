"""Partitions of a run on disk: cache keys (`partition_key`) and `load_or_make_partition`,
which reads a given or cached `.npz` file or makes the partition and caches it.

The file format itself is `Partition.save` / `Partition.load` (in `core`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedhet.partition.core import (
    PARTITION_VERSION,
    Partition,
    PartitionError,
    _json_default,
    _labels_array,
    labels_checksum,
    scheme_params,
)
from fedhet.settings import DEFAULTS

# Settings keys of a run's `partition` section that are forwarded to a scheme when it takes them.
_SHARED_PARAM_KEYS = ("alpha", "classes_per_client", "min_size", "cap")


def _full_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A run's `partition` section with defaults filled in; an optional free-form `options`
    mapping carries scheme-specific parameters (e.g. rotation_mode, dominant_fraction)."""
    allowed = set(DEFAULTS["partition"]) | {"options"}
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise PartitionError(
            f"unknown partition setting(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(allowed))}"
        )
    return {**DEFAULTS["partition"], "options": {}, **settings}


def _settings_params(full: Mapping[str, Any]) -> dict[str, Any]:
    """The scheme parameters a settings section implies: the shared keys (alpha, min_size, ...)
    the scheme takes and that are not None, plus everything in `options`."""
    options = dict(full.get("options") or {})
    valid = scheme_params(full["scheme"], options.get("base"))
    params = {k: full[k] for k in _SHARED_PARAM_KEYS if k in valid and full[k] is not None}
    params.update(options)
    return params


def partition_key(dataset_key: str, settings: Mapping[str, Any], seed: int) -> str:
    """Filename-safe cache key of a partition, readable plus a short hash.

    E.g. `cifar10-dirichlet-n10-a0.1-s0-1a2b3c4d`. The hash covers the data set key, scheme,
    number of clients, the parameters the scheme actually uses (so settings a scheme ignores do
    not change the key), the seed and `PARTITION_VERSION`; paths (`root`, `file`) are left out.
    """
    full = _full_settings(settings)
    params = _settings_params(full)
    ident = {
        "dataset": dataset_key,
        "scheme": full["scheme"],
        "num_clients": full["num_clients"],
        "params": params,
        "seed": seed,
        "version": PARTITION_VERSION,
    }
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=_json_default)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:8]
    readable = [str(dataset_key), str(full["scheme"]), f"n{full['num_clients']}"]
    if "alpha" in params:
        readable.append(f"a{params['alpha']}")
    if "classes_per_client" in params:
        readable.append(f"c{params['classes_per_client']}")
    readable += [f"s{seed}", digest]
    return re.sub(r"[^A-Za-z0-9._+-]", "_", "-".join(readable))


def load_or_make_partition(data: Any, settings: Mapping[str, Any], seed: int) -> Partition:
    """The partition of a run, read from disk when it exists.

    `data` is a `FedData` (`y_train`, `num_classes`, `domain_train`, and `key` or `name`);
    `settings` the run's `partition` section. If `settings["file"]` is set, that file is loaded
    and checked against the data and `num_clients`. Otherwise the partition is cached under
    `settings["root"]` as `<partition_key>.npz`: read if present and made for the same training
    labels, else made and written atomically (concurrent jobs write identical files).
    """
    full = _full_settings(settings)
    labels = _labels_array(data.y_train, data.num_classes)
    if full["file"]:
        path = Path(full["file"])
        if not path.exists():
            raise FileNotFoundError(f"partition.file {path} does not exist")
        part = Partition.load(path)
        _check_loaded(part, labels, full, path)
        return part
    key = partition_key(getattr(data, "key", data.name), full, seed)
    path = Path(full["root"]) / f"{key}.npz"
    if path.exists():
        part = Partition.load(path)
        if part.meta.get("labels_sha256") == labels_checksum(labels):
            return part
    domains = getattr(data, "domain_train", None)
    # Looked up on the package at call time, as when this was one module: replacing
    # `fedhet.partition.make_partition` (tests monkeypatch it) affects this call too.
    from fedhet import partition as package

    part = package.make_partition(
        labels,
        full["scheme"],
        full["num_clients"],
        seed,
        num_classes=data.num_classes,
        domains=None if domains is None else np.asarray(domains),
        **_settings_params(full),
    )
    part.save(path)
    return part


def _check_loaded(part: Partition, labels: np.ndarray, full: Mapping[str, Any], path: Path) -> None:
    """Reject an explicit partition file that does not fit the run's data or settings."""
    if part.num_clients != full["num_clients"]:
        raise PartitionError(
            f"{path}: has {part.num_clients} clients but partition.num_clients is "
            f"{full['num_clients']}"
        )
    if "scheme" in part.meta and part.meta["scheme"] != full["scheme"]:
        raise PartitionError(
            f"{path}: was made with scheme '{part.meta['scheme']}' but partition.scheme is "
            f"'{full['scheme']}'"
        )
    checksum = part.meta.get("labels_sha256")
    if checksum is not None and checksum != labels_checksum(labels):
        raise PartitionError(f"{path}: was made for different training labels")
    part.validate(labels.size)


# each client's training indices, and each one's per-sample rotation angles (None: no rotation)
ClientSplit = tuple[list[np.ndarray], list[np.ndarray] | None]


def client_partition(run: Mapping[str, Any], data: Any) -> ClientSplit:
    """Each client's training indices (and per-sample rotation angles, if any) of a resolved
    run: the whole training set for a centralized run, else its cached partition."""
    if run["training"]["centralized"]:
        return [np.arange(len(data.y_train))], None
    part = load_or_make_partition(data, run["partition"], run["seed"])
    return part.client_indices, part.client_angles
