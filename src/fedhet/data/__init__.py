"""Datasets: a registry of specs, cached uint8 tensors with a checksum, offline stand-ins.

```python
data = load_dataset("digits10", root="resources/datasets", options={"channels": 3})
path = prepare_dataset("fmnist", "resources/datasets", {"size": 32})
```

Registered datasets (see `DATASETS.names()` and `describe(name)`):

- via torchvision: `cifar10`, `cifar100`, `fmnist`, `mnist`, `svhn`, `usps`
  (`fmnist` is seeded offline from Debian's `dataset-fashion-mnist` when installed);
- downloaded archives: `cinic10`, `tinyimagenet`, `femnist` (HDF5, read with h5py),
  `cifar10c_clients` (CIFAR-10-C split into label-skewed clients, one domain each);
- placed by hand: `synthdigits`, `mnistm`, `retina`, `cifar10c`, `pacs`;
- several of the above as one multi-domain dataset: `digits5` (MNIST, SVHN, USPS via
  torchvision, SynthDigits by hand, MNIST-M by hand or its public copy by download);
- offline stand-ins from scikit-learn's digits: `digits10`, `digits100`, `digits_domains`
  (also for RETINA, with options `num_classes` and `domains`), `digits_writers`
  (FEMNIST's writers), `digits_corrupted` (for `cifar10c_clients`).

Importing this package does not import torch or torchvision; they are loaded when a
dataset is built or loaded.
"""

from fedhet.data.core import (
    DATASETS,
    CacheError,
    DatasetNotAvailable,
    DatasetSpec,
    FedData,
    cache_path,
    dataset_key,
    describe,
    load_dataset,
    prepare_dataset,
    resolve_options,
    split_sizes,
    verify_cache_file,
)
from fedhet.data.downloads import DOWNLOADS, Download, DownloadError, fetch
from fedhet.data.fmnist import seed_fmnist_from

# Importing these modules registers their datasets.
from fedhet.data import standins, writers, torchvision_sets, archives, femnist, handplaced  # noqa: E402,F401  isort: skip
from fedhet.data import cifar10c, corrupted_digits, digits5, fmnist_corrupted  # noqa: E402,F401  isort: skip

__all__ = [
    "DATASETS",
    "DOWNLOADS",
    "CacheError",
    "DatasetNotAvailable",
    "DatasetSpec",
    "Download",
    "DownloadError",
    "FedData",
    "cache_path",
    "dataset_key",
    "describe",
    "fetch",
    "load_dataset",
    "prepare_dataset",
    "resolve_options",
    "split_sizes",
    "verify_cache_file",
    "seed_fmnist_from",
]
