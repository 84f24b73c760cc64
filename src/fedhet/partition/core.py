"""The `Partition` type, the `SCHEMES` registry and `make_partition`, which dispatches to it.

Schemes live in their own modules (`dirichlets`, `classes`, `domains`) and register themselves
here with `@SCHEMES.register(name)`; importing the `fedhet.partition` package imports all of
them. A scheme is called as `fn(labels, num_clients, rng, *, num_classes, domains, **params)`
and returns a `Partition`; its keyword-only parameters (other than the context arguments) are
its user parameters, listed by `scheme_params`.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedhet.atomic import write_with
from fedhet.registry import Registry

# Bump when a change to a scheme changes the split it produces for the same settings and seed:
# cached partitions get a new key and are rebuilt.
PARTITION_VERSION = 1

# Keyword arguments every scheme receives from `make_partition`; not user parameters.
_CONTEXT_ARGS = ("num_classes", "domains")

SchemeFn = Callable[..., "Partition"]
SCHEMES: Registry[SchemeFn] = Registry("partition scheme")


class PartitionError(ValueError):
    """A partition cannot be made (or loaded) with the given data and parameters."""


@dataclass
class Partition:
    """Which training samples each client holds.

    `client_indices[k]` are indices into the training set (int64, sorted). `client_angles[k]`,
    when present, is a rotation in degrees for each of those samples, aligned with
    `client_indices[k]`. `meta` records how the partition was made (scheme, parameters, seed,
    number and checksum of the training labels) so a saved file says what it is.
    """

    client_indices: list[np.ndarray]
    client_angles: list[np.ndarray] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client_indices = [np.asarray(idx, dtype=np.int64) for idx in self.client_indices]
        if not self.client_indices:
            raise PartitionError("a partition needs at least one client")
        if self.client_angles is not None:
            self.client_angles = [np.asarray(a, dtype=np.float32) for a in self.client_angles]
            if len(self.client_angles) != len(self.client_indices) or any(
                len(a) != len(i) for a, i in zip(self.client_angles, self.client_indices)
            ):
                raise PartitionError("client_angles must have one angle per client sample")

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def sizes(self) -> np.ndarray:
        """Number of samples per client."""
        return np.array([len(idx) for idx in self.client_indices], dtype=np.int64)

    def validate(self, num_samples: int) -> None:
        """Check that every index lies in the training set and no index is used twice."""
        flat = np.concatenate(self.client_indices)
        if flat.size and (flat.min() < 0 or flat.max() >= num_samples):
            raise PartitionError(
                f"partition indices outside the training set of {num_samples} samples "
                f"(range {flat.min()}..{flat.max()})"
            )
        if np.unique(flat).size != flat.size:
            raise PartitionError("partition assigns some training samples to several clients")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the partition as `.npz`, atomically (a temp file in the same folder, then
        `os.replace`), so concurrent jobs never see a half-written file."""
        arrays: dict[str, np.ndarray] = {
            "indices": np.concatenate(self.client_indices),
            "sizes": self.sizes,
            "meta": np.array(json.dumps(self.meta, sort_keys=True, default=_json_default)),
        }
        if self.client_angles is not None:
            arrays["angles"] = np.concatenate(self.client_angles)
        write_with(path, lambda fh: np.savez(fh, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Partition:
        """Read a file written by `save`; a damaged file is a PartitionError saying what to do."""
        try:
            with np.load(path, allow_pickle=False) as data:
                missing = {"indices", "sizes"} - set(data.files)
                if missing:
                    raise PartitionError(
                        f"{path}: not a partition file (missing {', '.join(sorted(missing))})"
                    )
                cuts = np.cumsum(data["sizes"])[:-1]
                indices = np.split(data["indices"], cuts)
                angles = np.split(data["angles"], cuts) if "angles" in data.files else None
                meta = json.loads(str(data["meta"])) if "meta" in data.files else {}
        except PartitionError:
            raise
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
            raise PartitionError(
                f"{path} is not a readable partition file ({type(err).__name__}: {err}); delete "
                "it (a cached partition is made again by the next run) or write it again with "
                "`fedhet partition ... --out FILE`"
            ) from None
        return cls(client_indices=indices, client_angles=angles, meta=meta)


def _json_default(obj: Any) -> Any:
    """JSON encoding for numpy scalars/arrays and tuples found in partition parameters."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def scheme_params(scheme: str, base: str | None = None) -> dict[str, Any]:
    """The parameters a scheme takes, with their defaults.

    A scheme that takes `**kwargs` (`rotation`) forwards them to the scheme named by its `base`
    parameter; those parameters are included (`base` defaults to the scheme's own default).
    """
    fn = SCHEMES.get(scheme)
    params: dict[str, Any] = {}
    forwards = False
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _CONTEXT_ARGS:
            params[name] = p.default
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            forwards = True
    if forwards:
        inner = params["base"] if base is None else base
        if inner != scheme:
            params.update({k: v for k, v in scheme_params(inner).items() if k not in params})
    return params


def _run_scheme(
    scheme: str,
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    num_classes: int,
    domains: np.ndarray | None,
    params: Mapping[str, Any],
) -> Partition:
    """Call a scheme after checking that it takes every given parameter."""
    fn = SCHEMES.get(scheme)
    valid = scheme_params(scheme, params.get("base"))
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise PartitionError(
            f"partition scheme '{scheme}' does not take {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(valid)) or 'no parameters'}"
        )
    return fn(labels, num_clients, rng, num_classes=num_classes, domains=domains, **params)


def _labels_array(labels: Any, num_classes: int) -> np.ndarray:
    """Labels as a 1-D int64 numpy array in [0, num_classes) (accepts CPU torch tensors)."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise PartitionError(f"labels must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        raise PartitionError(
            f"labels must lie in 0..{num_classes - 1} (num_classes={num_classes}), "
            f"found {arr.min()}..{arr.max()}"
        )
    return arr


def labels_checksum(labels: np.ndarray) -> str:
    """sha256 of the int64 label array: ties a saved partition to the training set it splits."""
    return hashlib.sha256(np.ascontiguousarray(labels, dtype=np.int64).tobytes()).hexdigest()


def make_partition(
    labels: np.ndarray,
    scheme: str,
    num_clients: int,
    seed: int,
    *,
    num_classes: int,
    domains: np.ndarray | None = None,
    **params: Any,
) -> Partition:
    """Split the training set with `scheme` (a name in `SCHEMES`) into `num_clients` clients.

    `labels` are the training labels (numpy or CPU torch), `domains` optional per-sample domain
    ids, `params` the scheme's parameters (see `scheme_params`). The same arguments and seed
    always give the same partition. Raises PartitionError for impossible settings, naming the
    parameters to change.
    """
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise PartitionError(f"num_clients must be a positive integer, got {num_clients!r}")
    labels = _labels_array(labels, num_classes)
    dom = None
    if domains is not None:
        dom = np.asarray(domains).astype(np.int64, copy=False).reshape(-1)
        if dom.size != labels.size:
            raise PartitionError(
                f"domains has {dom.size} entries but there are {labels.size} labels"
            )
    rng = np.random.default_rng(seed)
    part = _run_scheme(scheme, labels, int(num_clients), rng, num_classes, dom, params)
    part.validate(labels.size)
    resolved = scheme_params(scheme, params.get("base"))
    resolved.update(params)
    part.meta = {
        "scheme": scheme,
        "num_clients": int(num_clients),
        "seed": int(seed),
        "params": resolved,
        "num_classes": int(num_classes),
        "num_samples": int(labels.size),
        "labels_sha256": labels_checksum(labels),
        "version": PARTITION_VERSION,
    }
    return part


def count_matrix(labels: Any, partition: Partition, num_classes: int) -> np.ndarray:
    """Samples of each class per client: an int64 array of shape (clients, classes)."""
    labels = np.asarray(labels).astype(np.int64, copy=False)
    return np.stack(
        [np.bincount(labels[idx], minlength=num_classes) for idx in partition.client_indices]
    )
