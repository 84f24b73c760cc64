"""`digits_writers`: an offline stand-in for FEMNIST's writers, built from scikit-learn's digits.

Every writer has a fixed "hand", drawn from its id: a slant (rotation up to ±15°), a shear, a
size and a stroke weight, applied to all its digits, plus a label skew (a Dirichlet(0.5) draw
over the 10 digits). A writer's images are the train or test pool's digits (disjoint pools, see
`fedhet.data.standins`) rendered in that hand with a little per-image jitter. Writers are the
domains (`domain_train` / `domain_test`), so the `domain` partition with one client per writer
gives FEMNIST's natural feature and label shift. By default there are 3,400 writers, as in
FEMNIST, so the paper's client count holds at every scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.core import DATASETS, Arrays, DatasetSpec
from fedhet.data.standins import (
    SPLITS, _gray_to_channels, _rng, digit_pools, to_uint8, warp_by,
)

MAX_SLANT = 15.0  # degrees
MAX_SHEAR = 0.25
SIZE_RANGE = (0.85, 1.15)
STROKE_RANGE = (0.6, 1.6)  # exponent on the ink: < 1 bolder, > 1 thinner
LABEL_SKEW = 0.5  # Dirichlet concentration of a writer's digits
JITTER = 0.15  # per-image share of the writer's slant / size left to chance


def writer_hands(writers: int) -> dict[str, np.ndarray]:
    """Each writer's slant (radians), shear, size, stroke exponent and digit distribution."""
    rng = _rng(4, 0)
    return {
        "slant": np.deg2rad(rng.uniform(-MAX_SLANT, MAX_SLANT, writers)),
        "shear": rng.uniform(-MAX_SHEAR, MAX_SHEAR, writers),
        "size": rng.uniform(*SIZE_RANGE, writers),
        "stroke": rng.uniform(*STROKE_RANGE, writers),
        "digits": rng.dirichlet(np.full(10, LABEL_SKEW), writers),
    }


def _build_writers(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    pools = digit_pools()
    writers = options["writers"]
    hands = writer_hands(writers)
    out = {}
    for split, split_id in SPLITS.items():
        rng = _rng(4, 1 + split_id)
        per_writer = options[f"{split}_per_writer"]
        w = np.repeat(np.arange(writers), per_writer)
        y = np.array([rng.choice(10, p=p) for p in hands["digits"] for _ in range(per_writer)])
        src = np.stack([pools[split][c][rng.integers(len(pools[split][c]))] for c in y])
        src = src ** hands["stroke"][w][:, None, None]
        n = len(y)
        angle = hands["slant"][w] * (1 + JITTER * rng.uniform(-1, 1, n))
        scale = hands["size"][w] * (1 + 0.5 * JITTER * rng.uniform(-1, 1, n))
        shift = rng.uniform(-0.5, 0.5, (n, 2))
        gray = warp_by(src, options["size"], angle, scale, shift, hands["shear"][w])
        x = to_uint8(_gray_to_channels(gray, options["channels"]), rng)
        out[split] = (torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)),
                      torch.from_numpy(w.astype(np.int64)))
    return Arrays(out["train"][0], out["train"][1], out["test"][0], out["test"][1],
                  class_names=tuple(str(c) for c in range(10)), domain_train=out["train"][2],
                  domain_test=out["test"][2],
                  domain_names=tuple(f"writer{k:04d}" for k in range(writers)))


DATASETS.add(
    "digits_writers",
    DatasetSpec(
        name="digits_writers",
        build=_build_writers,
        num_classes=10,
        channels=1,
        size=16,
        source="stand-in",
        description="10 digits by 3,400 synthetic writers (a hand and a label skew each), "
        "writer = domain; offline stand-in for FEMNIST",
        options={"channels": 1, "size": 16, "writers": 3400, "train_per_writer": 8,
                 "test_per_writer": 2, "stands_in_for": "femnist"},
        choices={"channels": (1, 3)},
        sizes=lambda o: (o["writers"] * o["train_per_writer"], o["writers"] * o["test_per_writer"]),
    ),
)
