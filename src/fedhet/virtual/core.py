"""Virtual datasets as uint8 tensors, generated deterministically and cached like datasets.

```python
x, y = make_virtual_dataset("stylegan", num_classes=10, images_per_class=200, size=32,
                            channels=3, seed=0)
vd = load_or_make_virtual({"kind": "noise", "num_classes": 10, "images_per_class": 200,
                           "size": 32, "channels": 3, "seed": 0}, root="resources/datasets")
```

A virtual dataset is built once into `<root>/virtual/<key>.pt` (a `torch.save`d dict of
`x` uint8 `[N, C, H, W]`, `y` int64 and the resolved settings) next to `<key>.pt.sha256`,
both written atomically; loading checks the checksum. The key hashes the resolved settings
(generator defaults included), `VERSION` and the cache format, so changing any of them names
a new file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedhet.data.core import CacheError, checksum_path, verify_checksum, write_checksummed
from fedhet.declare import BuildPlaces
from fedhet.virtual.generators import GENERATORS
from fedhet.virtual.spec import (
    CACHE_FORMAT,
    resolve_options,
    resolve_settings,
    virtual_path,
)


@dataclass
class VirtualData:
    """A virtual dataset in memory: uint8 images, int64 labels 0..num_classes-1, metadata."""

    x: Tensor
    y: Tensor
    num_classes: int
    settings: dict[str, Any]
    checksum: str
    path: Path | None = None


def to_uint8(x: Tensor) -> Tensor:
    """[-1, 1] floats → uint8 as `save_image(normalize=True, value_range=(-1, 1))`: clamp,
    map to [0, 255], round half up."""
    x = (x.clamp(-1.0, 1.0) + 1.0) * 127.5
    return (x + 0.5).clamp_(0, 255).to(torch.uint8)


def make_virtual_dataset(kind: str, num_classes: int, images_per_class: int, size: int,
                         channels: int, seed: int, **options: Any) -> tuple[Tensor, Tensor]:
    """Generate a virtual dataset: uint8 images `[N, C, H, W]` and int64 labels, class-major
    (all images of class 0, then class 1, ...). Deterministic given the arguments."""
    for name, value in (("num_classes", num_classes), ("images_per_class", images_per_class),
                        ("size", size), ("channels", channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"virtual data: {name} must be a positive integer, got {value!r}")
    resolved = resolve_options(kind, num_classes, options)
    generate = GENERATORS[kind]
    if kind != "tinyimagenet10":
        resolved.pop("dataset_root", None)
    else:
        resolved.setdefault("dataset_root", "resources/datasets")
    x, y = generate(num_classes, images_per_class, size, channels, int(seed), **resolved)
    return to_uint8(x).contiguous(), y.long().contiguous()


def load_or_make_virtual(settings: Mapping[str, Any],
                         root: str | os.PathLike = "resources/datasets") -> VirtualData:
    """Load the cached virtual dataset of `settings` from `<root>/virtual/`, generating and
    caching it first if needed. Real-image kinds read their source dataset from `root`.
    Raises CacheError when the file does not match its recorded checksum."""
    resolved = resolve_settings(settings)
    path = virtual_path(resolved, root)
    if not (path.exists() and checksum_path(path).exists()):
        options = dict(resolved["options"])
        if resolved["kind"] == "tinyimagenet10":
            options["dataset_root"] = str(root)
        x, y = make_virtual_dataset(resolved["kind"], resolved["num_classes"],
                                    resolved["images_per_class"], resolved["size"],
                                    resolved["channels"], resolved["seed"], **options)
        write_checksummed(path, {"format": CACHE_FORMAT, "settings": resolved, "x": x, "y": y})
    actual = verify_checksum(path, "virtual dataset",
                             f"delete it and {checksum_path(path).name} to regenerate")
    payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    if payload.get("format") != CACHE_FORMAT or payload.get("settings") != resolved:
        raise CacheError(f"{path} does not hold the virtual dataset asked for; delete it to "
                         "regenerate")
    return VirtualData(payload["x"], payload["y"], resolved["num_classes"], resolved,
                       actual, path)


def build_virtual(settings: Mapping[str, Any], places: BuildPlaces) -> tuple[Path, str]:
    """`fedhet virtual-data`: the cached virtual dataset of `settings` (built if needed) and
    what it holds."""
    data = load_or_make_virtual(settings, places.root)
    return data.path, (f"{tuple(data.x.shape)} images, {data.num_classes} classes, sha256 "
                       f"{data.checksum}")
