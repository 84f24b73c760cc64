"""Seed Fashion-MNIST's raw files from a local copy (Debian's `dataset-fashion-mnist`).

Debian ships the real Fashion-MNIST IDX files, but re-compressed, so the `.gz` MD5s that
torchvision checks before downloading differ and it would go to the network. Instead we
gunzip them into torchvision's raw folder and verify the *decompressed* files against the
sha256 values below; `torchvision.datasets.FashionMNIST(root, download=False)` then reads
them. (The hashes were computed from the Debian files after checking that the first ten
training labels are the canonical 9, 0, 0, 3, 0, 2, 7, 2, 5, 5.)

From a shell: `fedhet seed-fmnist [SOURCE_DIR] [--root ROOT]`.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

from fedhet.data.core import DEFAULT_ROOT, DatasetNotAvailable, write_atomic

DEBIAN_FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

# sha256 of the decompressed IDX files.
FMNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}


def fmnist_raw_dir(root: str | os.PathLike = DEFAULT_ROOT) -> Path:
    """Where torchvision's FashionMNIST(root=<root>/raw) looks for the IDX files."""
    return Path(root) / "raw" / "FashionMNIST" / "raw"


def fmnist_seeded(root: str | os.PathLike = DEFAULT_ROOT) -> bool:
    """Whether all four decompressed IDX files are in the raw folder."""
    raw = fmnist_raw_dir(root)
    return all((raw / name).is_file() for name in FMNIST_SHA256)


def seed_fmnist_from(
    source: str | os.PathLike = DEBIAN_FMNIST_DIR, root: str | os.PathLike = DEFAULT_ROOT
) -> Path:
    """Copy Fashion-MNIST's IDX files from `source` (gzipped or not) into the raw folder.

    Each file is decompressed in memory, checked against its known sha256, and written
    atomically; files already in place with the right content are kept. Returns the raw
    folder. Raises DatasetNotAvailable when a file is missing or its content differs.
    """
    source, raw = Path(source), fmnist_raw_dir(root)
    raw.mkdir(parents=True, exist_ok=True)
    for name, expected in FMNIST_SHA256.items():
        target = raw / name
        if target.is_file() and _sha256(target.read_bytes()) == expected:
            continue
        data = _read_idx(source, name)
        actual = _sha256(data)
        if actual != expected:
            raise DatasetNotAvailable(
                f"{source / name}(.gz) is not the standard Fashion-MNIST file: its decompressed "
                f"sha256 is {actual}, expected {expected}"
            )
        write_atomic(target, data)
    return raw


def _read_idx(source: Path, name: str) -> bytes:
    """The decompressed bytes of `name` from `source/name.gz` or `source/name`."""
    gz, plain = source / f"{name}.gz", source / name
    if gz.is_file():
        with gzip.open(gz, "rb") as fh:
            return fh.read()
    if plain.is_file():
        return plain.read_bytes()
    raise DatasetNotAvailable(
        f"Fashion-MNIST file {name}(.gz) not found in {source}; on Debian/Ubuntu install it with "
        f"`apt-get install dataset-fashion-mnist` (files go to {DEBIAN_FMNIST_DIR}), or run "
        f"`fedhet prepare-data --dataset fmnist --download`"
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
