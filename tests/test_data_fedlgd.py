"""FedLGD's datasets: digits_domains' num_classes, the corruptions, digits_corrupted,
cifar10c_clients (on a tiny fake archive served over local HTTP), digits5 and the authors'
folder layouts."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedhet.data import (
    DOWNLOADS,
    DatasetNotAvailable,
    Download,
    DownloadError,
    dataset_key,
    describe,
    fetch,
    load_dataset,
)
from fedhet.data import digits5 as digits5_module
from fedhet.data.cifar10c import dirichlet_clients, share_counts
from fedhet.data.corruptions import CORRUPTIONS, apply_corruption
from fedhet.data.downloads import BASE_URL_ENV
from fedhet.data.handplaced import CORRUPTIONS as CIFAR10C_CORRUPTIONS

SMALL = {"train_per_class": 12, "test_per_class": 4}


def _tensor_sha(data) -> str:
    h = hashlib.sha256()
    for t in (data.x_train, data.y_train, data.x_test, data.y_test, data.domain_train,
              data.domain_test):
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def _per_client_class_counts(domains: torch.Tensor, labels: torch.Tensor, clients: int,
                             classes: int) -> torch.Tensor:
    counts = torch.zeros(clients, classes, dtype=torch.long)
    counts.index_put_((domains, labels), torch.ones_like(labels), accumulate=True)
    return counts


# -- digits_domains: num_classes ------------------------------------------------------------

# Computed before option num_classes existed: the option at its default keeps them.
KEYS_BEFORE = {
    "digits_domains-44b0fd205d4c": {},
    "digits_domains-527aae18c62e": SMALL,
    "digits_domains-58cd92fc719b": {"domains": ["mnist", "svhn", "usps", "synthdigits"]},
}
SMALL_TENSORS_SHA = "f8425d7ff3a37900da56b480ef9b4f4ead927fb45a0171ef65b3c5a1c70fb94c"


@pytest.mark.parametrize(("key", "options"), list(KEYS_BEFORE.items()))
def test_num_classes_at_default_keeps_the_cache_key(key, options):
    assert dataset_key("digits_domains", options) == key
    assert dataset_key("digits_domains", {**options, "num_classes": 10}) == key
    assert dataset_key("digits_domains", {**options, "num_classes": 2}) != key


def test_num_classes_at_default_keeps_the_tensors(tmp_path):
    data = load_dataset("digits_domains", tmp_path, {**SMALL, "num_classes": 10})
    assert _tensor_sha(data) == SMALL_TENSORS_SHA  # as built before the option existed


def test_two_classes_in_four_styles_stand_in_for_retina(tmp_path):
    options = {**SMALL, "num_classes": 2, "domains": ["mnist", "svhn", "usps", "synthdigits"],
               "size": 32, "stands_in_for": "retina"}
    data = load_dataset("digits_domains", tmp_path, options)
    assert data.num_classes == 2 and data.class_names == ("0", "1")
    assert describe("digits_domains", options)["num_classes"] == 2
    assert tuple(data.x_train.shape) == (12 * 2 * 4, 3, 32, 32)
    assert torch.bincount(data.y_train).tolist() == [48, 48]
    assert torch.bincount(data.domain_test).tolist() == [8] * 4
    assert data.domain_names == ("mnist", "svhn", "usps", "synthdigits")
    assert data.stands_in_for == "retina"


@pytest.mark.parametrize("bad", [1, 11, 2.0, "2"])
def test_num_classes_must_be_2_to_10(bad):
    with pytest.raises(ValueError, match="num_classes"):
        dataset_key("digits_domains", {"num_classes": bad})


# -- corruptions ----------------------------------------------------------------------------


def _photo(n: int = 4, size: int = 16) -> np.ndarray:
    """Smooth colour gradients with a bright square: uint8 [n, size, size, 3]."""
    t = np.linspace(0.1, 0.8, size)
    img = np.stack(np.broadcast_arrays(t[:, None], t[None, :], 0.5 + 0 * t[:, None]), -1)
    img[size // 4 : size // 2, size // 4 : size // 2] = 0.95
    x = np.stack([np.roll(img, k, axis=1) for k in range(n)])
    return np.rint(x * 255).astype(np.uint8)


def test_corruptions_cover_the_families_with_cifar10c_names():
    assert len(CORRUPTIONS) >= 12 and set(CORRUPTIONS) <= set(CIFAR10C_CORRUPTIONS)
    for family in ("noise", "blur"):
        assert sum(family in name for name in CORRUPTIONS) >= 3
    assert {"brightness", "contrast", "saturate", "pixelate", "jpeg_compression"} <= set(
        CORRUPTIONS
    )


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corruption_is_seeded_and_keeps_shape(name):
    x = _photo()
    out = [apply_corruption(name, x, s, np.random.default_rng(3)) for s in (1, 5)]
    again = apply_corruption(name, x, 5, np.random.default_rng(3))
    assert all(o.shape == x.shape and o.dtype == np.uint8 for o in out)
    assert np.array_equal(out[1], again)
    assert not np.array_equal(out[1], x) and not np.array_equal(out[0], out[1])


def test_corruption_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown corruption"):
        apply_corruption("rain", _photo(), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="severity"):
        apply_corruption("contrast", _photo(), 6, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"\[N, H, W, 3\]"):
        apply_corruption("contrast", _photo().transpose(0, 3, 1, 2), 1, np.random.default_rng(0))


# -- the split shared by cifar10c_clients and digits_corrupted ------------------------------


def test_share_counts_sum_and_follow_the_shares():
    counts = share_counts(np.array([0.5, 0.3, 0.2]), 11)
    assert counts.sum() == 11 and counts.tolist() == [6, 3, 2]


def test_dirichlet_clients_redraw_until_every_client_has_the_minimum():
    labels = np.repeat(np.arange(4), 90)
    parts = dirichlet_clients(labels, 3, 2.0, 25, 4, np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(360))  # a partition
    for part in parts:
        assert np.bincount(labels[part], minlength=4).min() >= 25
    with pytest.raises(ValueError, match="fewer than 3 clients"):
        dirichlet_clients(labels, 3, 2.0, 31, 4, np.random.default_rng(0))


# -- digits_corrupted -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def corrupted(tmp_path_factory):
    return load_dataset("digits_corrupted", tmp_path_factory.mktemp("dc"))


def test_digits_corrupted_has_three_clients_per_corruption(corrupted):
    opts = describe("digits_corrupted")["options"]
    assert corrupted.stands_in_for == "cifar10c_clients"
    assert len(opts["corruptions"]) == 4 and opts["min_per_class"] == 10
    assert corrupted.domain_names == tuple(
        f"{c}-{k}" for c in opts["corruptions"] for k in range(3)
    )
    assert corrupted.mean == (0.0, 0.0, 0.0) and corrupted.std == (1.0, 1.0, 1.0)
    assert tuple(corrupted.x_train.shape[1:]) == (3, 16, 16)
    assert len(corrupted.y_train) + len(corrupted.y_test) == 4 * 10 * 30 * 5
    _check_clients(corrupted, 12, 10, 0.1)


def _check_clients(data, clients: int, min_per_class: int, test_fraction: float) -> None:
    """Every client holds >= min_per_class of every class, split per class train/test."""
    train = _per_client_class_counts(data.domain_train, data.y_train, clients, 10)
    test = _per_client_class_counts(data.domain_test, data.y_test, clients, 10)
    total = train + test
    assert int(total.min()) >= min_per_class
    expected_test = (total.double() * test_fraction).round().long()
    assert torch.equal(test, expected_test)  # 90/10 within every (client, class)
    assert (total.sum(1) > 0).all()


def test_digits_corrupted_is_deterministic_and_split_per_corruption(corrupted, tmp_path):
    again = load_dataset("digits_corrupted", tmp_path)
    assert _tensor_sha(again) == _tensor_sha(corrupted)
    alone = load_dataset("digits_corrupted", tmp_path, {"corruptions": ["contrast"]})
    d = corrupted.domain_names.index("contrast-0")
    mask = (corrupted.domain_train >= d) & (corrupted.domain_train < d + 3)
    assert torch.equal(alone.x_train, corrupted.x_train[mask])  # the others do not matter
    reseeded = load_dataset("digits_corrupted", tmp_path,
                            {"corruptions": ["contrast"], "split_seed": 1})
    assert not torch.equal(torch.bincount(reseeded.domain_train),
                           torch.bincount(alone.domain_train))


def test_digits_corrupted_one_client_per_domain(corrupted):
    from fedhet.partition import make_partition

    part = make_partition(corrupted.y_train.numpy(), "domain", 12, 0, num_classes=10,
                          domains=corrupted.domain_train.numpy())
    for client, idx in enumerate(part.client_indices):
        assert set(corrupted.domain_train[idx].tolist()) == {client}


@pytest.mark.parametrize(("options", "match"), [
    ({"corruptions": ["rain"]}, "unknown corruption"),
    ({"corruptions": []}, "non-empty"),
    ({"severities": [0, 1]}, "severities"),
    ({"alpha": 0.0}, "alpha"),
    ({"test_fraction": 1.0}, "test_fraction"),
    ({"min_per_class": 60}, "min_per_class"),
])
def test_digits_corrupted_rejects_bad_options(tmp_path, options, match):
    with pytest.raises(ValueError, match=match):
        load_dataset("digits_corrupted", tmp_path, options)


# -- cifar10c_clients -----------------------------------------------------------------------

FAKE_PER_CLASS = 100  # per severity: 500 pooled per class, room for 3 clients × 100
FAKE_CORRUPTIONS = ("fog", "gaussian_noise")


def make_cifar10c(path: Path) -> None:
    """A tiny CIFAR-10-C.tar: 2 corruptions × 5 severities × 10 classes × 100 images of
    8×8 pixels; channel 0 = 40·severity, channel 1 = corruption index, channel 2 = label."""
    per_severity = 10 * FAKE_PER_CLASS
    labels = np.tile(np.arange(10), 5 * FAKE_PER_CLASS).astype(np.int64)
    severity = np.repeat(np.arange(1, 6), per_severity)
    with tarfile.open(path, "w") as tar:
        for i, name in enumerate(FAKE_CORRUPTIONS):
            x = np.zeros((5 * per_severity, 8, 8, 3), dtype=np.uint8)
            x[..., 0] = (40 * severity)[:, None, None]
            x[..., 1] = 100 + i
            x[..., 2] = (10 * labels)[:, None, None]
            _add_npy(tar, f"CIFAR-10-C/{name}.npy", x)
        _add_npy(tar, "CIFAR-10-C/labels.npy", labels)


def _add_npy(tar: tarfile.TarFile, name: str, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, array)
    info = tarfile.TarInfo(name)
    info.size = buf.tell()
    buf.seek(0)
    tar.addfile(info, buf)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _serving(folder: Path, monkeypatch) -> Iterator[None]:
    """`folder` served over local HTTP as the download base URL, until the block ends."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0),
                                functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    monkeypatch.setenv(BASE_URL_ENV, f"http://127.0.0.1:{httpd.server_address[1]}")
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def served(tmp_path, monkeypatch) -> Iterator[Path]:
    """A local HTTP server with a fake CIFAR-10-C.tar, registered with its real md5/size."""
    folder = tmp_path / "served"
    folder.mkdir()
    archive = folder / "CIFAR-10-C.tar"
    make_cifar10c(archive)
    data = archive.read_bytes()
    entry = DOWNLOADS["cifar10c_clients"]
    monkeypatch.setitem(DOWNLOADS, "cifar10c_clients", Download(
        url=entry.url, filename=entry.filename, md5=hashlib.md5(data).hexdigest(),
        size=len(data)))
    with _serving(folder, monkeypatch):
        yield archive


def test_cifar10c_download_entry_is_the_zenodo_archive():
    entry = DOWNLOADS["cifar10c_clients"]
    assert entry.url == "https://zenodo.org/records/2535967/files/CIFAR-10-C.tar?download=1"
    assert entry.filename == "CIFAR-10-C.tar"
    assert entry.size == 2_918_471_680 and entry.md5 == "56bf5dcef84df0e2308c6dcbcbbd8499"


def test_cifar10c_download_is_checked_by_size_and_md5(served, tmp_path, monkeypatch):
    good = DOWNLOADS["cifar10c_clients"]
    for field, wrong in (("md5", "0" * 32), ("size", good.size + 1)):
        monkeypatch.setitem(DOWNLOADS, "cifar10c_clients",
                            Download(**{**good.__dict__, field: wrong}))
        with pytest.raises(DownloadError, match=f"{field} is"):
            fetch("cifar10c_clients", tmp_path / "dest")
        assert not list((tmp_path / "dest").iterdir())
    monkeypatch.setitem(DOWNLOADS, "cifar10c_clients", good)
    assert fetch("cifar10c_clients", tmp_path / "dest").read_bytes() == served.read_bytes()


CORR = {"corruptions": list(FAKE_CORRUPTIONS)}


def test_cifar10c_clients_split(served, tmp_path):
    data = load_dataset("cifar10c_clients", tmp_path, {**CORR, "download": True})
    assert data.domain_names == ("fog-0", "fog-1", "fog-2",
                                 "gaussian_noise-0", "gaussian_noise-1", "gaussian_noise-2")
    assert tuple(data.x_train.shape[1:]) == (3, 28, 28) and data.num_classes == 10
    assert data.mean == (0.0, 0.0, 0.0) and data.std == (1.0, 1.0, 1.0)
    assert len(data.y_train) + len(data.y_test) == 2 * 5 * 10 * FAKE_PER_CLASS
    _check_clients(data, 6, 100, 0.1)
    for x, d, split in ((data.x_train, data.domain_train, "train"),
                        (data.x_test, data.domain_test, "test")):
        assert torch.equal(x[:, 1, 0, 0].long() - 100, d // 3), split  # own corruption only
    assert torch.equal(data.x_train[:, 2, 0, 0].long(), 10 * data.y_train)  # labels kept
    assert set(data.x_train[:, 0, 0, 0].tolist()) == {40, 80, 120, 160, 200}  # pooled


def test_cifar10c_clients_is_deterministic_and_reads_the_extracted_folder(served, tmp_path):
    first = load_dataset("cifar10c_clients", tmp_path / "a", {**CORR, "download": True})
    again = load_dataset("cifar10c_clients", tmp_path / "a", {**CORR, "split_seed": 0})
    folder = tmp_path / "b" / "raw" / "cifar10c"
    folder.mkdir(parents=True)
    with tarfile.open(served) as tar:
        tar.extractall(folder, filter="data")
    extracted = load_dataset("cifar10c_clients", tmp_path / "b", CORR)
    assert _tensor_sha(first) == _tensor_sha(again) == _tensor_sha(extracted)
    other = load_dataset("cifar10c_clients", tmp_path / "b", {**CORR, "split_seed": 1})
    assert _tensor_sha(other) != _tensor_sha(first)


def test_cifar10c_clients_keeps_the_chosen_severities(served, tmp_path):
    data = load_dataset("cifar10c_clients", tmp_path, {
        "corruptions": ["gaussian_noise"], "severities": [2, 5], "min_per_class": 20,
        "alpha": 5.0, "size": 8, "download": True,
    })
    assert set(data.x_train[:, 0, 0, 0].tolist()) == {80, 200}
    assert len(data.y_train) + len(data.y_test) == 2 * 10 * FAKE_PER_CLASS
    _check_clients(data, 3, 20, 0.1)
    with pytest.raises(ValueError, match="unknown corruption"):
        load_dataset("cifar10c_clients", tmp_path, {"corruptions": ["gaussian"]})


def test_cifar10c_clients_missing_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset("cifar10c_clients", tmp_path)
    message = str(err.value)
    assert "zenodo.org/records/2535967" in message and "--download" in message
    assert str(tmp_path / "raw" / "cifar10c_clients" / "CIFAR-10-C.tar") in message
    assert "raw/cifar10c/CIFAR-10-C" in message


# -- digits5, and the FedLGD authors' folder layouts ----------------------------------------


def _write_digits(base: Path, per_class: int, size: int, shade: int) -> None:
    for c in range(10):
        (base / str(c)).mkdir(parents=True)
        for k in range(per_class):
            Image.new("RGB", (size, size), (shade, 10 * c, k)).save(base / str(c) / f"{k}.png")


def _fake_torchvision(name, root, train, download):
    """Small fake MNIST (1×28), SVHN (3×32), USPS (1×16): pixel = 50·domain + 5·label."""
    d = digits5_module.DOMAINS.index(name)
    channels, size = {"mnist": (1, 28), "svhn": (3, 32), "usps": (1, 16)}[name]
    n = 20 if train else 10
    y = np.arange(n) % 10
    x = np.broadcast_to((50 * d + 5 * y)[:, None, None, None], (n, channels, size, size))
    return np.ascontiguousarray(x, dtype=np.uint8), y.astype(np.int64), tuple("0123456789")


def test_digits5_stacks_five_domains(tmp_path, monkeypatch):
    monkeypatch.setattr(digits5_module, "missing_files", lambda name, root: [])
    monkeypatch.setattr(digits5_module, "torchvision_split", _fake_torchvision)
    raw = tmp_path / "raw"
    _write_digits(raw / "synthetic_digits" / "imgs_train", 2, 32, 150)  # the authors' layout
    _write_digits(raw / "synthetic_digits" / "imgs_valid", 1, 32, 150)
    _write_digits(raw / "mnistm" / "train", 3, 28, 200)
    _write_digits(raw / "mnistm" / "test", 1, 28, 200)
    data = load_dataset("digits5", tmp_path)
    assert data.domain_names == ("mnist", "svhn", "usps", "synthdigits", "mnistm")
    assert tuple(data.x_train.shape) == (20 + 20 + 20 + 20 + 30, 3, 28, 28)
    assert torch.bincount(data.domain_train).tolist() == [20, 20, 20, 20, 30]
    assert torch.bincount(data.domain_test).tolist() == [10, 10, 10, 10, 10]
    assert data.mean == (0.5, 0.5, 0.5) and data.std == (0.5, 0.5, 0.5)
    for d in range(3):  # torchvision parts: grey replicated to RGB, resized, labels kept
        x, y = data.x_train[data.domain_train == d], data.y_train[data.domain_train == d]
        assert torch.equal(x[:, :, 14, 14].long(), (50 * d + 5 * y)[:, None].expand(-1, 3))
    for d, shade in ((3, 150), (4, 200)):  # image folders: class = folder name
        x, y = data.x_test[data.domain_test == d], data.y_test[data.domain_test == d]
        assert (x[:, 0, 14, 14] == shade).all() and torch.equal(x[:, 1, 14, 14].long(), 10 * y)


def test_digits5_missing_says_where_each_domain_goes(tmp_path):
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset("digits5", tmp_path)
    message = str(err.value)
    raw = tmp_path / "raw"
    for hint in (f"{raw}/synthdigits/{{train,test}}",
                 f"{raw}/synthetic_digits/{{imgs_train,imgs_valid}}",
                 f"{raw}/mnistm/{{train,test}}", "59,001/9,001",
                 "fedhet prepare-data --dataset digits5", "--dataset mnist", "--download"):
        assert hint in message
    for name in ("mnist", "svhn", "usps", "synthdigits", "mnistm"):
        assert f"needs {name}" in message


def test_synthdigits_reads_the_authors_layout(tmp_path):
    raw = tmp_path / "raw" / "synthetic_digits"
    _write_digits(raw / "imgs_train", 2, 32, 90)
    _write_digits(raw / "imgs_valid", 1, 32, 90)
    data = load_dataset("synthdigits", tmp_path)
    assert tuple(data.x_train.shape) == (20, 3, 32, 32) and data.y_test.tolist() == list(range(10))


def test_retina_reads_the_authors_layout_in_their_site_order(tmp_path):
    base = tmp_path / "raw" / "retina_balanced"
    for d, site in enumerate(("Drishti", "kaggle_arima", "RIM", "REFUGE")):
        for split, n in (("Training", 3), ("Testing", 1)):
            for c, cls in enumerate(("glaucoma", "normal")):
                (base / site / split / cls).mkdir(parents=True)
                for k in range(n):
                    Image.new("RGB", (40, 40), (50 * d, 100 * c, k)).save(
                        base / site / split / cls / f"{k}.png")
    data = load_dataset("retina", tmp_path, {"size": 24})
    assert data.domain_names == ("Drishti", "kaggle_arima", "RIM", "REFUGE")  # the paper's
    assert data.class_names == ("glaucoma", "normal")
    assert torch.bincount(data.domain_train).tolist() == [6] * 4
    assert torch.bincount(data.domain_test).tolist() == [2] * 4
    assert torch.equal(data.x_test[:, 0, 5, 5].long(), 50 * data.domain_test)
    assert torch.equal(data.x_test[:, 1, 5, 5].long(), 100 * data.y_test)


# -- digits5: the public MNIST-M, downloaded and checked -------------------------------------

def _mnistm_archive(path: Path, split: str, n: int, shade: int) -> None:
    """A tiny mnist_m_<split>.pt.tar.gz: n RGB 28×28 images, pixel (shade, 10·label, 7)."""
    labels = torch.arange(n) % 10
    images = torch.zeros(n, 28, 28, 3, dtype=torch.uint8)
    images[..., 0], images[..., 2] = shade, 7
    images[..., 1] = (10 * labels)[:, None, None].to(torch.uint8)
    buf = io.BytesIO()
    torch.save((images, labels), buf)
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"mnist_m_{split}.pt")
        info.size = buf.tell()
        buf.seek(0)
        tar.addfile(info, buf)


@pytest.fixture
def mnistm_served(tmp_path, monkeypatch) -> Iterator[Path]:
    """A local HTTP server with fake MNIST-M archives, registered with their md5s."""
    folder = tmp_path / "served"
    folder.mkdir()
    for split, n in (("train", 30), ("test", 20)):
        name = f"mnistm_{split}"
        entry = DOWNLOADS[name]
        _mnistm_archive(folder / entry.filename, split, n, 220)
        md5 = hashlib.md5((folder / entry.filename).read_bytes()).hexdigest()
        monkeypatch.setitem(DOWNLOADS, name, Download(**{**entry.__dict__, "md5": md5}))
    monkeypatch.setattr(digits5_module, "missing_files", lambda name, root: [])
    monkeypatch.setattr(digits5_module, "torchvision_split", _fake_torchvision)
    with _serving(folder, monkeypatch):
        yield folder


def test_mnistm_download_entries_are_the_public_archives_checked_by_md5():
    for split, md5 in (("train", "191ed53db9933bd85cc9700558847391"),
                       ("test", "e11cb4d7fff76d7ec588b1134907db59")):
        entry = DOWNLOADS[f"mnistm_{split}"]
        assert entry.url == ("https://github.com/liyxi/mnist-m/releases/download/data/"
                             f"mnist_m_{split}.pt.tar.gz")
        assert entry.md5 == md5 and entry.dataset == "digits5"


def test_digits5_downloads_the_public_mnistm_when_its_folders_are_absent(mnistm_served,
                                                                        tmp_path):
    _write_digits(tmp_path / "raw" / "synthdigits" / "train", 2, 32, 150)
    _write_digits(tmp_path / "raw" / "synthdigits" / "test", 1, 32, 150)
    data = load_dataset("digits5", tmp_path, {"download": True})
    assert torch.bincount(data.domain_train).tolist() == [20, 20, 20, 20, 30]
    assert torch.bincount(data.domain_test).tolist() == [10, 10, 10, 10, 20]
    for x, y, d in ((data.x_train, data.y_train, data.domain_train),
                    (data.x_test, data.y_test, data.domain_test)):
        mnistm = d == 4  # channels last → first, labels kept
        assert (x[mnistm, 0] == 220).all() and (x[mnistm, 2] == 7).all()
        assert torch.equal(x[mnistm, 1, 5, 5].long(), 10 * y[mnistm])
    for split in ("train", "test"):  # the verified archives stay for the next build
        assert (tmp_path / "raw" / "mnistm" / DOWNLOADS[f"mnistm_{split}"].filename).is_file()


def test_a_corrupt_mnistm_download_leaves_nothing_and_says_what_to_run(mnistm_served,
                                                                       tmp_path, monkeypatch):
    entry = DOWNLOADS["mnistm_test"]
    monkeypatch.setitem(DOWNLOADS, "mnistm_test", Download(**{**entry.__dict__, "md5": "0" * 32}))
    _write_digits(tmp_path / "raw" / "synthdigits" / "train", 2, 32, 150)
    _write_digits(tmp_path / "raw" / "synthdigits" / "test", 1, 32, 150)
    with pytest.raises(DownloadError, match="md5 is") as err:
        load_dataset("digits5", tmp_path, {"download": True})
    assert "fedhet prepare-data --dataset digits5 --download" in str(err.value)
    assert sorted(p.name for p in (tmp_path / "raw" / "mnistm").iterdir()) == [
        DOWNLOADS["mnistm_train"].filename]


def test_hand_placed_mnistm_folders_come_before_the_public_copy(mnistm_served, tmp_path):
    (tmp_path / "raw" / "mnistm").mkdir(parents=True)
    for split in ("train", "test"):  # archives on disk, but the authors' folders win
        _mnistm_archive(tmp_path / "raw" / "mnistm" / DOWNLOADS[f"mnistm_{split}"].filename,
                        split, 10, 220)
    _write_digits(tmp_path / "raw" / "synthdigits" / "train", 2, 32, 150)
    _write_digits(tmp_path / "raw" / "synthdigits" / "test", 1, 32, 150)
    _write_digits(tmp_path / "raw" / "mnistm" / "train", 3, 28, 200)
    _write_digits(tmp_path / "raw" / "mnistm" / "test", 1, 28, 200)
    data = load_dataset("digits5", tmp_path)
    assert (data.x_train[data.domain_train == 4, 0] == 200).all()
