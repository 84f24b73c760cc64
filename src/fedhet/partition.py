"""Split a training set across federated clients (label and domain heterogeneity).

`make_partition` turns the training labels into per-client index arrays with one of the
schemes in `SCHEMES`; `load_or_make_partition` does the same for a run and caches the result
as an `.npz` file, so every run (and every seed of a method comparison) trains on exactly the
same split. Everything here is numpy-only and deterministic given the seed: all randomness comes
from one `np.random.default_rng(seed)`.

Schemes (parameters and defaults in each function's docstring, or `scheme_params(name)`):

- `dirichlet`: per-class Dirichlet over clients (LDA), as the VHL, FedImpro and CCVR code.
- `dirichlet_client`: one Dirichlet over classes per client, equal client sizes (FedBR).
- `nclass`: every client holds exactly `classes_per_client` classes (NIID-Bench "#label K").
- `subset`: one dominant class per client plus a few samples of every other class (VHL Table 3).
- `iid`: shuffled equal split.
- `domain`: one domain (feature-shift source) per client.
- `rotation`: any base split plus a rotation angle per sample (FedBR's rotated data).

Every scheme assigns each training index to at most one client; all of them except `nclass`
(unowned classes), `subset` (fewer clients than classes) and `dirichlet_client` (the remainder
of N / num_clients) use all the data.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedhet.atomic import write_with
from fedhet.config import DEFAULTS
from fedhet.registry import Registry

# Bump when a change to a scheme changes the split it produces for the same settings and seed:
# cached partitions get a new key and are rebuilt.
PARTITION_VERSION = 1

# Rotation angles of FedBR's RotatedMNIST / RotatedCIFAR10 environments, in degrees.
DEFAULT_ANGLES: tuple[float, ...] = (0.0, 15.0, 30.0, 45.0, 60.0, 75.0, 90.0, 105.0, 120.0, 135.0)

# Settings keys of a run's `partition` section that are forwarded to a scheme when it takes them.
_SHARED_PARAM_KEYS = ("alpha", "classes_per_client", "min_size", "cap")
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
        """Read a file written by `save`."""
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
        return cls(client_indices=indices, client_angles=angles, meta=meta)


def _json_default(obj: Any) -> Any:
    """JSON encoding for numpy scalars/arrays and tuples found in partition parameters."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


# --------------------------------------------------------------------------- helpers


def _indices_by_class(labels: np.ndarray, num_classes: int) -> list[np.ndarray]:
    """Training indices of each class, in index order."""
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=num_classes)
    return np.split(order, np.cumsum(counts)[:-1])


def _pack(parts: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Concatenate each client's chunks into one sorted int64 index array."""
    return [
        np.sort(np.concatenate(chunks)).astype(np.int64) if chunks else np.empty(0, np.int64)
        for chunks in parts
    ]


def _split_counts(proportions: np.ndarray, n: int) -> np.ndarray:
    """Sizes of the pieces when `n` items are cut at the cumulative `proportions`, as the
    official LDA code does (`(cumsum(p) * n).astype(int)` as cut points)."""
    cuts = (np.cumsum(proportions) * n).astype(np.int64)[:-1]
    return np.diff(np.concatenate(([0], np.minimum(cuts, n), [n])))


def _require_positive(name: str, value: float, scheme: str) -> None:
    if not (isinstance(value, (int, float, np.number)) and value > 0):
        raise PartitionError(f"{scheme}: {name} must be a positive number, got {value!r}")


# --------------------------------------------------------------------------- schemes


@SCHEMES.register("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    alpha: float = 0.1,
    min_size: int | None = None,
    cap: bool = True,
    max_tries: int = 1000,
) -> Partition:
    """Latent Dirichlet allocation over clients, per class (VHL, FedImpro, CCVR).

    For each class, proportions p ~ Dir(alpha·1) over the clients are drawn; with `cap`, clients
    that already hold at least N / num_clients samples get p = 0 for this class and p is
    renormalised (the VHL/FedImpro code; CCVR's FL-bench code has no cap). The class's shuffled
    samples are cut at the cumulative proportions. The whole draw is repeated while some client
    has fewer than `min_size` samples (default: the number of classes, as the VHL/FedImpro
    code; FL-bench uses 10), at most `max_tries` times. If every uncapped client drew p = 0
    (floating-point underflow at tiny alpha), the class is split equally among them.
    Smaller alpha means more skew.
    """
    _require_positive("alpha", alpha, "dirichlet")
    n = len(labels)
    min_size = num_classes if min_size is None else int(min_size)
    if min_size * num_clients > n:
        raise PartitionError(
            f"dirichlet: min_size={min_size} for each of num_clients={num_clients} clients needs "
            f"{min_size * num_clients} samples but there are only {n}; lower min_size or "
            "num_clients"
        )
    by_class = _indices_by_class(labels, num_classes)
    limit = n / num_clients
    concentration = np.full(num_clients, float(alpha))
    for _ in range(max_tries):
        counts = np.zeros((num_clients, num_classes), dtype=np.int64)
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c, members in enumerate(by_class):
            if members.size == 0:
                continue
            allowed = sizes < limit if cap else np.ones(num_clients, dtype=bool)
            p = rng.dirichlet(concentration) * allowed
            total = p.sum()
            p = p / total if total > 0 else allowed / allowed.sum()
            counts[:, c] = _split_counts(p, members.size)
            sizes += counts[:, c]
        if sizes.min() >= min_size:
            break
    else:
        raise PartitionError(
            f"dirichlet: no draw in {max_tries} tries gave every client at least "
            f"min_size={min_size} samples (alpha={alpha}, num_clients={num_clients}, "
            f"{n} samples, {num_classes} classes); raise alpha, lower num_clients or lower "
            "min_size"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, members in enumerate(by_class):
        shuffled = rng.permutation(members)
        for k, chunk in enumerate(np.split(shuffled, np.cumsum(counts[:, c])[:-1])):
            parts[k].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("dirichlet_client")
def dirichlet_client(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    alpha: float = 0.1,
    prior: str = "uniform",
) -> Partition:
    """One class distribution per client, equal client sizes (FedBR).

    Clients are filled one after another. Client k draws q ~ Dir(alpha·w) over the classes and
    then receives exactly N // num_clients samples, each drawn without replacement from a class
    chosen according to q; when a class runs out, its mass is removed from q and q is
    renormalised over the classes that still have samples. This is FedBR's sample-by-sample
    loop, done in batches: the counts for the still-needed samples are drawn from a multinomial,
    clipped at what each class has left, and the shortfall is redrawn from the renormalised q —
    the same distribution, without a Python loop per sample. Which samples of a class a client
    gets is uniform (each class is shuffled once).

    `prior` chooses w: `uniform` (w = 1, the FedBR paper and its CIFAR-100 code) or `remaining`
    (w = the class fractions of the samples not yet assigned, FedBR's CIFAR-10 code, i.e. about
    alpha / num_classes per class). If every class still holding samples has q = 0 (underflow
    at tiny alpha), the client draws in proportion to the remaining class sizes. The
    N mod num_clients samples left over are not assigned (as in FedBR).
    """
    _require_positive("alpha", alpha, "dirichlet_client")
    if prior not in ("uniform", "remaining"):
        raise PartitionError(
            f"dirichlet_client: prior must be 'uniform' or 'remaining', got {prior!r}"
        )
    per_client = len(labels) // num_clients
    if per_client == 0:
        raise PartitionError(
            f"dirichlet_client: num_clients={num_clients} exceeds the {len(labels)} samples; "
            "lower num_clients"
        )
    by_class = [rng.permutation(m) for m in _indices_by_class(labels, num_classes)]
    remaining = np.array([m.size for m in by_class], dtype=np.int64)
    used = np.zeros(num_classes, dtype=np.int64)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k in range(num_clients):
        if prior == "uniform":
            weights = np.ones(num_classes)
        else:
            weights = remaining / remaining.sum()
        q = np.zeros(num_classes)
        drawable = weights > 0
        q[drawable] = rng.dirichlet(alpha * weights[drawable])
        take = np.zeros(num_classes, dtype=np.int64)
        need = per_client
        while need > 0:
            left = remaining - take
            w = q * (left > 0)
            total = w.sum()
            w = w / total if total > 0 else left / left.sum()
            got = np.minimum(rng.multinomial(need, w), left)
            take += got
            need -= int(got.sum())
        for c in np.flatnonzero(take):
            parts[k].append(by_class[c][used[c] : used[c] + take[c]])
        used += take
        remaining -= take
    return Partition(_pack(parts))


@SCHEMES.register("nclass")
def nclass(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    classes_per_client: int = 2,
) -> Partition:
    """Pathological label skew: each client holds exactly `classes_per_client` classes.

    As NIID-Bench's "noniid-#label K" (used by VHL/FedImpro): client i owns class i mod C plus
    K - 1 other distinct classes chosen at random, and each class's shuffled samples are split
    equally (up to one sample) among its owners. Unlike the original, which counts owners in a
    fixed list of 10, any number of classes works. Classes that no client owns (possible when
    num_clients * K < C or by chance) are dropped from training.
    """
    k_per = classes_per_client
    if not isinstance(k_per, (int, np.integer)) or not 1 <= k_per <= num_classes:
        raise PartitionError(
            f"nclass: classes_per_client must be an integer in 1..num_classes={num_classes}, "
            f"got {k_per!r}"
        )
    owners: list[list[int]] = [[] for _ in range(num_classes)]
    all_classes = np.arange(num_classes)
    for i in range(num_clients):
        first = i % num_classes
        others = rng.choice(np.delete(all_classes, first), size=k_per - 1, replace=False)
        for c in (first, *others.tolist()):
            owners[c].append(i)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, members in enumerate(_indices_by_class(labels, num_classes)):
        if not owners[c]:
            continue
        for i, chunk in zip(owners[c], np.array_split(rng.permutation(members), len(owners[c]))):
            parts[i].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("subset")
def subset(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    dominant_fraction: float = 0.99,
) -> Partition:
    """One dominant class per client (VHL Table 3's "subset" split).

    Client i's dominant class is i mod C. Of each class's n_c samples, round(dominant_fraction
    · n_c) go to the clients dominated by that class, split equally; the rest is split equally
    (up to one sample, the extra ones going to randomly chosen clients) among all other
    clients. On CIFAR-10 with 10 clients this is the paper's 4950 dominant samples plus 5 or 6
    of every other class; smaller data sets get proportionally fewer minor samples (possibly 0
    of some classes). With fewer clients than classes, a class that dominates no client gives
    only its minor share (the dominant share is dropped), so every client still has exactly one
    dominant class. A class dominating every client (a single client) goes to it whole.
    """
    if not 0.0 <= dominant_fraction <= 1.0:
        raise PartitionError(
            f"subset: dominant_fraction must be in [0, 1], got {dominant_fraction!r}"
        )
    clients = np.arange(num_clients)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, members in enumerate(_indices_by_class(labels, num_classes)):
        shuffled = rng.permutation(members)
        dominated = clients[clients % num_classes == c]
        others = rng.permutation(clients[clients % num_classes != c])
        n_dom = shuffled.size if others.size == 0 else int(round(dominant_fraction * shuffled.size))
        for i, chunk in zip(dominated, np.array_split(shuffled[:n_dom], max(dominated.size, 1))):
            parts[i].append(chunk)
        if others.size:
            for i, chunk in zip(others, np.array_split(shuffled[n_dom:], others.size)):
                parts[i].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("iid")
def iid(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
) -> Partition:
    """Shuffled split into equal parts (sizes differ by at most one)."""
    if num_clients > len(labels):
        raise PartitionError(
            f"iid: num_clients={num_clients} exceeds the {len(labels)} samples; lower num_clients"
        )
    chunks = np.array_split(rng.permutation(len(labels)), num_clients)
    return Partition(_pack([[chunk] for chunk in chunks]))


@SCHEMES.register("domain")
def domain(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    within_alpha: float | None = None,
) -> Partition:
    """One domain per client (feature shift, e.g. FedLGD's digit data sets).

    With D distinct domain ids (sorted), client k gets domain k mod D. If num_clients = D each
    client holds one whole domain. If num_clients = m·D, each domain is shared by m clients:
    split IID (equal parts) by default, or, with `within_alpha`, by a per-class Dirichlet
    (alpha = within_alpha) over those m clients, adding label skew inside each domain.
    """
    if domains is None:
        raise PartitionError(
            "domain: this scheme needs per-sample domain ids, and the data set has none; "
            "choose another partition scheme"
        )
    ids = np.unique(domains)
    if num_clients % ids.size:
        raise PartitionError(
            f"domain: num_clients={num_clients} must equal the number of domains ({ids.size}) "
            "or be a multiple of it"
        )
    if within_alpha is not None:
        _require_positive("within_alpha", within_alpha, "domain")
    share = num_clients // ids.size
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for d, dom in enumerate(ids):
        holders = range(d, num_clients, ids.size)
        members = np.flatnonzero(domains == dom)
        if within_alpha is None:
            chunks = np.array_split(rng.permutation(members), share)
            for i, chunk in zip(holders, chunks):
                parts[i].append(chunk)
            continue
        dom_labels = labels[members]
        for c in np.unique(dom_labels):
            in_class = rng.permutation(members[dom_labels == c])
            p = rng.dirichlet(np.full(share, float(within_alpha)))
            counts = _split_counts(p, in_class.size)
            for i, chunk in zip(holders, np.split(in_class, np.cumsum(counts)[:-1])):
                parts[i].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("rotation")
def rotation(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    base: str = "dirichlet",
    rotation_mode: str = "fixed",
    angles: Sequence[float] = DEFAULT_ANGLES,
    rotation_alpha: float = 1.0,
    **base_params: Any,
) -> Partition:
    """A `base` split plus a rotation angle (degrees) for every sample (FedBR's rotated data).

    Extra parameters go to the base scheme. `rotation_mode`:

    - `fixed`: every sample of client i is rotated by `angles[i mod len(angles)]`
      (RotatedMNIST-style environments).
    - `mixture`: client i draws q ~ Dir(rotation_alpha·1) over `angles`, and each of its samples
      gets an angle drawn from q (FedBR's RotatedCIFAR10; the paper states rotation_alpha 1.0,
      the code's Dir(1.0 · uniform(1/10)) is rotation_alpha 0.1).

    The angles are stored in the partition; the data pipeline rotates the images.
    """
    if base == "rotation":
        raise PartitionError("rotation: base must be another scheme, not 'rotation'")
    angle_values = np.asarray(angles, dtype=np.float32).reshape(-1)
    if angle_values.size == 0:
        raise PartitionError("rotation: angles must not be empty")
    part = _run_scheme(base, labels, num_clients, rng, num_classes, domains, base_params)
    if rotation_mode == "fixed":
        client_angles = [
            np.full(idx.size, angle_values[i % angle_values.size], dtype=np.float32)
            for i, idx in enumerate(part.client_indices)
        ]
    elif rotation_mode == "mixture":
        _require_positive("rotation_alpha", rotation_alpha, "rotation")
        client_angles = []
        for idx in part.client_indices:
            q = rng.dirichlet(np.full(angle_values.size, float(rotation_alpha)))
            client_angles.append(rng.choice(angle_values, size=idx.size, p=q / q.sum()))
    else:
        raise PartitionError(
            f"rotation: rotation_mode must be 'fixed' or 'mixture', got {rotation_mode!r}"
        )
    return Partition(part.client_indices, client_angles)


# --------------------------------------------------------------------------- public API


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
    part = make_partition(
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
