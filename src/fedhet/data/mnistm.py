"""The public copy of MNIST-M (59,001 / 9,001 images) from its two verified archives.

The paper's DIGITS used the authors' own MNIST-M (10,331 / 209 images), placed by hand as
image folders (`fedhet.data.handplaced`); where those are absent, `digits5` reads this copy:
`mnist_m_{train,test}.pt.tar.gz` in `<root>/raw/mnistm/`, fetched with option
`download: true` (`fedhet.data.downloads`, checked by md5) or saved there by hand. Each
archive holds one `mnist_m_<split>.pt`, a `(uint8 [N, 28, 28, 3], labels)` tuple, read
without unpacking it to disk.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

import numpy as np

from fedhet.data.core import DatasetNotAvailable
from fedhet.data.downloads import DOWNLOADS, check_file, fetch

SPLITS = ("train", "test")


def archive_paths(root: Path) -> dict[str, Path]:
    """Where each split's archive lives below `root`."""
    folder = Path(root) / "raw" / "mnistm"
    return {split: folder / DOWNLOADS[f"mnistm_{split}"].filename for split in SPLITS}


def archives_on_disk(root: Path) -> bool:
    return all(path.is_file() for path in archive_paths(root).values())


def read_split(path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 `[N, 3, 28, 28]` and int64 labels of one archive."""
    import torch

    member_name = f"mnist_m_{split}.pt"
    with tarfile.open(path) as tar:
        member = next((m for m in tar if m.isfile()
                       and PurePosixPath(m.name).name == member_name), None)
        if member is None:
            raise DatasetNotAvailable(f"{path} holds no {member_name}; is it MNIST-M's "
                                      f"{DOWNLOADS[f'mnistm_{split}'].filename}?")
        images, labels = torch.load(io.BytesIO(tar.extractfile(member).read()),
                                    weights_only=True)
    x = np.asarray(images, dtype=np.uint8)
    if x.ndim != 4 or x.shape[-1] != 3 or len(x) != len(labels):
        raise DatasetNotAvailable(f"{path}: expected {len(labels)} RGB images "
                                  f"[N, H, W, 3], found shape {tuple(x.shape)}")
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)), np.asarray(labels, dtype=np.int64)


def read_public_mnistm(root: Path, download: bool) -> tuple[np.ndarray, ...]:
    """Train images, train labels, test images, test labels of the public copy, each
    archive verified (and fetched first when `download`)."""
    out: list[np.ndarray] = []
    for split, path in archive_paths(root).items():
        if download:
            path = fetch(f"mnistm_{split}", path.parent)
        else:
            check_file(f"mnistm_{split}", path)
        out.extend(read_split(path, split))
    return tuple(out)
