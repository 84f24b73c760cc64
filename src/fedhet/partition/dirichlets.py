"""Dirichlet label-skew schemes: per-class LDA over clients (`dirichlet`) and FedBR's
per-client Dirichlet over classes with equal client sizes (`dirichlet_client`)."""

from __future__ import annotations

import numpy as np

from fedhet.partition.core import SCHEMES, Partition, PartitionError
from fedhet.partition.helpers import (
    _indices_by_class,
    _pack,
    _require_positive,
    _split_counts,
)


@SCHEMES.register("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    alpha: float = 0.1,
    min_size: int | None = None,
    cap: bool = True,
    max_tries: int = 1000,
) -> Partition:
    """Latent Dirichlet allocation over clients, per class (VHL, FedImpro, CCVR).

    For each class, proportions p ~ Dir(alpha·1) over the clients are drawn; with `cap`, clients
    that already hold at least N / num_clients samples get p = 0 for this class and p is
    renormalised (the VHL/FedImpro code; CCVR's FL-bench code has no cap). The class's shuffled
    samples are cut at the cumulative proportions. The whole draw is repeated while some client
    has fewer than `min_size` samples (default: the number of classes, as the VHL/FedImpro
    code; FL-bench uses 10), at most `max_tries` times. If every uncapped client drew p = 0
    (floating-point underflow at tiny alpha), the class is split equally among them.
    Smaller alpha means more skew.
    """
    _require_positive("alpha", alpha, "dirichlet")
    n = len(labels)
    min_size = num_classes if min_size is None else int(min_size)
    if min_size * num_clients > n:
        raise PartitionError(
            f"dirichlet: min_size={min_size} for each of num_clients={num_clients} clients needs "
            f"{min_size * num_clients} samples but there are only {n}; lower min_size or "
            "num_clients"
        )
    by_class = _indices_by_class(labels, num_classes)
    limit = n / num_clients
    concentration = np.full(num_clients, float(alpha))
    for _ in range(max_tries):
        counts = np.zeros((num_clients, num_classes), dtype=np.int64)
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c, members in enumerate(by_class):
            if members.size == 0:
                continue
            allowed = sizes < limit if cap else np.ones(num_clients, dtype=bool)
            p = rng.dirichlet(concentration) * allowed
            total = p.sum()
            p = p / total if total > 0 else allowed / allowed.sum()
            counts[:, c] = _split_counts(p, members.size)
            sizes += counts[:, c]
        if sizes.min() >= min_size:
            break
    else:
        raise PartitionError(
            f"dirichlet: no draw in {max_tries} tries gave every client at least "
            f"min_size={min_size} samples (alpha={alpha}, num_clients={num_clients}, "
            f"{n} samples, {num_classes} classes); raise alpha, lower num_clients or lower "
            "min_size"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, members in enumerate(by_class):
        shuffled = rng.permutation(members)
        for k, chunk in enumerate(np.split(shuffled, np.cumsum(counts[:, c])[:-1])):
            parts[k].append(chunk)
    return Partition(_pack(parts))


@SCHEMES.register("dirichlet_client")
def dirichlet_client(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    num_classes: int,
    domains: np.ndarray | None,
    alpha: float = 0.1,
    prior: str = "uniform",
) -> Partition:
    """One class distribution per client, equal client sizes (FedBR).

    Clients are filled one after another. Client k draws q ~ Dir(alpha·w) over the classes and
    then receives exactly N // num_clients samples, each drawn without replacement from a class
    chosen according to q; when a class runs out, its mass is removed from q and q is
    renormalised over the classes that still have samples. This is FedBR's sample-by-sample
    loop, done in batches: the counts for the still-needed samples are drawn from a multinomial,
    clipped at what each class has left, and the shortfall is redrawn from the renormalised q —
    the same distribution, without a Python loop per sample. Which samples of a class a client
    gets is uniform (each class is shuffled once).

    `prior` chooses w: `uniform` (w = 1, the FedBR paper and its CIFAR-100 code) or `remaining`
    (w = the class fractions of the samples not yet assigned, FedBR's CIFAR-10 code, i.e. about
    alpha / num_classes per class). If every class still holding samples has q = 0 (underflow
    at tiny alpha), the client draws in proportion to the remaining class sizes. The
    N mod num_clients samples left over are not assigned (as in FedBR).
    """
    _require_positive("alpha", alpha, "dirichlet_client")
    if prior not in ("uniform", "remaining"):
        raise PartitionError(
            f"dirichlet_client: prior must be 'uniform' or 'remaining', got {prior!r}"
        )
    per_client = len(labels) // num_clients
    if per_client == 0:
        raise PartitionError(
            f"dirichlet_client: num_clients={num_clients} exceeds the {len(labels)} samples; "
            "lower num_clients"
        )
    by_class = [rng.permutation(m) for m in _indices_by_class(labels, num_classes)]
    remaining = np.array([m.size for m in by_class], dtype=np.int64)
    used = np.zeros(num_classes, dtype=np.int64)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k in range(num_clients):
        if prior == "uniform":
            weights = np.ones(num_classes)
        else:
            weights = remaining / remaining.sum()
        q = np.zeros(num_classes)
        drawable = weights > 0
        q[drawable] = rng.dirichlet(alpha * weights[drawable])
        take = np.zeros(num_classes, dtype=np.int64)
        need = per_client
        while need > 0:
            left = remaining - take
            w = q * (left > 0)
            total = w.sum()
            w = w / total if total > 0 else left / left.sum()
            got = np.minimum(rng.multinomial(need, w), left)
            take += got
            need -= int(got.sum())
        for c in np.flatnonzero(take):
            parts[k].append(by_class[c][used[c] : used[c] + take[c]])
        used += take
        remaining -= take
    return Partition(_pack(parts))
