"""Paper datasets read through torchvision: CIFAR-10/100, (Fashion-)MNIST, SVHN, USPS.

Raw files live under `<root>/raw/` in torchvision's own layout. Without option
`download: true` nothing is fetched: if the files are missing, DatasetNotAvailable says
which files are expected where and how to get them. Fashion-MNIST is seeded from Debian's
`dataset-fashion-mnist` package when that is installed (see `fedhet.data.fmnist`).

Options: `channels` (1 or 3; grayscale is replicated, colour reduced to luma), `size`
(bilinear resize at prepare time, e.g. 28 → 32), `download`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.core import DATASETS, Arrays, DatasetNotAvailable, DatasetSpec, fixed_sizes
from fedhet.data.fmnist import DEBIAN_FMNIST_DIR, fmnist_seeded, seed_fmnist_from

# Normalisation statistics as the papers' code uses them; other datasets get theirs
# computed from the training images.
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))

_IDX = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@dataclass(frozen=True)
class TorchvisionSource:
    """One torchvision dataset: its class, sub-folder of `<root>/raw`, and expected files."""

    cls_name: str
    folder: str  # the torchvision `root` below `<root>/raw` ("" = `<root>/raw` itself)
    files: tuple[str, ...]  # relative to `<root>/raw`
    split_by_name: bool = False  # SVHN takes split="train"/"test" instead of train=True/False
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None


SOURCES = {
    "cifar10": TorchvisionSource(
        "CIFAR10",
        "",
        tuple(
            f"cifar-10-batches-py/{f}"
            for f in (
                "data_batch_1",
                "data_batch_2",
                "data_batch_3",
                "data_batch_4",
                "data_batch_5",
                "test_batch",
                "batches.meta",
            )
        ),
        stats=CIFAR10_STATS,
    ),
    "cifar100": TorchvisionSource(
        "CIFAR100",
        "",
        tuple(f"cifar-100-python/{f}" for f in ("train", "test", "meta")),
        stats=CIFAR100_STATS,
    ),
    "mnist": TorchvisionSource("MNIST", "", tuple(f"MNIST/raw/{f}" for f in _IDX)),
    "fmnist": TorchvisionSource("FashionMNIST", "", tuple(f"FashionMNIST/raw/{f}" for f in _IDX)),
    "svhn": TorchvisionSource(
        "SVHN", "SVHN", ("SVHN/train_32x32.mat", "SVHN/test_32x32.mat"), split_by_name=True
    ),
    "usps": TorchvisionSource("USPS", "USPS", ("USPS/usps.bz2", "USPS/usps.t.bz2")),
}


def raw_root(root: Path) -> Path:
    """The folder that holds every dataset's raw files."""
    return Path(root) / "raw"


def missing_files(name: str, root: Path) -> list[Path]:
    """The expected raw files of a torchvision dataset that are not on disk."""
    base = raw_root(root)
    return [base / f for f in SOURCES[name].files if not (base / f).is_file()]


def not_available_message(name: str, root: Path, missing: list[Path]) -> str:
    """How to get a missing dataset: the download command and where the files go."""
    shown = ", ".join(str(p) for p in missing[:3]) + (" ..." if len(missing) > 3 else "")
    return (
        f"dataset '{name}' is not on disk (missing {shown}). Download it with "
        f"`fedhet prepare-data --dataset {name} --root {root} --download` (needs internet; "
        f"torchvision puts the files in {raw_root(root) / SOURCES[name].folder}), "
        f"or copy the files there by hand."
    )


def torchvision_split(
    name: str, root: Path, train: bool, download: bool
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Images `[N, C, H, W]` uint8, labels int64 and class names of one split."""
    import torchvision.datasets as tvd

    source = SOURCES[name]
    folder = raw_root(root) / source.folder
    folder.mkdir(parents=True, exist_ok=True)
    cls = getattr(tvd, source.cls_name)
    split = {"split": "train" if train else "test"} if source.split_by_name else {"train": train}
    try:
        ds = cls(str(folder), download=download, **split)
    except (RuntimeError, OSError) as err:
        raise DatasetNotAvailable(
            f"could not {'download' if download else 'read'} dataset '{name}' "
            f"into {folder}: {err}. " + not_available_message(name, root, missing_files(name, root))
        ) from err
    x = np.asarray(ds.data)
    if x.ndim == 3:
        x = x[:, None]
    elif x.shape[-1] == 3:
        x = x.transpose(0, 3, 1, 2)
    labels = getattr(ds, "targets", None)
    if labels is None:
        labels = ds.labels
    classes = tuple(getattr(ds, "classes", None) or [str(c) for c in range(10)])
    return np.ascontiguousarray(x, dtype=np.uint8), np.asarray(labels, dtype=np.int64), classes


def _make_builder(name: str):
    """The builder of torchvision dataset `name`."""

    def build(root: Path, options: dict[str, Any]) -> Arrays:
        import torch

        download = options["download"]
        if (
            name == "fmnist"
            and not download
            and not fmnist_seeded(root)
            and DEBIAN_FMNIST_DIR.is_dir()
        ):
            seed_fmnist_from(DEBIAN_FMNIST_DIR, root)
        missing = missing_files(name, root)
        if missing and not download:
            raise DatasetNotAvailable(not_available_message(name, root, missing))
        x_train, y_train, classes = torchvision_split(name, root, True, download)
        x_test, y_test, _ = torchvision_split(name, root, False, download)
        stats = SOURCES[name].stats
        return Arrays(
            torch.from_numpy(x_train),
            torch.from_numpy(y_train),
            torch.from_numpy(x_test),
            torch.from_numpy(y_test),
            class_names=classes,
            mean=stats[0] if stats else None,
            std=stats[1] if stats else None,
        )

    return build


def _register(name: str, num_classes: int, channels: int, size: int, description: str,
              sizes: tuple[int, int]) -> None:
    DATASETS.add(
        name,
        DatasetSpec(
            name=name,
            build=_make_builder(name),
            num_classes=num_classes,
            channels=channels,
            size=size,
            description=description,
            source="torchvision",
            options={"channels": channels, "size": size, "download": False},
            choices={"channels": (1, 3)},
            sizes=fixed_sizes(*sizes),
        ),
    )


# sizes: (train, test) images of the official splits
_register("cifar10", 10, 3, 32, "CIFAR-10: 50,000/10,000 colour images, 10 classes",
          (50_000, 10_000))
_register("cifar100", 100, 3, 32, "CIFAR-100: 50,000/10,000 colour images, 100 classes",
          (50_000, 10_000))
_register("mnist", 10, 1, 28, "MNIST: 60,000/10,000 handwritten digits",
          (60_000, 10_000))
_register("fmnist", 10, 1, 28, "Fashion-MNIST: 60,000/10,000 grayscale clothing images, 10 classes",
          (60_000, 10_000))
_register("svhn", 10, 3, 32, "SVHN: 73,257/26,032 house-number digits",
          (73_257, 26_032))
_register("usps", 10, 1, 16, "USPS: 7,291/2,007 handwritten digits",
          (7_291, 2_007))
