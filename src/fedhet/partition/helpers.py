"""Building blocks shared by the partition schemes: grouping by class, cutting, packing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedhet.partition.core import PartitionError


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
