"""`fmnist_corrupted`: CIFAR-10-C's client protocol on real Fashion-MNIST, offline.

FedLGD's CIFAR10C clients need a 2.9 GB archive; this dataset runs the same protocol on a real
dataset that is available offline. Fashion-MNIST's test images (as CIFAR-10-C corrupts
CIFAR-10's test set), `base_per_class` per class, in three channels, go through our own
corruptions (`fedhet.data.corruptions`) at every kept severity; each corruption's pooled images
are split into clients by `cifar10c_clients`' code (Dirichlet label skew, at least
`min_per_class` per class and client, 90/10 train/test). Client k of corruption c is domain
`<c>-<k>`. Normalisation is fixed at mean 0, std 1, as for `cifar10c_clients`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.cifar10c import (
    SEVERITIES, check_split_options, corruption_clients, pooled_sizes,
)
from fedhet.data.core import DATASETS, Arrays, DatasetSpec, load_dataset
from fedhet.data.corruptions import CORRUPTIONS, apply_corruption
from fedhet.data.handplaced import CORRUPTIONS as CIFAR10C_CORRUPTIONS

STREAM = 8  # keeps this dataset's seeds apart from the stand-ins'
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
           "Sneaker", "Bag", "Ankle boot")


def _base_images(root: Path, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `per_class` test images of each class, uint8 `[N, 28, 28, 3]` (grey
    repeated), and their labels."""
    data = load_dataset("fmnist", root)
    x, y = data.x_test.numpy(), data.y_test.numpy()
    keep = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(len(CLASSES))])
    gray = x[keep, 0]
    return np.repeat(gray[..., None], 3, axis=-1), y[keep].astype(np.int64)


def _build(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    from fedhet.data.imageops import conform

    check_split_options("fmnist_corrupted", options, tuple(CORRUPTIONS))
    base, labels = _base_images(root, options["base_per_class"])

    def load(corruption: str) -> tuple[np.ndarray, np.ndarray]:
        cid = CIFAR10C_CORRUPTIONS.index(corruption)
        x = np.concatenate([
            apply_corruption(corruption, base, s, np.random.default_rng([STREAM, cid, s]))
            for s in sorted(options["severities"])
        ])
        nchw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        y = np.tile(labels, len(options["severities"]))
        return conform(nchw, 3, options["size"]).numpy(), y

    return corruption_clients(options["corruptions"], load, options, CLASSES,
                              mean=(0.0,) * 3, std=(1.0,) * 3)


DATASETS.add(
    "fmnist_corrupted",
    DatasetSpec(
        name="fmnist_corrupted",
        build=_build,
        num_classes=10,
        channels=3,
        size=28,
        source="torchvision",
        description="Fashion-MNIST's test images under our corruptions, split per corruption "
        "into Dirichlet label-skewed clients as cifar10c_clients; one domain per client",
        options={
            "size": 28,
            "base_per_class": 1000,  # all of Fashion-MNIST's test images
            "corruptions": ["gaussian_noise", "defocus_blur", "contrast", "pixelate"],
            "severities": list(SEVERITIES),
            "clients_per_corruption": 3,
            "alpha": 2.0,
            "min_per_class": 100,
            "test_fraction": 0.1,
            "split_seed": 0,
        },
        # Fashion-MNIST's test set holds 1,000 images of each class
        sizes=lambda o: pooled_sizes(min(o["base_per_class"], 1000) * len(o["severities"]), o,
                                     len(CLASSES), "fmnist_corrupted"),
    ),
)
