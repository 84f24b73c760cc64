"""CINIC-10 and Tiny-ImageNet, read straight from their published archives.

The archive is fetched (option `download: true`, see `fedhet.data.downloads`) or placed by
hand in `<root>/raw/<name>/`, verified, and parsed without unpacking it to disk:

- CINIC-10 (`CINIC-10.tar.gz`): ImageFolder layout `{train,valid,test}/<class>/*.png`,
  32×32; classes in sorted folder order (the CIFAR-10 order). `include_valid: true` adds
  the `valid` split to training.
- Tiny-ImageNet (`tiny-imagenet-200.zip`): `train/<wnid>/images/*.JPEG` and
  `val/images/*` labelled by `val/val_annotations.txt`, 64×64; the labelled `val` split is
  the test set (the `test` split has no labels); classes are the sorted wnids.

Grayscale images in either archive are converted to RGB.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from fedhet.data.core import DATASETS, Arrays, DatasetNotAvailable, DatasetSpec, fixed_sizes
from fedhet.data.downloads import DOWNLOADS, check_file, fetch, source_url

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def decode_image(data: bytes, size: int | None = None) -> np.ndarray:
    """Encoded image bytes → uint8 `[3, H, W]`, resized (bilinear) to `size` if given."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB")
    if size is not None and rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)


def stack_split(
    items: Iterable[tuple[str, str, np.ndarray]], classes: list[str], size: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """(sort key, class name, image) triples → images `[N, 3, size, size]` and labels.

    Sorted by key so the result does not depend on archive order; raises ValueError for
    an image of another size or a class not in `classes`.
    """
    index = {c: i for i, c in enumerate(classes)}
    ordered = sorted(items, key=lambda t: t[0])
    x = np.empty((len(ordered), 3, size, size), dtype=np.uint8)
    y = np.empty(len(ordered), dtype=np.int64)
    for i, (key, cls, img) in enumerate(ordered):
        if img.shape != (3, size, size):
            raise ValueError(
                f"{what}: {key} is {img.shape[2]}×{img.shape[1]}, expected {size}×{size}"
            )
        if cls not in index:
            raise ValueError(f"{what}: {key} has class '{cls}', not among the training classes")
        x[i], y[i] = img, index[cls]
    return x, y


def locate_archive(name: str, root: Path, download: bool) -> Path:
    """The verified archive of `name` under `<root>/raw/<name>/`, fetched if allowed."""
    folder = Path(root) / "raw" / name
    if download:
        return fetch(name, folder)
    path = folder / DOWNLOADS[name].filename
    if not path.is_file():
        raise DatasetNotAvailable(
            f"dataset '{name}' is not on disk (missing {path}). Download it with "
            f"`fedhet prepare-data --dataset {name} --root {root} --download` (fetches "
            f"{source_url(DOWNLOADS[name])} into {folder}), or save that file there by hand."
        )
    check_file(name, path)
    return path


def read_cinic(
    path: Path, splits: tuple[str, ...] = ("train", "valid", "test")
) -> dict[str, list[tuple[str, str, np.ndarray]]]:
    """Every PNG of a CINIC-10 tar archive, as (member name, class, image) per split.

    Members are matched by their last three path parts (`<split>/<class>/<file>.png`), so
    the archive may or may not wrap them in a top-level folder.
    """
    out: dict[str, list[tuple[str, str, np.ndarray]]] = {s: [] for s in splits}
    with tarfile.open(path, mode="r|*") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or len(parts) < 3 or parts[-3] not in out:
                continue
            if not parts[-1].lower().endswith(".png"):
                continue
            data = tar.extractfile(member).read()
            out[parts[-3]].append((member.name, parts[-2], decode_image(data)))
    return out


def _build_cinic(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    path = locate_archive("cinic10", root, options["download"])
    splits = read_cinic(path)
    train = splits["train"] + (splits["valid"] if options["include_valid"] else [])
    classes = sorted({cls for _, cls, _ in train})
    if len(classes) != 10:
        raise ValueError(f"{path}: expected 10 class folders in train/, found {classes}")
    x_train, y_train = stack_split(train, classes, 32, str(path))
    x_test, y_test = stack_split(splits["test"], classes, 32, str(path))
    return Arrays(
        torch.from_numpy(x_train),
        torch.from_numpy(y_train),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
        class_names=tuple(classes),
    )


def read_tinyimagenet(
    path: Path,
) -> tuple[list[str], list[tuple[str, str, np.ndarray]], list[tuple[str, str, np.ndarray]]]:
    """Sorted wnids, and (name, wnid, image) triples of the train and val splits."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        wnids_file = next((n for n in names if PurePosixPath(n).name == "wnids.txt"), None)
        if wnids_file is None:
            raise ValueError(f"{path}: no wnids.txt, not a Tiny-ImageNet archive")
        prefix = PurePosixPath(wnids_file).parent
        wnids = sorted(zf.read(wnids_file).decode().split())
        train = []
        for n in names:
            parts = _relative_parts(n, prefix)
            if (
                len(parts) == 4
                and parts[0] == "train"
                and parts[2] == "images"
                and parts[3].lower().endswith(IMAGE_SUFFIXES)
            ):
                train.append((n, parts[1], decode_image(zf.read(n))))
        val = []
        annotations = zf.read(str(prefix / "val" / "val_annotations.txt")).decode().splitlines()
        for line in filter(None, (a.strip() for a in annotations)):
            filename, wnid = line.split("\t")[:2]
            member = str(prefix / "val" / "images" / filename)
            val.append((member, wnid, decode_image(zf.read(member))))
    return wnids, train, val


def _relative_parts(name: str, prefix: PurePosixPath) -> tuple[str, ...]:
    """Path parts of archive member `name` below `prefix`; () when it is not below it."""
    parts, head = PurePosixPath(name).parts, prefix.parts
    return parts[len(head) :] if parts[: len(head)] == head else ()


def _build_tinyimagenet(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    path = locate_archive("tinyimagenet", root, options["download"])
    wnids, train, val = read_tinyimagenet(path)
    if len(wnids) != 200:
        raise ValueError(f"{path}: expected 200 wnids in wnids.txt, found {len(wnids)}")
    x_train, y_train = stack_split(train, wnids, 64, str(path))
    x_test, y_test = stack_split(val, wnids, 64, str(path))
    return Arrays(
        torch.from_numpy(x_train),
        torch.from_numpy(y_train),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
        class_names=tuple(wnids),
    )


DATASETS.add(
    "cinic10",
    DatasetSpec(
        name="cinic10",
        build=_build_cinic,
        num_classes=10,
        channels=3,
        size=32,
        source="download",
        description="CINIC-10: 90,000 train (+90,000 valid) / 90,000 test images, CIFAR-10 classes",
        options={"channels": 3, "size": 32, "download": False, "include_valid": False},
        choices={"channels": (1, 3)},
        # 9,000 per class in each of train, valid and test
        sizes=lambda o: (90_000 * (2 if o["include_valid"] else 1), 90_000),
    ),
)
DATASETS.add(
    "tinyimagenet",
    DatasetSpec(
        name="tinyimagenet",
        build=_build_tinyimagenet,
        num_classes=200,
        channels=3,
        size=64,
        source="download",
        description="Tiny-ImageNet-200: 100,000 train / 10,000 val (used as test) images, 64x64",
        options={"channels": 3, "size": 64, "download": False},
        choices={"channels": (1, 3)},
        sizes=fixed_sizes(100_000, 10_000),  # 500 train and 50 val images per class
    ),
)
