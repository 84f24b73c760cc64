"""`cifar10c_clients`: CIFAR-10-C split into label-skewed clients, one domain per client.

FedLGD's CIFAR10C setting: for every corruption (19 files of CIFAR-10-C, Hendrycks &
Dietterich 2019), the images of the chosen severities are pooled (50,000 for all five),
each class is split over `clients_per_corruption` (3) clients by a Dirichlet(`alpha`) draw,
redrawn until every client holds at least `min_per_class` (100) images of every class, and
each client's images are split `1 - test_fraction` / `test_fraction` (90/10) into train and
test. Client k of corruption c is domain `<c>-<k>` (k from 0), so partition scheme `domain`
gives one client per domain. The split depends only on `split_seed`, not on the run's seed
(as the authors' preprocessed files are fixed). Images are resized to 28 pixels and
normalised with mean 0 and std 1 (the pixels in [0, 1]), as FedLGD's code does.

The archive `CIFAR-10-C.tar` (Zenodo record 2535967) is fetched with option
`download: true` into `<root>/raw/cifar10c_clients/`, or placed there by hand; the extracted
folder of dataset `cifar10c` (`<root>/raw/cifar10c/CIFAR-10-C/`) is used instead when it
holds the needed files. The split (`corruption_clients`) is shared with the offline
stand-in `digits_corrupted`.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from fedhet.data.core import DATASETS, Arrays, DatasetNotAvailable, DatasetSpec
from fedhet.data.downloads import DOWNLOADS, source_url
from fedhet.data.handplaced import CIFAR10C_URL, CORRUPTIONS
from fedhet.data.archives import locate_archive

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer",
                   "dog", "frog", "horse", "ship", "truck")
SEVERITIES = (1, 2, 3, 4, 5)
# A Dirichlet draw with every share above min_per_class / class size is found in a few
# tries unless alpha is tiny; this bound turns an impossible request into an error.
MAX_DRAWS = 10_000

Loader = Callable[[str], tuple[np.ndarray, np.ndarray]]


def dirichlet_clients(labels: np.ndarray, clients: int, alpha: float, min_per_class: int,
                      num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted sample indices of each of `clients` clients.

    Per class, shares p ~ Dirichlet(alpha) over the clients are redrawn until every client
    gets at least `min_per_class` of the class's samples; the class's samples (shuffled)
    are then cut by those shares (floor, remainder to the largest fractions).
    """
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c in range(num_classes):
        members = np.flatnonzero(labels == c)
        if members.size < clients * min_per_class:
            raise ValueError(
                f"class {c} has {members.size} images, fewer than {clients} clients × "
                f"min_per_class {min_per_class}; lower min_per_class or add images"
            )
        for _ in range(MAX_DRAWS):
            counts = share_counts(rng.dirichlet(np.full(clients, float(alpha))), members.size)
            if counts.min() >= min_per_class:
                break
        else:
            raise ValueError(
                f"no Dirichlet({alpha}) draw in {MAX_DRAWS} gave every client "
                f"{min_per_class} images of class {c}; raise alpha or lower min_per_class"
            )
        chunks = np.split(rng.permutation(members), np.cumsum(counts)[:-1])
        for part, chunk in zip(parts, chunks):
            part.append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def share_counts(p: np.ndarray, n: int) -> np.ndarray:
    """Integer counts summing to `n` in proportions `p`: floors, then one more each for the
    largest remainders (ties to the lower index)."""
    exact = p * n
    counts = np.floor(exact).astype(np.int64)
    short = n - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def train_test(indices: np.ndarray, labels: np.ndarray, test_fraction: float,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split one client's indices into sorted train and test indices, per class: a random
    round(test_fraction · n_c) of its n_c images of class c go to test (stratified, assumed;
    the paper says only 90/10)."""
    train, test = [], []
    for c in np.unique(labels[indices]):
        members = rng.permutation(indices[labels[indices] == c])
        n_test = int(round(test_fraction * members.size))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def client_splits(labels: np.ndarray, corruption: str, options: dict[str, Any],
                  num_classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) sample indices of each client of one corruption's pooled images. The
    draws depend on the labels' counts per class only, not on their order."""
    rng = np.random.default_rng([options["split_seed"], CORRUPTIONS.index(corruption)])
    owned = dirichlet_clients(labels, options["clients_per_corruption"], options["alpha"],
                              options["min_per_class"], num_classes, rng)
    return [train_test(indices, labels, options["test_fraction"], rng) for indices in owned]


def pooled_sizes(per_class: int, options: dict[str, Any], num_classes: int,
                 name: str) -> tuple[int, int]:
    """(train, test) images of a dataset split by `corruption_clients` whose every corruption
    pools `per_class` images of each class: the split replayed on labels alone, so it is
    exact without the images (`DatasetSpec.sizes`)."""
    check_split_options(name, options, CORRUPTIONS)
    labels = np.repeat(np.arange(num_classes), per_class)
    train = test = 0
    for corruption in options["corruptions"]:
        for train_idx, test_idx in client_splits(labels, corruption, options, num_classes):
            train, test = train + train_idx.size, test + test_idx.size
    return train, test


def corruption_clients(corruptions: Sequence[str], load: Loader, options: dict[str, Any],
                       class_names: tuple[str, ...], mean: tuple[float, ...] | None = None,
                       std: tuple[float, ...] | None = None) -> Arrays:
    """The clients of every corruption as one multi-domain dataset.

    `load(corruption)` gives that corruption's pooled images (uint8 `[N, C, H, W]`, final
    shape) and labels. Options used: `clients_per_corruption`, `alpha`, `min_per_class`,
    `test_fraction`, `split_seed`. Corruption c's split draws from a generator seeded with
    (split_seed, c's index among CIFAR-10-C's 19 corruptions), so it does not depend on
    which other corruptions are kept.
    """
    import torch

    clients = options["clients_per_corruption"]
    splits: dict[str, tuple[list, list, list]] = {"train": ([], [], []), "test": ([], [], [])}
    names = []
    for position, name in enumerate(corruptions):
        x, y = load(name)
        for k, pair in enumerate(client_splits(y, name, options, len(class_names))):
            domain = position * clients + k
            names.append(f"{name}-{k}")
            for split, idx in zip(("train", "test"), pair):
                xs, ys, ds = splits[split]
                xs.append(x[idx])
                ys.append(y[idx])
                ds.append(np.full(idx.size, domain, dtype=np.int64))
    out = {
        split: [torch.from_numpy(np.concatenate(parts)) for parts in arrays]
        for split, arrays in splits.items()
    }
    return Arrays(
        *out["train"][:2],
        *out["test"][:2],
        class_names=class_names,
        mean=mean,
        std=std,
        domain_train=out["train"][2],
        domain_test=out["test"][2],
        domain_names=tuple(names),
    )


def check_split_options(name: str, options: dict[str, Any], known: Sequence[str]) -> None:
    """Raise ValueError naming a bad `corruptions`, `severities`, `alpha` or `test_fraction`
    of dataset `name` (`known`: the valid corruption names)."""
    where = f"dataset '{name}'"
    kept = options["corruptions"]
    if isinstance(kept, str) or not isinstance(kept, Sequence) or not kept:
        raise ValueError(f"{where}: option 'corruptions' must be a non-empty list, got {kept!r}")
    for entry in kept:
        if entry not in known:
            raise ValueError(f"{where}: unknown corruption {entry!r}; known: {', '.join(known)}")
    if len(set(kept)) != len(kept):
        raise ValueError(f"{where}: option 'corruptions' names a corruption twice: {kept}")
    sev = options["severities"]
    if (isinstance(sev, str) or not isinstance(sev, Sequence) or not sev
            or any(s not in SEVERITIES or isinstance(s, bool) for s in sev)
            or len(set(sev)) != len(sev)):
        raise ValueError(
            f"{where}: option 'severities' must be a non-empty list of distinct values "
            f"from 1..5, got {sev!r}"
        )
    for key, low, high in (("alpha", 0.0, None), ("test_fraction", 0.0, 1.0)):
        value = options[key]
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= low
                or (high is not None and value >= high)):
            bound = f"between {low} and {high} (exclusive)" if high else "a positive number"
            raise ValueError(f"{where}: option '{key}' must be {bound}, got {value!r}")


# -- reading CIFAR-10-C ---------------------------------------------------------------------


def _extracted_folder(root: Path) -> Path:
    """Where dataset `cifar10c` expects the extracted archive."""
    return Path(root) / "raw" / "cifar10c" / "CIFAR-10-C"


def _npy_reader(root: Path, corruptions: Sequence[str], download: bool):
    """A function `file name -> array` reading CIFAR-10-C's `.npy` files, from the extracted
    folder when it holds them all, else from the verified archive (fetched if allowed)."""
    folder = _extracted_folder(root)
    needed = [f"{c}.npy" for c in corruptions] + ["labels.npy"]
    if all((folder / f).is_file() for f in needed):
        return lambda filename: np.load(folder / filename)
    archive = Path(root) / "raw" / "cifar10c_clients" / DOWNLOADS["cifar10c_clients"].filename
    if not download and not archive.is_file():
        raise DatasetNotAvailable(
            f"dataset 'cifar10c_clients' is not on disk (missing {archive}). Download it with "
            f"`fedhet prepare-data --dataset cifar10c_clients --root {root} --download` "
            f"(fetches {source_url(DOWNLOADS['cifar10c_clients'])}, 2.9 GB, from "
            f"{CIFAR10C_URL}), or save that file there by hand, or extract it into "
            f"{folder.parent} (giving {folder}/<corruption>.npy and labels.npy)."
        )
    path = locate_archive("cifar10c_clients", root, download)
    return lambda filename: _read_member(path, filename)


def _read_member(path: Path, filename: str) -> np.ndarray:
    """The array stored as `<any folder>/<filename>` in the tar archive `path`."""
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile() and PurePosixPath(member.name).name == filename:
                # through bytes: numpy cannot read tarfile's member objects directly
                return np.load(io.BytesIO(tar.extractfile(member).read()))
    raise DatasetNotAvailable(f"{path} holds no {filename}; is it CIFAR-10-C.tar?")


def pooled_severities(images: np.ndarray, labels: np.ndarray,
                      severities: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the chosen severities (CIFAR-10-C stacks 5 equal blocks, 1 to 5)."""
    if len(images) != len(labels) or len(labels) % len(SEVERITIES):
        raise ValueError(
            f"CIFAR-10-C file of {len(images)} images with {len(labels)} labels: expected "
            "equal counts in 5 severity blocks"
        )
    block = len(labels) // len(SEVERITIES)
    rows = np.concatenate([np.arange((s - 1) * block, s * block) for s in sorted(severities)])
    return images[rows], np.asarray(labels[rows], dtype=np.int64)


def _build_cifar10c_clients(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    from fedhet.data.imageops import conform

    check_split_options("cifar10c_clients", options, CORRUPTIONS)
    read = _npy_reader(root, options["corruptions"], options["download"])
    labels = read("labels.npy")

    def load(corruption: str) -> tuple[np.ndarray, np.ndarray]:
        x, y = pooled_severities(read(f"{corruption}.npy"), labels, options["severities"])
        nchw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.uint8))
        return conform(nchw, options["channels"], options["size"]).numpy(), y

    channels = options["channels"]
    return corruption_clients(options["corruptions"], load, options, CIFAR10_CLASSES,
                              mean=(0.0,) * channels, std=(1.0,) * channels)


DATASETS.add(
    "cifar10c_clients",
    DatasetSpec(
        name="cifar10c_clients",
        build=_build_cifar10c_clients,
        num_classes=10,
        channels=3,
        size=28,
        source="download",
        description="CIFAR-10-C as FedLGD splits it: per corruption, severities pooled, "
        "3 Dirichlet(alpha) label-skewed clients (>= 100 images per class), 90/10 "
        "train/test; one domain per client",
        options={
            "channels": 3,
            "size": 28,
            "download": False,
            "corruptions": list(CORRUPTIONS),
            "severities": list(SEVERITIES),
            "clients_per_corruption": 3,
            "alpha": 2.0,  # 5.0 for FedLGD's label-shift table
            "min_per_class": 100,
            "test_fraction": 0.1,
            "split_seed": 0,
        },
        choices={"channels": (1, 3)},
        # CIFAR-10's test set, 1,000 images of each class, at every kept severity
        sizes=lambda o: pooled_sizes(1000 * len(o["severities"]), o, len(CIFAR10_CLASSES),
                                     "cifar10c_clients"),
    ),
)
