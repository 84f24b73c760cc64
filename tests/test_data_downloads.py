"""fedhet.data downloads (through a real local HTTP server) and archive/folder parsing."""

from __future__ import annotations

import functools
import hashlib
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedhet.data import (
    DOWNLOADS,
    Download,
    DownloadError,
    fetch,
    handplaced,
    load_dataset,
)
from fedhet.data.downloads import BASE_URL_ENV

CINIC_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


def _colour(label: int, k: int) -> tuple[int, int, int]:
    """A distinct flat colour per (class, sample), so labels can be checked from pixels."""
    return (20 * label + 5, 7 * k + 40, 250 - 20 * label)


def _encode(colour: tuple[int, int, int], size: int, fmt: str, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).convert(mode).save(buf, format=fmt)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_cinic(path: Path) -> None:
    """A tiny CINIC-10 archive: 10 classes × (2 train, 1 valid, 1 test) PNGs, one grayscale."""
    with tarfile.open(path, "w:gz") as tar:
        for label, cls in enumerate(CINIC_CLASSES):
            for split, count in (("train", 2), ("valid", 1), ("test", 1)):
                for k in range(count):
                    mode = "L" if (label, split, k) == (3, "train", 1) else "RGB"
                    _add(
                        tar,
                        f"CINIC-10/{split}/{cls}/img_{k}.png",
                        _encode(_colour(label, k), 32, "PNG", mode),
                    )
        _add(tar, "CINIC-10/README.md", b"CINIC-10 test archive\n")


def make_tinyimagenet(path: Path) -> list[str]:
    """A tiny Tiny-ImageNet archive: 200 wnids, 1 train and 1 val JPEG each; returns the wnids."""
    wnids = [f"n{9000 - i:08d}" for i in range(200)]  # listed in reverse order on purpose
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tiny-imagenet-200/wnids.txt", "\n".join(wnids) + "\n")
        annotations = []
        for i, wnid in enumerate(wnids):
            colour = ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256)
            zf.writestr(
                f"tiny-imagenet-200/train/{wnid}/images/{wnid}_0.JPEG", _encode(colour, 64, "JPEG")
            )
            zf.writestr(
                f"tiny-imagenet-200/train/{wnid}/{wnid}_boxes.txt", f"{wnid}_0.JPEG\t0\t0\t63\t63\n"
            )
            zf.writestr(f"tiny-imagenet-200/val/images/val_{i}.JPEG", _encode(colour, 64, "JPEG"))
            annotations.append(f"val_{i}.JPEG\t{wnid}\t0\t0\t63\t63")
        zf.writestr("tiny-imagenet-200/val/val_annotations.txt", "\n".join(annotations) + "\n")
        zf.writestr("tiny-imagenet-200/test/images/test_0.JPEG", _encode((0, 0, 0), 64, "JPEG"))
    return wnids


class _Handler(SimpleHTTPRequestHandler):
    """Serves the folder; `/truncated/<file>` announces twice the bytes it sends."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.startswith("/truncated/"):
            body = (Path(self.directory) / self.path.rsplit("/", 1)[1]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(2 * len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server(tmp_path) -> Iterator[tuple[str, Path]]:
    """A ThreadingHTTPServer on 127.0.0.1 serving a fresh folder; yields (base URL, folder)."""
    folder = tmp_path / "served"
    folder.mkdir()
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(folder))
    )
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", folder
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _register_fake(monkeypatch, name: str, archive: Path, **override) -> None:
    """Point DOWNLOADS[name] at an archive we made, with its real checksums."""
    data = archive.read_bytes()
    entry = Download(
        url=f"http://unreachable.invalid/{archive.name}",
        filename=archive.name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
    )
    monkeypatch.setitem(DOWNLOADS, name, Download(**{**entry.__dict__, **override}))


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.fixture
def cinic_served(server, monkeypatch) -> tuple[str, Path]:
    base, folder = server
    make_cinic(folder / "CINIC-10.tar.gz")
    _register_fake(monkeypatch, "cinic10", folder / "CINIC-10.tar.gz")
    return base, folder


def test_fetch_downloads_and_verifies(cinic_served, tmp_path):
    base, folder = cinic_served
    path = fetch("cinic10", tmp_path / "dest", base_url=base)
    assert path.read_bytes() == (folder / "CINIC-10.tar.gz").read_bytes()
    assert _leftovers(tmp_path / "dest") == ["CINIC-10.tar.gz"]
    assert (
        fetch("cinic10", tmp_path / "dest", base_url="http://127.0.0.1:9/") == path
    )  # present: no network


def test_checksum_mismatch_leaves_no_file(cinic_served, tmp_path, monkeypatch):
    base, _ = cinic_served
    monkeypatch.setitem(
        DOWNLOADS, "cinic10", Download(**{**DOWNLOADS["cinic10"].__dict__, "sha256": "0" * 64})
    )
    with pytest.raises(DownloadError, match=r"sha256 is [0-9a-f]{64}, expected 0{64}.*by hand"):
        fetch("cinic10", tmp_path / "dest", base_url=base)
    assert _leftovers(tmp_path / "dest") == []


def test_truncated_download_leaves_no_file(cinic_served, tmp_path):
    base, _ = cinic_served
    with pytest.raises(
        DownloadError, match=r"cut short.*fedhet prepare-data --dataset cinic10 --download"
    ):
        fetch("cinic10", tmp_path / "dest", base_url=f"{base}/truncated")
    assert _leftovers(tmp_path / "dest") == []


def test_missing_remote_file_leaves_no_file(server, tmp_path):
    base, _ = server
    with pytest.raises(DownloadError, match=r"404.*tiny-imagenet-200.zip"):
        fetch("tinyimagenet", tmp_path / "dest", base_url=base)
    assert _leftovers(tmp_path / "dest") == []


def test_cinic10_download_and_parse(cinic_served, tmp_path, monkeypatch):
    base, _ = cinic_served
    monkeypatch.setenv(BASE_URL_ENV, base)
    data = load_dataset("cinic10", tmp_path, {"download": True})
    assert data.class_names == CINIC_CLASSES
    assert tuple(data.x_train.shape) == (20, 3, 32, 32) and tuple(data.x_test.shape) == (
        10,
        3,
        32,
        32,
    )
    assert torch.bincount(data.y_train).tolist() == [2] * 10
    for x, y in zip(
        data.x_train, data.y_train, strict=True
    ):  # every image carries its class's colour
        assert abs(int(x[0, 0, 0]) - (20 * int(y) + 5)) <= 2 or int(y) == 3
    grey = data.x_train[(data.y_train == 3)][1]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])  # grayscale → RGB
    with_valid = load_dataset("cinic10", tmp_path, {"include_valid": True})  # archive now on disk
    assert len(with_valid.y_train) == 30 and len(with_valid.y_test) == 10


def test_hand_placed_archive_is_verified(cinic_served, tmp_path):
    _, folder = cinic_served
    raw = tmp_path / "raw" / "cinic10"
    raw.mkdir(parents=True)
    (raw / "CINIC-10.tar.gz").write_bytes((folder / "CINIC-10.tar.gz").read_bytes()[:-10])
    with pytest.raises(DownloadError, match="Delete"):
        load_dataset("cinic10", tmp_path)
    (raw / "CINIC-10.tar.gz").write_bytes((folder / "CINIC-10.tar.gz").read_bytes())
    assert len(load_dataset("cinic10", tmp_path).y_test) == 10


def test_tinyimagenet_download_and_parse(server, tmp_path, monkeypatch):
    base, folder = server
    wnids = make_tinyimagenet(folder / "tiny-imagenet-200.zip")
    _register_fake(monkeypatch, "tinyimagenet", folder / "tiny-imagenet-200.zip")
    monkeypatch.setenv(BASE_URL_ENV, base)
    data = load_dataset("tinyimagenet", tmp_path, {"download": True, "size": 32})
    assert data.class_names == tuple(sorted(wnids)) and data.num_classes == 200
    assert tuple(data.x_train.shape) == (200, 3, 32, 32) and tuple(data.x_test.shape) == (
        200,
        3,
        32,
        32,
    )
    assert sorted(data.y_train.tolist()) == list(range(200)) == sorted(data.y_test.tolist())
    for i, wnid in enumerate(wnids):  # each val image is labelled with its annotated class
        label = sorted(wnids).index(wnid)
        colour = torch.tensor(((i * 37) % 256, (i * 91) % 256, (i * 53) % 256)).float()
        pixel = data.x_test[data.y_test == label][0, :, 16, 16].float()
        assert (pixel - colour).abs().max() <= 8


def _write_png_folder(base: Path, classes: list[str], per_class: int, size: int) -> None:
    for label, cls in enumerate(classes):
        (base / cls).mkdir(parents=True)
        for k in range(per_class):
            Image.new("RGB", (size, size), _colour(label, k)).save(base / cls / f"{k}.png")


def test_hand_placed_digit_folders(tmp_path):
    base = tmp_path / "raw" / "synthdigits"
    digits = [str(d) for d in range(10)]
    _write_png_folder(base / "train", digits, 2, 30)  # resized to 32 on reading
    _write_png_folder(base / "test", digits, 1, 32)
    data = load_dataset("synthdigits", tmp_path, {"channels": 1})
    assert tuple(data.x_train.shape) == (20, 1, 32, 32) and tuple(data.x_test.shape) == (
        10,
        1,
        32,
        32,
    )
    assert data.class_names == tuple(digits) and data.y_test.tolist() == list(range(10))


def test_retina_sites_become_domains(tmp_path):
    for site in ("drishti", "rim"):
        for split in ("train", "test"):
            _write_png_folder(
                tmp_path / "raw" / "retina" / site / split, ["glaucoma", "normal"], 2, 50
            )
    data = load_dataset("retina", tmp_path, {"size": 24})
    assert data.domain_names == ("drishti", "rim") and data.num_classes == 2
    assert tuple(data.x_train.shape) == (8, 3, 24, 24)
    assert data.domain_train.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert torch.bincount(data.y_test).tolist() == [4, 4]


def test_cifar10c_reads_one_corruption_and_severity(tmp_path, monkeypatch):
    per = 4
    monkeypatch.setattr(handplaced, "CIFAR10C_PER_SEVERITY", per)
    train_x = np.zeros((6, 3, 32, 32), dtype=np.uint8)
    monkeypatch.setattr(
        handplaced,
        "cifar10_train",
        lambda root, download: (train_x, np.arange(6) % 10, tuple(CINIC_CLASSES)),
    )
    base = tmp_path / "raw" / "cifar10c" / "CIFAR-10-C"
    base.mkdir(parents=True)
    images = np.repeat(np.arange(5 * per, dtype=np.uint8), 32 * 32 * 3).reshape(5 * per, 32, 32, 3)
    np.save(base / "fog.npy", images)
    np.save(base / "labels.npy", np.arange(5 * per) % 10)
    data = load_dataset("cifar10c", tmp_path, {"corruption": "fog", "severity": 2})
    assert data.x_test[:, 0, 0, 0].tolist() == [4, 5, 6, 7] and data.y_test.tolist() == [4, 5, 6, 7]
    assert len(data.y_train) == 6 and data.mean == (0.4914, 0.4822, 0.4465)
    with pytest.raises(ValueError, match="corruption"):
        load_dataset("cifar10c", tmp_path, {"corruption": "rain"})


def make_femnist(path: Path, writers: dict[str, tuple[int, int]]) -> None:
    """A tiny `fed_emnist.tar.bz2`: per writer (train, test) example counts; the pixel value
    of every image encodes its writer, its label is the writer's index times 7 mod 62."""
    import h5py

    with tarfile.open(path, "w:bz2") as tar:
        for split, column in (("train", 0), ("test", 1)):
            buf = path.parent / f"fed_emnist_{split}.h5"
            with h5py.File(buf, "w") as h5:
                for k, (writer, counts) in enumerate(writers.items()):
                    n = counts[column]
                    if n == 0:
                        continue
                    group = h5.create_group(f"examples/{writer}")
                    group["pixels"] = np.full((n, 28, 28), (k + 1) / 10, dtype=np.float32)
                    group["label"] = np.full(n, (7 * k) % 62, dtype=np.int32)
            tar.add(buf, arcname=f"fed_emnist_{split}.h5")
            buf.unlink()


def test_femnist_download_parse_and_one_writer_per_client(server, tmp_path, monkeypatch):
    from fedhet.partition import make_partition

    base, folder = server
    writers = {"f0003_41": (4, 1), "f0001_07": (2, 2), "f0002_13": (3, 0)}
    make_femnist(folder / "fed_emnist.tar.bz2", writers)
    _register_fake(monkeypatch, "femnist", folder / "fed_emnist.tar.bz2")
    monkeypatch.setenv(BASE_URL_ENV, base)
    data = load_dataset("femnist", tmp_path, {"download": True})
    assert data.num_classes == 62 and tuple(data.x_train.shape) == (9, 1, 28, 28)
    assert data.domain_names == ("f0001_07", "f0002_13", "f0003_41")  # sorted writer ids
    assert torch.bincount(data.domain_train).tolist() == [2, 3, 4]
    assert torch.bincount(data.domain_test).tolist() == [2, 0, 1]  # the union of test examples
    for x, d in zip(data.x_train, data.domain_train, strict=True):  # each image is its writer's
        k = list(writers).index(data.domain_names[int(d)])
        assert int(x[0, 0, 0]) == round(255 * (k + 1) / 10)
    part = make_partition(data.domain_train.numpy(), "domain", 3, 0, num_classes=62,
                          domains=data.domain_train.numpy())
    for client, idx in enumerate(part.client_indices):
        assert set(data.domain_train[idx].tolist()) == {client}
        assert len(idx) == [2, 3, 4][client]


def test_femnist_stand_in_has_writers_with_their_own_label_skew(tmp_path):
    data = load_dataset("digits_writers", tmp_path, {"writers": 20})
    assert data.stands_in_for == "femnist" and len(data.domain_names) == 20
    assert torch.bincount(data.domain_train).tolist() == [8] * 20
    assert torch.bincount(data.domain_test).tolist() == [2] * 20
    counts = torch.zeros(20, 10)
    counts.index_put_((data.domain_train, data.y_train), torch.ones(len(data.y_train)),
                      accumulate=True)
    assert (counts > 0).sum(1).float().mean() < 6  # Dirichlet(0.5): a few digits per writer
