"""The data FedBR's PACS appendix needs: the hand-placed `pacs` reader, the `domains` subset of
the `digits_domains` stand-in, and the `domain` scheme's `class_groups` (one client per domain
and class group)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedhet.data import DatasetNotAvailable, load_dataset
from fedhet.data.handplaced import PACS_CLASSES, PACS_DOMAINS
from fedhet.partition import PartitionError, count_matrix, make_partition

PER_FOLDER = 5  # images per (domain, class) folder: 1 held out for testing at 20 %


def _colour(d: int, c: int, k: int) -> tuple[int, int, int]:
    """A colour unique to image k of class c in domain d (so each image can be traced)."""
    return (40 * d + 10, 30 * c + 10, 40 * k + 10)


def _write_pacs(root: Path, per_folder: int = PER_FOLDER) -> Path:
    """A tiny PACS tree of flat-colour images, of mixed sizes and formats, under root/raw/pacs."""
    base = root / "raw" / "pacs"
    for d, domain in enumerate(PACS_DOMAINS):
        for c, cls in enumerate(PACS_CLASSES):
            (base / domain / cls).mkdir(parents=True)
            for k in range(per_folder):
                size = (40, 40) if k % 2 else (50, 36)
                suffix = ".jpg" if domain != "sketch" else ".png"  # as in the real PACS
                image = Image.new("RGB", size, _colour(d, c, k))
                image.save(base / domain / cls / f"pic_{k:03d}{suffix}", quality=100)
    return base


def _traced(x: torch.Tensor) -> list[tuple[int, int, int]]:
    """(domain, class, k) of each flat-colour image, read back from its centre pixel."""
    found = []
    for rgb in x[:, :, x.shape[2] // 2, x.shape[3] // 2].tolist():
        d, c, k = (round((v - 10) / step) for v, step in zip(rgb, (40, 30, 40)))
        found.append((d, c, k))
    return found


def test_pacs_reads_domains_classes_and_a_seeded_split(tmp_path):
    _write_pacs(tmp_path)
    data = load_dataset("pacs", tmp_path)
    assert data.class_names == ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
    assert data.domain_names == ("art_painting", "cartoon", "photo", "sketch")
    assert data.num_classes == 7 and data.stands_in_for is None
    assert tuple(data.x_train.shape) == (4 * 7 * 4, 3, 32, 32)  # resized to the default 32
    assert tuple(data.x_test.shape) == (4 * 7 * 1, 3, 32, 32)  # round(0.2 * 5) per folder
    assert data.mean == (0.485, 0.456, 0.406) and data.std == (0.229, 0.224, 0.225)
    for x, y, dom, per_folder in (
        (data.x_train, data.y_train, data.domain_train, 4),
        (data.x_test, data.y_test, data.domain_test, 1),
    ):
        assert torch.bincount(dom).tolist() == [7 * per_folder] * 4
        assert torch.bincount(y).tolist() == [4 * per_folder] * 7
        traced = _traced(x)  # every image carries its own folder's domain and class
        assert [t[0] for t in traced] == dom.tolist() and [t[1] for t in traced] == y.tolist()
    train, test = set(_traced(data.x_train)), set(_traced(data.x_test))
    assert not train & test and len(train | test) == 4 * 7 * PER_FOLDER

    # the split is seeded per folder: the same images are held out when rebuilt elsewhere,
    # and at another size
    _write_pacs(tmp_path / "other")
    again = load_dataset("pacs", tmp_path / "other", {"size": 16})
    assert tuple(again.x_train.shape[1:]) == (3, 16, 16)
    assert set(_traced(again.x_test)) == test


def test_pacs_test_fraction_and_gray(tmp_path):
    _write_pacs(tmp_path, per_folder=10)
    data = load_dataset("pacs", tmp_path, {"test_fraction": 0.3, "channels": 1, "size": 24})
    assert tuple(data.x_test.shape) == (4 * 7 * 3, 1, 24, 24) and len(data.y_train) == 4 * 7 * 7
    assert len(data.mean) == 1  # recomputed for one channel, not ImageNet's
    with pytest.raises(ValueError, match="test_fraction"):
        load_dataset("pacs", tmp_path, {"test_fraction": 1.0})


def test_pacs_missing_says_which_folders_go_where(tmp_path):
    with pytest.raises(DatasetNotAvailable) as err:
        load_dataset("pacs", tmp_path)
    message = str(err.value)
    base = tmp_path / "raw" / "pacs"
    for domain in PACS_DOMAINS:
        assert str(base / domain) in message
    assert ", ".join(PACS_CLASSES) in message
    assert "domaingeneralization.github.io" in message and "Li et al., 2017" in message
    assert "kfold" in message

    base = _write_pacs(tmp_path)  # one class folder missing: named
    for file in (base / "photo" / "horse").iterdir():
        file.unlink()
    (base / "photo" / "horse").rmdir()
    with pytest.raises(DatasetNotAvailable, match=str(base / "photo" / "horse")):
        load_dataset("pacs", tmp_path)
    (base / "photo" / "horse").mkdir()  # present but empty: also named
    with pytest.raises(DatasetNotAvailable, match="holds no images"):
        load_dataset("pacs", tmp_path)


# -- digits_domains: option `domains` ------------------------------------------------------

SMALL = {"train_per_class": 4, "test_per_class": 2, "size": 12}


def _arrays_sha(data) -> str:
    """sha256 of a stand-in's tensors and metadata (not of its cache file)."""
    h = hashlib.sha256()
    for t in (data.x_train, data.y_train, data.x_test, data.y_test, data.domain_train,
              data.domain_test):
        h.update(t.contiguous().numpy().tobytes())
    h.update(json.dumps([data.domain_names, data.class_names, data.mean, data.std]).encode())
    return h.hexdigest()


@pytest.mark.parametrize(
    ("options", "expected"),
    [  # computed before the `domains` option existed
        ({}, "073e3e1d1ac1e0b6f5368b0f258947cd32f3a0ff37ad6ee24501f1d8704f4a71"),
        (SMALL, "1c8dc80bb12818d20c466e71adfdc85c7c5afddbfe3b104e60deba9dffdbfe17"),
        ({**SMALL, "size": 16, "channels": 1},
         "0bacb60dd43299529bcb4e48d5801705685d380dd42407cb0dd19c67add48fab"),
    ],
)
def test_digits_domains_null_is_unchanged(tmp_path, options, expected):
    data = load_dataset("digits_domains", tmp_path, options)
    assert _arrays_sha(data) == expected
    explicit = load_dataset("digits_domains", tmp_path / "b", {**options, "domains": None})
    assert _arrays_sha(explicit) == expected


def test_digits_domains_subset_is_renumbered(tmp_path):
    full = load_dataset("digits_domains", tmp_path, SMALL)
    kept = ["svhn", "usps", 3, "mnist"]  # names or ids; ids follow the list's order
    data = load_dataset("digits_domains", tmp_path, {**SMALL, "domains": kept})
    assert data.domain_names == ("svhn", "usps", "synthdigits", "mnist")
    assert torch.bincount(data.domain_train).tolist() == [40] * 4
    assert torch.bincount(data.domain_test).tolist() == [20] * 4
    assert torch.bincount(data.y_train).tolist() == [16] * 10
    for new, name in enumerate(data.domain_names):  # a style's images do not depend on the others
        old = full.domain_names.index(name)
        for x, dom, x_full, dom_full in (
            (data.x_train, data.domain_train, full.x_train, full.domain_train),
            (data.x_test, data.domain_test, full.x_test, full.domain_test),
        ):
            mine = sorted(map(bytes, x[dom == new].flatten(1).numpy()))
            theirs = sorted(map(bytes, x_full[dom_full == old].flatten(1).numpy()))
            assert mine == theirs


@pytest.mark.parametrize(
    ("domains", "match"),
    [
        (["mnist", "photo"], "unknown style 'photo'"),
        ([0, 5], "unknown style 5"),
        (["svhn", 1], "'svhn' twice"),
        ([], "non-empty list"),
        ("mnist", "non-empty list"),
    ],
)
def test_digits_domains_bad_subset(tmp_path, domains, match):
    with pytest.raises(ValueError, match=match):
        load_dataset("digits_domains", tmp_path, {**SMALL, "domains": domains})


# -- partition: domain scheme with class_groups --------------------------------------------

# 4 domains × 7 classes; domain d holds 10 + d samples of every class, in a shuffled order
_rng = np.random.default_rng(0)
_pairs = [(d, c) for d in range(4) for c in range(7) for _ in range(10 + d)]
_order = _rng.permutation(len(_pairs))
DOMAINS = np.array([_pairs[i][0] for i in _order])
LABELS = np.array([_pairs[i][1] for i in _order])
GROUPS = [[0, 1, 2, 3], [4, 5, 6]]


def test_class_groups_one_client_per_domain_and_group():
    part = make_partition(LABELS, "domain", 8, 0, num_classes=7, domains=DOMAINS,
                          class_groups=GROUPS)
    part.validate(LABELS.size)
    assert part.num_clients == 8
    assert sum(part.sizes) == LABELS.size  # every class is in a group: all data is used
    counts = count_matrix(LABELS, part, 7)
    for k, idx in enumerate(part.client_indices):
        d, g = divmod(k, 2)  # client d·G + g
        assert set(DOMAINS[idx]) == {d}
        assert set(LABELS[idx]) == set(GROUPS[g])
        assert counts[k].tolist() == [10 + d if c in GROUPS[g] else 0 for c in range(7)]
    assert part.sizes.tolist() == [4 * 10, 3 * 10, 4 * 11, 3 * 11, 4 * 12, 3 * 12, 4 * 13, 3 * 13]
    assert part.meta["params"]["class_groups"] == GROUPS
    # deterministic and seed-free: it draws nothing
    other = make_partition(LABELS, "domain", 8, 5, num_classes=7, domains=DOMAINS,
                           class_groups=GROUPS)
    assert all(np.array_equal(a, b) for a, b in zip(part.client_indices, other.client_indices))


def test_class_groups_may_leave_classes_out():
    # e.g. PACS's groups on a 10-class stand-in: classes 7-9 go to no client
    labels = np.where(LABELS == 6, 9, LABELS)
    part = make_partition(labels, "domain", 8, 0, num_classes=10, domains=DOMAINS,
                          class_groups=GROUPS)
    assert not np.isin(9, labels[np.concatenate(part.client_indices)])
    assert sum(part.sizes) == np.isin(labels, range(7)).sum()


def test_class_groups_null_is_unchanged():
    for params in ({}, {"within_alpha": 0.5}):
        before = make_partition(LABELS, "domain", 8, 3, num_classes=7, domains=DOMAINS, **params)
        after = make_partition(LABELS, "domain", 8, 3, num_classes=7, domains=DOMAINS,
                               class_groups=None, **params)
        assert all(np.array_equal(a, b)
                   for a, b in zip(before.client_indices, after.client_indices))


@pytest.mark.parametrize(
    ("clients", "groups", "extra", "match"),
    [
        (4, GROUPS, {}, r"num_clients must be 4 domains × 2 groups = 8, got num_clients=4"),
        (8, [[0, 1, 2, 3], [3, 4, 5, 6]], {}, r"class 3 is in class_groups\[0\] and again in "
                                              r"class_groups\[1\]"),
        (8, [[0, 1, 2, 3], [4, 5, 7]], {}, r"class_groups\[1\] holds 7, which is not a class id "
                                           r"\(0..6\)"),
        (8, [[0, 1, 2, 3], [4, -1]], {}, r"holds -1"),
        (8, [[0, 1, 2, 3], []], {}, r"class_groups\[1\] must be a non-empty list"),
        (4, [], {}, "class_groups must be a non-empty list"),
        (8, GROUPS, {"within_alpha": 0.5}, "within_alpha"),
    ],
)
def test_class_groups_errors(clients, groups, extra, match):
    with pytest.raises(PartitionError, match=match):
        make_partition(LABELS, "domain", clients, 0, num_classes=7, domains=DOMAINS,
                       class_groups=groups, **extra)


def test_class_groups_reach_the_scheme_through_partition_options(tmp_path):
    from dataclasses import dataclass

    from fedhet.partition import load_or_make_partition

    @dataclass
    class Data:
        name: str
        y_train: np.ndarray
        num_classes: int
        domain_train: np.ndarray

    settings = {"scheme": "domain", "num_clients": 8, "root": str(tmp_path),
                "options": {"class_groups": GROUPS}}
    part = load_or_make_partition(Data("toy", LABELS, 7, DOMAINS), settings, 0)
    assert part.num_clients == 8 and set(LABELS[part.client_indices[1]]) == {4, 5, 6}


def test_class_groups_as_a_number_split_the_classes_in_order():
    from fedhet.partition.domains import domain

    labels = np.repeat(np.arange(7), 4)
    domains = np.tile(np.arange(2), 14)
    part = domain(labels, 4, np.random.default_rng(0), num_classes=7, domains=domains,
                  class_groups=2)
    groups = [sorted(set(labels[ix].tolist())) for ix in part.client_indices]
    assert groups == [[0, 1, 2, 3], [4, 5, 6], [0, 1, 2, 3], [4, 5, 6]]  # the code's Y <= 7 // 2
    with pytest.raises(PartitionError, match="class_groups=8 must be between 1 and"):
        domain(labels, 4, np.random.default_rng(0), num_classes=7, domains=domains, class_groups=8)
