"""Feature-shift schemes: one domain per client (`domain`, optionally one client per domain
and class group) and a base split plus per-sample rotation angles (`rotation`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedhet.partition.core import SCHEMES, Partition, PartitionError, _run_scheme
from fedhet.partition.helpers import _pack, _require_positive, _split_counts

# Rotation angles of FedBR's RotatedMNIST / RotatedCIFAR10 environments, in degrees.
DEFAULT_ANGLES: tuple[float, ...] = (0.0, 15.0, 30.0, 45.0, 60.0, 75.0, 90.0, 105.0, 120.0, 135.0)


@SCHEMES.register("domain")
def domain(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    within_alpha: float | None = None,
    class_groups: Sequence[Sequence[int]] | int | None = None,
) -> Partition:
    """One domain per client (feature shift, e.g. FedLGD's digit data sets).

    With D distinct domain ids (sorted), client k gets domain k mod D. If num_clients = D each
    client holds one whole domain. If num_clients = m·D, each domain is shared by m clients:
    split IID (equal parts) by default, or, with `within_alpha`, by a per-class Dirichlet
    (alpha = within_alpha) over those m clients, adding label skew inside each domain.

    `class_groups` (a list of G disjoint lists of class ids) splits every domain by class
    instead, adding label shift to the feature shift (FedBR's PACS: 4 domains × groups
    {0-3}, {4-6} = 8 clients): client d·G+g holds domain d's samples whose class is in group g,
    and num_clients must be D·G. Samples of a class in no group go to no client. An integer G
    splits the classes in order into G groups of near-equal size, the larger first (2 on
    PACS's 7 classes: {0-3}, {4-6}, the code's `Y <= 7 // 2`).
    """
    if domains is None:
        raise PartitionError(
            "domain: this scheme needs per-sample domain ids, and the data set has none; "
            "choose another partition scheme"
        )
    ids = np.unique(domains)
    if class_groups is not None:
        if within_alpha is not None:
            raise PartitionError(
                "domain: class_groups gives each (domain, class group) pair one client, so "
                "within_alpha (which splits a domain among several clients) cannot be set with it"
            )
        if isinstance(class_groups, int) and not isinstance(class_groups, bool):
            if not 1 <= class_groups <= num_classes:
                raise PartitionError(
                    f"domain: class_groups={class_groups} must be between 1 and the number of "
                    f"classes ({num_classes})"
                )
            class_groups = [g.tolist() for g in np.array_split(np.arange(num_classes),
                                                               class_groups)]
        return _by_class_groups(labels, domains, ids, num_clients, num_classes, class_groups)
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


def _class_group_of(class_groups: Sequence[Sequence[int]], num_classes: int) -> np.ndarray:
    """Group index of every class (-1: in no group), after checking the groups."""
    if isinstance(class_groups, str) or not isinstance(class_groups, Sequence) or not class_groups:
        raise PartitionError(
            f"domain: class_groups must be a non-empty list of lists of class ids, "
            f"got {class_groups!r}"
        )
    group_of = np.full(num_classes, -1, dtype=np.int64)
    for g, group in enumerate(class_groups):
        if isinstance(group, str) or not isinstance(group, Sequence) or not group:
            raise PartitionError(
                f"domain: class_groups[{g}] must be a non-empty list of class ids, got {group!r}"
            )
        for c in group:
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not (
                0 <= c < num_classes
            ):
                raise PartitionError(
                    f"domain: class_groups[{g}] holds {c!r}, which is not a class id "
                    f"(0..{num_classes - 1})"
                )
            if group_of[c] >= 0:
                raise PartitionError(
                    f"domain: class {c} is in class_groups[{group_of[c]}] and again in "
                    f"class_groups[{g}]; put every class in one group at most"
                )
            group_of[c] = g
    return group_of


def _by_class_groups(
    labels: np.ndarray,
    domains: np.ndarray,
    ids: np.ndarray,
    num_clients: int,
    num_classes: int,
    class_groups: Sequence[Sequence[int]],
) -> Partition:
    """One client per (domain, class group) pair, client d·G+g = domain d, group g."""
    group_of = _class_group_of(class_groups, num_classes)
    num_groups = len(class_groups)
    if num_clients != ids.size * num_groups:
        raise PartitionError(
            f"domain: with class_groups there is one client per (domain, class group) pair, so "
            f"num_clients must be {ids.size} domains × {num_groups} groups = "
            f"{ids.size * num_groups}, got num_clients={num_clients}"
        )
    sample_group = group_of[labels]
    parts = [
        [np.flatnonzero((domains == dom) & (sample_group == g))]
        for dom in ids
        for g in range(num_groups)
    ]
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
