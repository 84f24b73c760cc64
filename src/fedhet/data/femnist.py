"""FEMNIST as FedImpro uses it: TensorFlow Federated's federated EMNIST (3,400 writers, 62
classes, 28×28 grey), read from its published archive `fed_emnist.tar.bz2`.

The archive holds `fed_emnist_train.h5` and `fed_emnist_test.h5`; each has one group per
writer, `examples/<writer>/{pixels, label}`, with float pixels in [0, 1]. Writers become
domains (`domain_train` / `domain_test`, names = writer ids, in sorted order), so the `domain`
partition with num_clients = 3,400 gives each client one writer. The test set is the union of
every writer's test examples (as FedML). Pixels are stored as round(255·p) with their polarity
unchanged (as FedML: no inversion).
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.archives import locate_archive
from fedhet.data.core import DATASETS, Arrays, DatasetSpec, fixed_sizes
from fedhet.data.downloads import DOWNLOADS, Download

SPLIT_FILES = {"train": "fed_emnist_train.h5", "test": "fed_emnist_test.h5"}
CLASS_NAMES = tuple("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")

DOWNLOADS["femnist"] = Download(
    url="https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2",
    filename="fed_emnist.tar.bz2",
    sha256="fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
)


def read_writers(path: Path, writers: list[str] | None = None
                 ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Writer ids (sorted), uint8 images `[N, 1, 28, 28]`, labels and writer index per image
    of one HDF5 file; `writers` fixes the writer order (the training file's)."""
    import h5py

    with h5py.File(path, "r") as h5:
        group = h5["examples"]
        names = sorted(group) if writers is None else writers
        xs, ys, ws = [], [], []
        for k, name in enumerate(names):
            if name not in group:
                continue  # a writer without test examples
            pixels = np.asarray(group[name]["pixels"], dtype=np.float32)
            xs.append(np.rint(np.clip(pixels, 0, 1) * 255).astype(np.uint8)[:, None])
            ys.append(np.asarray(group[name]["label"], dtype=np.int64).reshape(-1))
            ws.append(np.full(len(ys[-1]), k, dtype=np.int64))
    if not xs:
        raise ValueError(f"{path}: no writer groups under 'examples/', not a FEMNIST file")
    return names, np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)


def _build_femnist(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    archive = locate_archive("femnist", root, options["download"])
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        files = {}
        with tarfile.open(archive, "r|*") as tar:  # one pass over the compressed stream
            for member in tar:
                name = Path(member.name).name
                if member.isfile() and name in SPLIT_FILES.values():
                    files[name] = Path(tmp) / name
                    with tar.extractfile(member) as src, open(files[name], "wb") as dst:
                        while block := src.read(1 << 20):
                            dst.write(block)
        missing = [f for f in SPLIT_FILES.values() if f not in files]
        if missing:
            raise ValueError(f"{archive}: {', '.join(missing)} not in the archive")
        writers, x_train, y_train, w_train = read_writers(files[SPLIT_FILES["train"]])
        _, x_test, y_test, w_test = read_writers(files[SPLIT_FILES["test"]], writers)
    t = torch.from_numpy
    return Arrays(t(x_train), t(y_train), t(x_test), t(y_test), class_names=CLASS_NAMES,
                  domain_train=t(w_train), domain_test=t(w_test), domain_names=tuple(writers))


DATASETS.add(
    "femnist",
    DatasetSpec(
        name="femnist",
        build=_build_femnist,
        num_classes=62,
        channels=1,
        size=28,
        source="download",
        description="FEMNIST (TensorFlow Federated): 3,400 writers, 62 classes, 28x28 grey; "
        "writer = domain",
        options={"channels": 1, "size": 28, "download": False},
        choices={"channels": (1, 3)},
        # TensorFlow Federated's emnist.load_data(only_digits=False): 671,585 / 77,483 examples
        sizes=fixed_sizes(671_585, 77_483),
    ),
)
