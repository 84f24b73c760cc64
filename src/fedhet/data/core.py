"""Dataset specs, option checking, and the checksummed tensor cache.

Every dataset (a name plus its options) is built once into `<root>/<key>.pt`, a
`torch.save`d dict of tensors and metadata, next to `<root>/<key>.pt.sha256` holding the
file's sha256 (in `sha256sum` format). Both are written atomically (temporary file in the
same folder, then `os.replace`), so concurrent workflow jobs preparing the same dataset
never see half a file. Loading checks the checksum and memory-maps the tensors.

This module imports torch only inside the functions that need it, so that
`dataset_key`, `describe` and `DATASETS` stay cheap for the workflow's DAG.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedhet import atomic
from fedhet.registry import Registry

if TYPE_CHECKING:
    import torch

# Bump when the layout of the cache file changes: every key changes with it.
CACHE_FORMAT = 1
# Options that do not change the tensors: left out of the cache key.
NON_CONTENT_OPTIONS = ("download", "stands_in_for")
DEFAULT_ROOT = "resources/datasets"


class DatasetNotAvailable(RuntimeError):
    """The dataset's files are not on disk; the message says how to get them."""


class CacheError(RuntimeError):
    """A cached tensor file is damaged or does not match its recorded checksum."""


@dataclass
class Arrays:
    """What a dataset builder returns: images as uint8 `[N, C, H, W]`, labels as int64.

    `mean`/`std` are fixed normalisation statistics (as the papers use them); `None` means
    they are computed from the training images when the cache file is written.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    class_names: tuple[str, ...]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    domain_train: torch.Tensor | None = None
    domain_test: torch.Tensor | None = None
    domain_names: tuple[str, ...] | None = None


Builder = Callable[[Path, dict[str, Any]], Arrays]
# (train, test) images of a dataset for its resolved options, known without its files
Sizes = Callable[[Mapping[str, Any]], tuple[int, int]]


@dataclass(frozen=True)
class DatasetSpec:
    """How to build one dataset.

    `options` maps every valid option to its default; `choices` restricts some of them to a
    set of values. `build(root, options)` receives the resolved options and returns the
    images at their native channel count and size unless it handles `channels`/`size`
    itself; the cache step converts whatever differs from the requested shape.
    `version` enters the cache key: bump it when the builder's output changes.
    `keyless` maps options added after the dataset's cache files existed to the value at
    which they leave the tensors as before (their default): at that value they stay out of
    the cache key, so existing files keep their names. An option `num_classes`, where a
    dataset has one, overrides `num_classes` (keeping the first classes).
    """

    name: str
    build: Builder
    num_classes: int
    channels: int
    size: int
    description: str
    source: str  # torchvision | download | stand-in | manual
    options: Mapping[str, Any] = field(default_factory=dict)
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    version: int = 1
    keyless: Mapping[str, Any] = field(default_factory=dict)
    sizes: Sizes | None = None


DATASETS: Registry[DatasetSpec] = Registry("dataset")


@dataclass
class FedData:
    """A dataset in memory: uint8 images `[N, C, H, W]`, int64 labels, and metadata.

    `mean`/`std` are per-channel statistics in [0, 1] pixel units for normalisation,
    `checksum` is the sha256 of the cache file the tensors came from, `stands_in_for`
    names the paper dataset an offline stand-in replaces (`None` for real data), and
    `domain_train`/`domain_test` give a per-sample domain id for multi-domain datasets.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    checksum: str
    stands_in_for: str | None = None
    domain_train: torch.Tensor | None = None
    domain_test: torch.Tensor | None = None
    domain_names: tuple[str, ...] | None = None
    class_names: tuple[str, ...] | None = None

    @property
    def in_channels(self) -> int:
        """Number of image channels (what a model's first layer takes)."""
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        """Height (= width) of the images in pixels."""
        return int(self.x_train.shape[2])


def resolve_options(name: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec's defaults updated with `options`, after checking every key and value.

    Raises ValueError naming an unknown key (and the valid ones) or a bad value.
    """
    spec = DATASETS.get(name)
    resolved = dict(spec.options)
    for key, value in (options or {}).items():
        if key not in spec.options:
            valid = ", ".join(sorted(spec.options)) or "(none)"
            raise ValueError(f"unknown option '{key}' for dataset '{name}'; valid options: {valid}")
        _check_value(name, key, value, spec.options[key], spec.choices.get(key))
        resolved[key] = value
    return resolved


def _check_value(name: str, key: str, value: Any, default: Any, choices: tuple | None) -> None:
    where = f"option '{key}' of dataset '{name}'"
    if choices is not None and value not in choices:
        raise ValueError(f"{where} must be one of {list(choices)}, got {value!r}")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
    elif isinstance(default, int):
        # seeds may be 0; counts and sizes must be positive
        minimum, kind = (0, "non-negative") if key.endswith("seed") else (1, "positive")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{where} must be a {kind} integer, got {value!r}")
    elif isinstance(default, str) and not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}")


def content_options(name: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The resolved options that change the tensors (those that enter the cache key)."""
    return _keyed(DATASETS.get(name), resolve_options(name, options))


def _keyed(spec: DatasetSpec, resolved: Mapping[str, Any]) -> dict[str, Any]:
    """`resolved` without metadata options, and without options added later at the value
    that leaves the tensors unchanged (null, e.g. digits_domains' `domains`, or the value in
    `spec.keyless`), so that adding an option does not rename existing cache files."""
    return {
        k: v
        for k, v in resolved.items()
        if k not in NON_CONTENT_OPTIONS
        and v is not None
        and not (k in spec.keyless and v == spec.keyless[k])
    }


def class_count(spec: DatasetSpec, resolved: Mapping[str, Any]) -> int:
    """Number of classes of a dataset with these resolved options (option `num_classes`
    where the dataset has one, else the spec's)."""
    return int(resolved.get("num_classes", spec.num_classes))


def split_sizes(name: str, options: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """(train, test) images of a dataset with these options, as its spec declares them: no
    file is read. Raises ValueError for a dataset that declares none."""
    spec = DATASETS.get(name)
    if spec.sizes is None:
        raise ValueError(f"dataset '{name}' declares no sizes (DatasetSpec.sizes); declare "
                         f"them where it is registered")
    train, test = spec.sizes(resolve_options(name, options))
    return int(train), int(test)


def fixed_sizes(train: int, test: int) -> Sizes:
    """`DatasetSpec.sizes` of a dataset whose options do not change its image counts."""
    return lambda options: (train, test)


def dataset_key(name: str, options: Mapping[str, Any] | None = None) -> str:
    """Filename-safe cache key `<name>-<12 hex>` of the dataset and its content options.

    The hash covers the resolved options (defaults included), the builder version and the
    cache format, so changing any of them names a new file instead of reusing a stale one.
    """
    spec = DATASETS.get(name)
    ident = {
        "name": name,
        "options": content_options(name, options),
        "version": spec.version,
        "format": CACHE_FORMAT,
    }
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str)
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def cache_path(
    name: str, root: str | os.PathLike = DEFAULT_ROOT, options: Mapping | None = None
) -> Path:
    """Where the cache file of this dataset and options lives (it may not exist yet)."""
    return Path(root) / f"{dataset_key(name, options)}.pt"


def describe(name: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Classes, image shape and options of a dataset, without building it (for the CLI)."""
    spec = DATASETS.get(name)
    resolved = resolve_options(name, options)
    shape = (resolved.get("channels", spec.channels), resolved.get("size", spec.size))
    return {
        "name": name,
        "description": spec.description,
        "source": spec.source,
        "num_classes": class_count(spec, resolved),
        "shape": (shape[0], shape[1], shape[1]),
        "options": resolved,
        "stands_in_for": resolved.get("stands_in_for"),
        "key": dataset_key(name, resolved),
    }


def prepare_dataset(
    name: str, root: str | os.PathLike = DEFAULT_ROOT, options: Mapping[str, Any] | None = None
) -> Path:
    """Build the dataset's cache file unless it exists; return its path.

    Raw files are read from (or, with option `download: true`, fetched into)
    `<root>/raw/`. Raises DatasetNotAvailable when they are missing.
    """
    spec = DATASETS.get(name)
    resolved = resolve_options(name, options)
    path = cache_path(name, root, resolved)
    if path.exists() and checksum_path(path).exists():
        return path
    arrays = spec.build(Path(root), resolved)
    write_checksummed(path, _payload(spec, resolved, arrays))
    return path


def load_dataset(
    name: str, root: str | os.PathLike = DEFAULT_ROOT, options: Mapping[str, Any] | None = None
) -> FedData:
    """Load a dataset from its cache file, building the file first if needed.

    The file's sha256 is checked against the recorded one; a mismatch raises CacheError.
    """
    import torch

    resolved = resolve_options(name, options)
    path = prepare_dataset(name, root, resolved)
    checksum = verify_cache_file(path, name, resolved)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # a damaged zip or pickle: say which file and what to do
        raise CacheError(
            f"cannot read cached dataset {path}: {err}; {_rebuild_hint(path, name, options)}"
        ) from err
    if payload.get("format") != CACHE_FORMAT or payload.get("name") != name:
        raise CacheError(
            f"{path} does not hold dataset '{name}' in cache format {CACHE_FORMAT}; "
            f"{_rebuild_hint(path, name, options)}"
        )
    return FedData(
        name=name,
        x_train=payload["x_train"],
        y_train=payload["y_train"],
        x_test=payload["x_test"],
        y_test=payload["y_test"],
        num_classes=payload["num_classes"],
        mean=tuple(payload["mean"]),
        std=tuple(payload["std"]),
        checksum=checksum,
        stands_in_for=resolved.get("stands_in_for"),
        domain_train=payload["domain_train"],
        domain_test=payload["domain_test"],
        domain_names=_as_tuple(payload["domain_names"]),
        class_names=_as_tuple(payload["class_names"]),
    )


def verify_cache_file(path: Path, name: str, options: Mapping[str, Any]) -> str:
    """sha256 of a dataset's cache file, after checking it equals the one recorded beside it."""
    return verify_checksum(path, "cached dataset", _rebuild_hint(path, name, options))


def write_checksummed(path: Path, payload: dict[str, Any]) -> None:
    """`torch.save` `payload` to `path` and its sha256 to `checksum_path(path)` (`sha256sum`
    format), both atomically: the cache files of datasets and of cached artefacts."""
    blob = _serialise(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, blob)
    write_atomic(checksum_path(path),
                 f"{hashlib.sha256(blob).hexdigest()}  {path.name}\n".encode())


def verify_checksum(path: Path, what: str, hint: str) -> str:
    """sha256 of the cache file `path`, after checking it equals the one recorded beside it;
    otherwise CacheError naming `what` the file holds and ending with `hint` (what to do)."""
    recorded_file = checksum_path(path)
    try:
        recorded = recorded_file.read_text().split()[0]
    except (OSError, IndexError) as err:
        raise CacheError(f"no checksum recorded for {path} ({recorded_file}); {hint}") from err
    actual = file_sha256(path)
    if actual != recorded:
        raise CacheError(
            f"{what} {path} is corrupt: its sha256 is {actual} but {recorded} was "
            f"recorded when it was written; {hint}"
        )
    return actual


def _rebuild_hint(path: Path, name: str, options: Mapping[str, Any] | None = None) -> str:
    """The commands that rebuild this cache file where it was (root and options included)."""
    command = f"fedhet prepare-data --dataset {name} --root {path.parent}"
    kept = {k: v for k, v in (options or {}).items() if k != "download"}
    if kept:
        command += f" --options '{json.dumps(kept, sort_keys=True)}'"
    return f"delete {path} and {checksum_path(path).name}, then rebuild it with `{command}`"


def checksum_path(path: Path) -> Path:
    """Where the sha256 of the cache file `path` is recorded."""
    return path.with_name(path.name + ".sha256")


def _as_tuple(value: Any) -> tuple | None:
    return None if value is None else tuple(value)


def _payload(spec: DatasetSpec, options: dict[str, Any], arrays: Arrays) -> dict[str, Any]:
    """The cache file's dict: tensors in the requested shape plus metadata."""
    from fedhet.data.imageops import channel_stats, conform

    channels = options.get("channels", spec.channels)
    size = options.get("size", spec.size)
    source_channels = int(arrays.x_train.shape[1])
    x_train = conform(arrays.x_train, channels, size)
    x_test = conform(arrays.x_test, channels, size)
    if arrays.mean is not None and arrays.std is not None and channels == source_channels:
        mean, std = arrays.mean, arrays.std
    else:
        mean, std = channel_stats(x_train)
    num_classes = class_count(spec, options)
    _check_arrays(spec.name, num_classes, x_train, arrays.y_train, x_test, arrays.y_test)
    return {
        "format": CACHE_FORMAT,
        "name": spec.name,
        "options": _keyed(spec, options),
        "num_classes": num_classes,
        "class_names": list(arrays.class_names),
        "mean": [float(m) for m in mean],
        "std": [float(s) for s in std],
        "x_train": x_train.contiguous(),
        "y_train": arrays.y_train.long().contiguous(),
        "x_test": x_test.contiguous(),
        "y_test": arrays.y_test.long().contiguous(),
        "domain_train": _optional_long(arrays.domain_train),
        "domain_test": _optional_long(arrays.domain_test),
        "domain_names": None if arrays.domain_names is None else list(arrays.domain_names),
    }


def _optional_long(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.long().contiguous()


def _check_arrays(name: str, num_classes: int, x_train, y_train, x_test, y_test) -> None:
    """Catch a builder bug before it is cached: dtypes, lengths, label range."""
    import torch

    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.dtype != torch.uint8 or x.dim() != 4 or len(x) != len(y):
            raise ValueError(
                f"dataset '{name}' {split}: expected uint8 [N, C, H, W] images and N "
                f"labels, got {x.dtype} {tuple(x.shape)} and {len(y)} labels"
            )
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(f"dataset '{name}' {split}: labels outside 0..{num_classes - 1}")


def _serialise(payload: dict[str, Any]) -> bytes:
    """torch.save into memory: the bytes depend only on the payload, not the file name."""
    import torch

    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and os.replace."""
    atomic.write_with(path, lambda fh: fh.write(data))


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
