"""fedhet.data: registry, options, cache, stand-ins and the real Fashion-MNIST path."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedhet.data import (
    DATASETS,
    CacheError,
    DatasetNotAvailable,
    cache_path,
    dataset_key,
    describe,
    load_dataset,
    prepare_dataset,
    seed_fmnist_from,
)
from fedhet.data.core import file_sha256
from fedhet.data.fmnist import DEBIAN_FMNIST_DIR, FMNIST_SHA256, fmnist_raw_dir
from fedhet.data.imageops import channel_stats, conform
from fedhet.data.standins import split_indices
from fedhet.registry import UnknownNameError

SMALL = {"train_per_class": 12, "test_per_class": 4}


def test_import_loads_neither_torch_nor_torchvision():
    code = "import sys, fedhet.data; print('torch' in sys.modules, 'torchvision' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_registry_lists_the_datasets():
    for name in (
        "cifar10",
        "cifar100",
        "fmnist",
        "svhn",
        "mnist",
        "usps",
        "cinic10",
        "tinyimagenet",
        "digits10",
        "digits100",
        "digits_domains",
        "synthdigits",
        "mnistm",
        "retina",
        "cifar10c",
    ):
        assert name in DATASETS


def test_unknown_dataset_lists_valid_names(tmp_path):
    with pytest.raises(UnknownNameError) as err:
        load_dataset("cifar11", tmp_path)
    assert (
        "cifar11" in str(err.value) and "cifar10" in str(err.value) and "digits10" in str(err.value)
    )


def test_unknown_option_names_key_and_valid_ones(tmp_path):
    with pytest.raises(
        ValueError, match=r"unknown option 'colour'.*valid options: channels, download, size"
    ):
        load_dataset("cifar10", tmp_path, {"colour": 3})


@pytest.mark.parametrize(
    "options", [{"channels": 2}, {"size": 0}, {"size": 16.5}, {"train_per_class": True}]
)
def test_bad_option_values_are_rejected(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        dataset_key("digits10", options)


def test_dataset_key_is_filename_safe_and_tracks_content_options():
    key = dataset_key("digits10")
    assert re.fullmatch(r"digits10-[0-9a-f]{12}", key)
    assert dataset_key("digits10", {"channels": 1, "size": 16}) == key  # defaults spelled out
    assert dataset_key("digits10", {"stands_in_for": "fmnist"}) == key  # metadata only
    assert dataset_key("digits10", {"size": 32}) != key
    assert dataset_key("fmnist", {"download": True}) == dataset_key("fmnist")


def test_describe_reports_classes_and_shape():
    info = describe("digits100", {"channels": 3, "size": 32})
    assert info["num_classes"] == 100 and info["shape"] == (3, 32, 32)
    assert info["stands_in_for"] == "cifar100"
    assert describe("fmnist")["shape"] == (1, 28, 28)
    assert describe("tinyimagenet")["num_classes"] == 200


def test_standin_is_deterministic(tmp_path):
    a = prepare_dataset("digits10", tmp_path / "a", SMALL)
    b = prepare_dataset("digits10", tmp_path / "b", SMALL)
    assert a.read_bytes() == b.read_bytes()
    da, db = (
        load_dataset("digits10", tmp_path / "a", SMALL),
        load_dataset("digits10", tmp_path / "b", SMALL),
    )
    assert da.checksum == db.checksum == file_sha256(a)


def test_standin_train_and_test_come_from_disjoint_digits():
    from sklearn.datasets import load_digits

    target = load_digits().target
    parts = split_indices(target)
    train, test = np.concatenate(parts["train"]), np.concatenate(parts["test"])
    assert not set(train) & set(test)
    assert len(train) + len(test) == len(target) == 1797
    assert all(len(t) > 0 for t in parts["test"])


@pytest.mark.parametrize(
    ("name", "options", "shape", "classes"),
    [
        ("digits10", {}, (1, 16, 16), 10),
        ("digits10", {"channels": 3, "size": 32}, (3, 32, 32), 10),
        ("digits100", {"size": 28}, (1, 28, 28), 100),
        ("digits_domains", {}, (3, 16, 16), 10),
        ("digits_domains", {"channels": 1}, (1, 16, 16), 10),
    ],
)
def test_standin_shapes_and_class_counts(tmp_path, name, options, shape, classes):
    data = load_dataset(name, tmp_path, {**SMALL, **options})
    domains = 5 if name == "digits_domains" else 1
    assert data.x_train.dtype == torch.uint8 and data.y_train.dtype == torch.int64
    assert tuple(data.x_train.shape) == (12 * classes * domains, *shape)
    assert tuple(data.x_test.shape) == (4 * classes * domains, *shape)
    assert data.num_classes == classes and (data.in_channels, data.image_size) == shape[:2]
    assert torch.bincount(data.y_train, minlength=classes).tolist() == [12 * domains] * classes
    assert torch.bincount(data.y_test, minlength=classes).tolist() == [4 * domains] * classes
    assert len(data.mean) == len(data.std) == shape[0]
    assert all(0 < m < 1 for m in data.mean) and all(0 < s < 1 for s in data.std)
    assert data.stands_in_for is not None and data.checksum


def test_standin_defaults_and_stands_in_for(tmp_path):
    data = load_dataset("digits10", tmp_path, {"stands_in_for": "fmnist"})
    assert tuple(data.x_train.shape) == (3000, 1, 16, 16) and len(data.y_test) == 1000
    assert data.stands_in_for == "fmnist" and data.domain_train is None
    assert load_dataset("digits10", tmp_path).stands_in_for == "cifar10"


def test_digits_domains_fill_domain_fields(tmp_path):
    data = load_dataset("digits_domains", tmp_path, SMALL)
    assert data.domain_names == ("mnist", "svhn", "usps", "synthdigits", "mnistm")
    assert data.domain_train.dtype == torch.int64 and len(data.domain_train) == len(data.y_train)
    assert torch.bincount(data.domain_train).tolist() == [120] * 5
    assert torch.bincount(data.domain_test).tolist() == [40] * 5
    # the styles differ: mean brightness per domain is not all the same
    means = [data.x_train[data.domain_train == d].float().mean().item() for d in range(5)]
    assert max(means) - min(means) > 20


def test_colour_standin_differs_per_class(tmp_path):
    data = load_dataset("digits10", tmp_path, {**SMALL, "channels": 3})
    per_class = torch.stack(
        [data.x_train[data.y_train == c].float().mean(dim=(0, 2, 3)) for c in range(10)]
    )
    assert torch.cdist(per_class, per_class).fill_diagonal_(1e9).min() > 1.0


def test_cache_round_trip_reuses_the_file(tmp_path):
    first = load_dataset("digits100", tmp_path, SMALL)
    path = cache_path("digits100", tmp_path, SMALL)
    stamp = path.stat().st_mtime_ns
    second = load_dataset("digits100", tmp_path, SMALL)
    assert path.stat().st_mtime_ns == stamp
    assert torch.equal(first.x_train, second.x_train) and torch.equal(first.y_test, second.y_test)
    assert first.checksum == second.checksum
    assert Path(str(path) + ".sha256").read_text().split() == [first.checksum, path.name]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_corrupt_cache_file_is_detected(tmp_path):
    path = prepare_dataset("digits10", tmp_path, SMALL)
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(
        CacheError, match=r"corrupt.*sha256.*fedhet prepare-data --dataset digits10"
    ):
        load_dataset("digits10", tmp_path, SMALL)


def test_missing_checksum_means_not_cached(tmp_path):
    path = prepare_dataset("digits10", tmp_path, SMALL)
    Path(str(path) + ".sha256").unlink()
    data = load_dataset("digits10", tmp_path, SMALL)
    assert data.checksum == file_sha256(path)


def test_conform_replicates_resizes_and_reduces_channels():
    gray = (
        torch.arange(2 * 28 * 28, dtype=torch.int64)
        .remainder(256)
        .to(torch.uint8)
        .view(2, 1, 28, 28)
    )
    rgb = conform(gray, 3, 32)
    assert rgb.shape == (2, 3, 32, 32) and rgb.dtype == torch.uint8
    assert torch.equal(rgb[:, 0], rgb[:, 2])
    back = conform(rgb, 1, 32)
    assert back.shape == (2, 1, 32, 32) and (back.int() - rgb[:, :1].int()).abs().max() <= 1
    flat = torch.full((3, 3, 4, 4), 51, dtype=torch.uint8)
    mean, std = channel_stats(flat)
    assert mean == (0.2, 0.2, 0.2) and std == (0.0, 0.0, 0.0)


def test_missing_torchvision_dataset_says_how_to_fetch(tmp_path):
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset("mnist", tmp_path)
    message = str(err.value)
    assert "fedhet prepare-data --dataset mnist" in message and "--download" in message
    assert str(tmp_path / "raw") in message
    assert not list(tmp_path.glob("*.pt"))


@pytest.mark.parametrize("name", ["svhn", "cifar100", "usps"])
def test_missing_datasets_name_their_files(tmp_path, name):
    with pytest.raises(DatasetNotAvailable, match=f"--dataset {name}"):
        prepare_dataset(name, tmp_path)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("synthdigits", "synthdigits/{train,test}"),
        ("mnistm", "mnistm/{train,test}"),
        ("retina", "retina/<site>"),
        ("cifar10c", "zenodo.org"),
    ],
)
def test_hand_placed_datasets_say_where_files_go(tmp_path, name, hint):
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset(name, tmp_path)
    assert hint in str(err.value) and f"fedhet prepare-data --dataset {name}" in str(err.value)


def test_seed_fmnist_rejects_wrong_content(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in FMNIST_SHA256:
        with gzip.open(source / f"{name}.gz", "wb") as fh:
            fh.write(b"not fashion-mnist")
    with pytest.raises(DatasetNotAvailable, match="not the standard Fashion-MNIST"):
        seed_fmnist_from(source, tmp_path / "root")
    assert not list(fmnist_raw_dir(tmp_path / "root").iterdir())


def test_seed_fmnist_missing_source_says_how_to_install(tmp_path):
    with pytest.raises(DatasetNotAvailable, match="apt-get install dataset-fashion-mnist"):
        seed_fmnist_from(tmp_path / "nowhere", tmp_path / "root")


@pytest.mark.skipif(
    not DEBIAN_FMNIST_DIR.is_dir(),
    reason=f"{DEBIAN_FMNIST_DIR} absent: apt-get install dataset-fashion-mnist",
)
def test_real_fmnist_through_torchvision(tmp_path):
    data = load_dataset("fmnist", tmp_path)  # seeds the raw folder from the Debian package
    raw = fmnist_raw_dir(tmp_path)
    assert all(file_sha256(raw / name) == digest for name, digest in FMNIST_SHA256.items())
    assert tuple(data.x_train.shape) == (60000, 1, 28, 28) and tuple(data.x_test.shape) == (
        10000,
        1,
        28,
        28,
    )
    assert data.y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert torch.bincount(data.y_test).tolist() == [1000] * 10
    assert data.mean == pytest.approx((0.2860,), abs=1e-3) and data.std == pytest.approx(
        (0.3530,), abs=1e-3
    )
    assert data.stands_in_for is None and data.class_names[0] == "T-shirt/top"
    assert data.checksum == file_sha256(cache_path("fmnist", tmp_path))


def test_the_dataset_commands_list_and_seed(tmp_path, capsys):
    from fedhet.cli import main

    assert main(["datasets"]) == 0
    assert "digits_domains" in capsys.readouterr().out
    source = tmp_path / "src"
    source.mkdir()
    for name in FMNIST_SHA256:
        (source / name).write_bytes(b"x")
    assert main(["seed-fmnist", str(source), "--root", str(tmp_path / "root")]) == 2
    assert "not the standard Fashion-MNIST" in capsys.readouterr().err
    if DEBIAN_FMNIST_DIR.is_dir():
        assert main(["seed-fmnist", "--root", str(tmp_path / "root")]) == 0
        assert capsys.readouterr().out.strip() == str(fmnist_raw_dir(tmp_path / "root"))
