"""`digits_corrupted`: an offline stand-in for `cifar10c_clients`.

Colour digits (as `digits10` with `channels: 3`, drawn from all 1,797 scikit-learn digits,
since CIFAR-10-C's clients also share one pool of base images) are rendered once,
`base_per_class` per class. Every kept corruption (`fedhet.data.corruptions`) is applied
to all of them at every kept severity, as CIFAR-10-C corrupts CIFAR-10's test set, and each
corruption's pooled images are split into clients by the code of `cifar10c_clients`
(`corruption_clients`): Dirichlet(`alpha`) label skew with at least `min_per_class` images
per class and client, then 90/10 train/test. Client k of corruption c is domain `<c>-<k>`.
Normalisation is fixed at mean 0, std 1, as for `cifar10c_clients`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.cifar10c import (
    SEVERITIES, check_split_options, corruption_clients, pooled_sizes,
)
from fedhet.data.core import DATASETS, Arrays, DatasetSpec
from fedhet.data.corruptions import CORRUPTIONS, apply_corruption
from fedhet.data.handplaced import CORRUPTIONS as CIFAR10C_CORRUPTIONS
from fedhet.data.standins import SPLIT_SEED, _canvas_single, _render_split, digit_pools

STREAM = 7  # keeps this stand-in's seeds apart from the other stand-ins'
DEFAULT_CORRUPTIONS = ["gaussian_noise", "defocus_blur", "contrast", "pixelate"]


def _base_images(per_class: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Colour digits uint8 `[N, H, W, 3]` and labels, from all source digits of each class."""
    pools = digit_pools()
    union = [np.concatenate([a, b]) for a, b in zip(pools["train"], pools["test"])]
    x, y = _render_split(union, _canvas_single, 10, per_class, size, 3,
                         np.random.default_rng([SPLIT_SEED, STREAM]))
    return x.transpose(0, 2, 3, 1), y


def _build(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    from fedhet.data.imageops import conform

    check_split_options("digits_corrupted", options, tuple(CORRUPTIONS))
    base, labels = _base_images(options["base_per_class"], options["size"])

    def load(corruption: str) -> tuple[np.ndarray, np.ndarray]:
        cid = CIFAR10C_CORRUPTIONS.index(corruption)
        x = np.concatenate([
            apply_corruption(corruption, base, s,
                             np.random.default_rng([SPLIT_SEED, STREAM, cid, s]))
            for s in sorted(options["severities"])
        ])
        nchw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        y = np.tile(labels, len(options["severities"]))
        return conform(nchw, options["channels"], options["size"]).numpy(), y

    channels = options["channels"]
    return corruption_clients(options["corruptions"], load, options,
                              tuple(str(c) for c in range(10)),
                              mean=(0.0,) * channels, std=(1.0,) * channels)


DATASETS.add(
    "digits_corrupted",
    DatasetSpec(
        name="digits_corrupted",
        build=_build,
        num_classes=10,
        channels=3,
        size=16,
        source="stand-in",
        description="colour digits under numpy corruptions, split per corruption into "
        "Dirichlet label-skewed clients as cifar10c_clients; one domain per client",
        options={
            "channels": 3,
            "size": 16,
            # 30 base digits per class × 5 severities = 150 images per class and corruption
            "base_per_class": 30,
            "corruptions": DEFAULT_CORRUPTIONS,
            "severities": list(SEVERITIES),
            "clients_per_corruption": 3,
            "alpha": 2.0,
            # 100 at paper scale (5,000 images per class); 10 here (150 per class) keeps
            # Dirichlet(2) redraws rare and leaves >= 1 test image per class and client
            "min_per_class": 10,
            "test_fraction": 0.1,
            "split_seed": 0,
            "stands_in_for": "cifar10c_clients",
        },
        choices={"channels": (1, 3)},
        sizes=lambda o: pooled_sizes(o["base_per_class"] * len(o["severities"]), o, 10,
                                     "digits_corrupted"),
    ),
)
