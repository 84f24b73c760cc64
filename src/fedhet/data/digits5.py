"""`digits5`: FedLGD's DIGITS benchmark, the five digit datasets as one multi-domain dataset.

Domains in this order: MNIST (60,000/10,000), SVHN (73,257/26,032), USPS (7,291/2,007),
read through torchvision (option `download: true` fetches them), then SynthDigits and
MNIST-M from their hand-placed image folders (see `fedhet.data.handplaced`, which also
accepts the FedLGD authors' layout). The paper used the authors' copies of SynthDigits
(10,000/2,000) and MNIST-M (10,331/209). Without MNIST-M's folders, the public MNIST-M
(59,001/9,001; `fedhet.data.mnistm`, fetched and md5-checked by `download: true`) stands in
for it: its counts differ, so results on it are not the paper's setting. Every image becomes
3-channel at 28 pixels, and normalisation is fixed at mean = std = 0.5, as FedLGD's code does. Partition scheme
`domain` with 5 clients gives one client per dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.core import DATASETS, Arrays, DatasetNotAvailable, DatasetSpec, split_sizes
from fedhet.data.handplaced import digit_folders, digit_folders_hint, read_digit_folders
from fedhet.data.mnistm import archives_on_disk, read_public_mnistm
from fedhet.data.torchvision_sets import missing_files, not_available_message, torchvision_split

DOMAINS = ("mnist", "svhn", "usps", "synthdigits", "mnistm")
TORCHVISION_DOMAINS = ("mnist", "svhn", "usps")
STATS = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def missing_domain(name: str, root: Path, download: bool) -> str | None:
    """Why domain `name` cannot be read (where its files go), or None when it can."""
    if name in TORCHVISION_DOMAINS:
        missing = missing_files(name, root)
        if missing and not download:
            return f"dataset 'digits5' needs {name}: " + not_available_message(name, root, missing)
        return None
    if digit_folders(name, root) or (name == "mnistm" and (download or archives_on_disk(root))):
        return None
    hint = digit_folders_hint(name, root, "digits5")
    if name == "mnistm":
        hint += (" Or fetch the public copy (other counts) with `fedhet prepare-data "
                 f"--dataset digits5 --root {root} --download`.")
    return hint


def load_domain(name: str, root: Path, download: bool, size: int) -> Split:
    """Train images, train labels, test images, test labels (uint8 `[N, C, H, W]`) of one
    domain: torchvision's and the public MNIST-M at their own size and channels, image
    folders read at `size`."""
    if name in TORCHVISION_DOMAINS:
        x_train, y_train, _ = torchvision_split(name, root, True, download)
        x_test, y_test, _ = torchvision_split(name, root, False, download)
        return x_train, y_train, x_test, y_test
    if name == "mnistm" and not digit_folders(name, root):
        return read_public_mnistm(root, download)
    arrays = read_digit_folders(name, root, size)
    if arrays.class_names != tuple(str(c) for c in range(10)):
        raise ValueError(f"{name}: expected class folders 0-9, found {arrays.class_names}")
    return (arrays.x_train.numpy(), arrays.y_train.numpy(),
            arrays.x_test.numpy(), arrays.y_test.numpy())


def _build(root: Path, options: dict[str, Any]) -> Arrays:
    """All five domains at 3 channels and 28 pixels; domain id = position in DOMAINS."""
    import torch

    from fedhet.data.imageops import conform

    reasons = [r for d in DOMAINS if (r := missing_domain(d, root, options["download"]))]
    if reasons:
        raise DatasetNotAvailable(" ".join(reasons))
    parts: dict[str, list[list[torch.Tensor]]] = {"train": [[], [], []], "test": [[], [], []]}
    for d, name in enumerate(DOMAINS):
        x_train, y_train, x_test, y_test = load_domain(name, root, options["download"],
                                                       options["size"])
        for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
            xs, ys, ds = parts[split]
            xs.append(conform(torch.from_numpy(np.ascontiguousarray(x)), 3, options["size"]))
            ys.append(torch.as_tensor(np.asarray(y, dtype=np.int64)))
            ds.append(torch.full((len(y),), d, dtype=torch.long))
    out = {split: [torch.cat(t) for t in tensors] for split, tensors in parts.items()}
    return Arrays(
        *out["train"][:2],
        *out["test"][:2],
        class_names=tuple(str(c) for c in range(10)),
        mean=STATS[0],
        std=STATS[1],
        domain_train=out["train"][2],
        domain_test=out["test"][2],
        domain_names=DOMAINS,
    )


def _sizes(options: dict[str, Any]) -> tuple[int, int]:
    """(train, test) images: the five domains' declared counts summed (SynthDigits and MNIST-M
    as the authors' copies; the public MNIST-M fallback adds 48,670 / 8,792)."""
    counts = [split_sizes(name) for name in DOMAINS]
    return sum(train for train, _ in counts), sum(test for _, test in counts)


DATASETS.add(
    "digits5",
    DatasetSpec(
        name="digits5",
        build=_build,
        num_classes=10,
        channels=3,
        size=28,
        source="manual",
        description="DIGITS: MNIST, SVHN, USPS (torchvision), SynthDigits (by hand), MNIST-M "
        "(by hand, or the public copy by download) as 5 domains, 28x28 RGB; public MNIST-M "
        "(59,001/9,001) differs from the paper's 10,331/209",
        options={"channels": 3, "size": 28, "download": False},
        choices={"channels": (3,)},
        sizes=_sizes,
    ),
)
