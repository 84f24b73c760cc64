"""Split a training set across federated clients (label and domain heterogeneity).

`make_partition` turns the training labels into per-client index arrays with one of the
schemes in `SCHEMES`; `load_or_make_partition` does the same for a run and caches the result
as an `.npz` file, so every run (and every seed of a method comparison) trains on exactly the
same split. Everything here is numpy-only and deterministic given the seed: all randomness comes
from one `np.random.default_rng(seed)`.

Schemes (parameters and defaults in each function's docstring, or `scheme_params(name)`):

- `dirichlet`: per-class Dirichlet over clients (LDA), as the VHL, FedImpro and CCVR code.
- `dirichlet_client`: one Dirichlet over classes per client, equal client sizes (FedBR).
- `nclass`: every client holds exactly `classes_per_client` classes (NIID-Bench "#label K").
- `subset`: one dominant class per client plus a few samples of every other class (VHL Table 3).
- `iid`: shuffled equal split.
- `domain`: one domain (feature-shift source) per client.
- `rotation`: any base split plus a rotation angle per sample (FedBR's rotated data).

Every scheme assigns each training index to at most one client; all of them except `nclass`
(unowned classes), `subset` (fewer clients than classes) and `dirichlet_client` (the remainder
of N / num_clients) use all the data.

Layout: `core` (the `Partition` type, the `SCHEMES` registry, `make_partition`), `helpers`
(building blocks of the schemes), one module per family of schemes, each registering its
schemes on import (`dirichlets`: dirichlet, dirichlet_client; `classes`: nclass, subset, iid;
`domains`: domain, rotation), and `files` (cache keys, `load_or_make_partition`, and a run's `client_partition`). Module
names differ from scheme names, so `fedhet.partition.dirichlet` stays the scheme function.
"""

from __future__ import annotations

from fedhet.partition.core import (
    PARTITION_VERSION,
    SCHEMES,
    Partition,
    PartitionError,
    SchemeFn,
    count_matrix,
    labels_checksum,
    make_partition,
    scheme_params,
)

# Importing the scheme modules registers their schemes in SCHEMES (in this order).
from fedhet.partition.dirichlets import dirichlet, dirichlet_client  # isort: skip
from fedhet.partition.classes import iid, nclass, subset  # isort: skip
from fedhet.partition.domains import DEFAULT_ANGLES, domain, rotation  # isort: skip
from fedhet.partition.files import (  # isort: skip
    ClientSplit,
    client_partition,
    load_or_make_partition,
    partition_key,
)

__all__ = [
    "ClientSplit",
    "DEFAULT_ANGLES",
    "PARTITION_VERSION",
    "SCHEMES",
    "Partition",
    "PartitionError",
    "SchemeFn",
    "client_partition",
    "count_matrix",
    "dirichlet",
    "dirichlet_client",
    "domain",
    "iid",
    "labels_checksum",
    "load_or_make_partition",
    "make_partition",
    "nclass",
    "partition_key",
    "rotation",
    "scheme_params",
    "subset",
]
