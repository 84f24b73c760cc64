"""Class-assignment schemes: a fixed number of classes per client (`nclass`), one dominant
class per client (`subset`), and the shuffled equal split (`iid`)."""

from __future__ import annotations

import numpy as np

from fedhet.partition.core import SCHEMES, Partition, PartitionError
from fedhet.partition.helpers import _indices_by_class, _pack


@SCHEMES.register("nclass")
def nclass(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    classes_per_client: int = 2,
) -> Partition:
    """Pathological label skew: each client holds exactly `classes_per_client` classes.

    As NIID-Bench's "noniid-#label K" (used by VHL/FedImpro): client i owns class i mod C plus
    K - 1 other distinct classes chosen at random, and each class's shuffled samples are split
    equally (up to one sample) among its owners. Unlike the original, which counts owners in a
    fixed list of 10, any number of classes works. Classes that no client owns (possible when
    num_clients * K < C or by chance) are dropped from training.
    """
    k_per = classes_per_client
    if not isinstance(k_per, (int, np.integer)) or not 1 <= k_per <= num_classes:
        raise PartitionError(
            f"nclass: classes_per_client must be an integer in 1..num_classes={num_classes}, "
            f"got {k_per!r}"
        )
    owners: list[list[int]] = [[] for _ in range(num_classes)]
    all_classes = np.arange(num_classes)
    for i in range(num_clients):
        first = i % num_classes
        others = rng.choice(np.delete(all_classes, first), size=k_per - 1, replace=False)
        for c in (first, *others.tolist()):
            owners[c].append(i)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, members in enumerate(_indices_by_class(labels, num_classes)):
        if not owners[c]:
            continue
        for i, chunk in zip(owners[c], np.array_split(rng.permutation(members), len(owners[c]))):
            parts[i].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("subset")
def subset(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    dominant_fraction: float = 0.99,
) -> Partition:
    """One dominant class per client (VHL Table 3's "subset" split).

    Client i's dominant class is i mod C. Of each class's n_c samples, round(dominant_fraction
    · n_c) go to the clients dominated by that class, split equally; the rest is split equally
    (up to one sample, the extra ones going to randomly chosen clients) among all other
    clients. On CIFAR-10 with 10 clients this is the paper's 4950 dominant samples plus 5 or 6
    of every other class; smaller data sets get proportionally fewer minor samples (possibly 0
    of some classes). With fewer clients than classes, a class that dominates no client gives
    only its minor share (the dominant share is dropped), so every client still has exactly one
    dominant class. A class dominating every client (a single client) goes to it whole.
    """
    if not 0.0 <= dominant_fraction <= 1.0:
        raise PartitionError(
            f"subset: dominant_fraction must be in [0, 1], got {dominant_fraction!r}"
        )
    clients = np.arange(num_clients)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, members in enumerate(_indices_by_class(labels, num_classes)):
        shuffled = rng.permutation(members)
        dominated = clients[clients % num_classes == c]
        others = rng.permutation(clients[clients % num_classes != c])
        n_dom = shuffled.size if others.size == 0 else int(round(dominant_fraction * shuffled.size))
        for i, chunk in zip(dominated, np.array_split(shuffled[:n_dom], max(dominated.size, 1))):
            parts[i].append(chunk)
        if others.size:
            for i, chunk in zip(others, np.array_split(shuffled[n_dom:], others.size)):
                parts[i].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("iid")
def iid(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
) -> Partition:
    """Shuffled split into equal parts (sizes differ by at most one)."""
    if num_clients > len(labels):
        raise PartitionError(
            f"iid: num_clients={num_clients} exceeds the {len(labels)} samples; lower num_clients"
        )
    chunks = np.array_split(rng.permutation(len(labels)), num_clients)
    return Partition(_pack([[chunk] for chunk in chunks]))
