"""Tests for fedhet.partition: scheme rules, determinism, errors, files and caching."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedhet import partition as P
from fedhet.partition import (
    SCHEMES,
    Partition,
    PartitionError,
    count_matrix,
    load_or_make_partition,
    make_partition,
    partition_key,
)


def cifar_like(per_class: int = 5000, num_classes: int = 10, seed: int = 0) -> np.ndarray:
    """Balanced shuffled labels, like the CIFAR-10 training set at per_class=5000."""
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


LABELS = cifar_like(500)  # 5000 samples, 10 classes
DOMAINS = np.arange(LABELS.size) % 4

# scheme, extra params, uses all the data
CASES = [
    ("dirichlet", {"alpha": 0.5}, True),
    ("dirichlet", {"alpha": 0.1, "cap": False}, True),
    ("dirichlet_client", {"alpha": 0.1}, False),
    ("dirichlet_client", {"alpha": 0.1, "prior": "remaining"}, False),
    ("nclass", {"classes_per_client": 2}, False),
    ("subset", {}, False),  # 8 clients < 10 classes: two dominant shares are dropped
    ("iid", {}, True),
    ("domain", {}, True),
    ("domain", {"within_alpha": 0.5}, True),
    ("rotation", {"rotation_mode": "fixed"}, True),
    ("rotation", {"rotation_mode": "mixture", "base": "iid"}, True),
]


def _make(scheme: str, params: dict, seed: int = 0, num_clients: int = 8) -> Partition:
    return make_partition(
        LABELS, scheme, num_clients, seed, num_classes=10, domains=DOMAINS, **params
    )


def _entropy(counts: np.ndarray) -> float:
    """Mean over clients of the entropy (nats) of the client's class distribution."""
    p = counts / counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return float(h.mean())


def test_every_scheme_is_tested() -> None:
    assert {case[0] for case in CASES} == set(SCHEMES.names())


@pytest.mark.parametrize(("scheme", "params", "uses_all"), CASES)
def test_counts_add_up_and_no_index_repeats(scheme: str, params: dict, uses_all: bool) -> None:
    part = _make(scheme, params)
    assert part.num_clients == 8
    flat = np.concatenate(part.client_indices)
    assert flat.dtype == np.int64
    assert np.unique(flat).size == flat.size
    assert flat.min() >= 0 and flat.max() < LABELS.size
    counts = count_matrix(LABELS, part, 10)
    assert counts.sum() == flat.size == part.sizes.sum()
    if uses_all:
        assert flat.size == LABELS.size


@pytest.mark.parametrize(("scheme", "params", "uses_all"), CASES)
def test_deterministic_by_seed(scheme: str, params: dict, uses_all: bool) -> None:
    a, b, c = _make(scheme, params, 3), _make(scheme, params, 3), _make(scheme, params, 4)
    assert all(np.array_equal(x, y) for x, y in zip(a.client_indices, b.client_indices))
    if a.client_angles is not None:
        assert all(np.array_equal(x, y) for x, y in zip(a.client_angles, b.client_angles))
    changed = any(not np.array_equal(x, y) for x, y in zip(a.client_indices, c.client_indices))
    if a.client_angles is not None:
        changed |= any(not np.array_equal(x, y) for x, y in zip(a.client_angles, c.client_angles))
    assert changed


def test_accepts_torch_labels() -> None:
    torch = pytest.importorskip("torch")
    part = make_partition(torch.from_numpy(LABELS), "iid", 4, 0, num_classes=10)
    ref = make_partition(LABELS, "iid", 4, 0, num_classes=10)
    assert all(np.array_equal(x, y) for x, y in zip(part.client_indices, ref.client_indices))


def test_subset_matches_vhl_table3_at_cifar_scale() -> None:
    labels = cifar_like(5000)
    part = make_partition(labels, "subset", 10, 0, num_classes=10)
    counts = count_matrix(labels, part, 10)
    assert counts.sum() == 50000
    for i in range(10):
        assert counts[i, i] == 4950
        others = np.delete(counts[i], i)
        assert others.min() >= 5 and others.max() <= 6
    assert (counts.sum(axis=0) == 5000).all()


def test_subset_small_stand_in_is_proportional() -> None:
    part = make_partition(LABELS, "subset", 10, 0, num_classes=10)  # 500 per class
    counts = count_matrix(LABELS, part, 10)
    assert (np.diag(counts) == 495).all()
    off = counts[~np.eye(10, dtype=bool)]
    assert off.min() >= 0 and off.max() <= 1
    assert counts.sum() == LABELS.size


def test_subset_shares_dominant_class_among_clients() -> None:
    part = make_partition(LABELS, "subset", 20, 0, num_classes=10)
    counts = count_matrix(LABELS, part, 10)
    for i in range(20):
        assert counts[i].argmax() == i % 10
        assert counts[i, i % 10] in (247, 248)  # 495 split between two clients


def test_subset_fewer_clients_than_classes() -> None:
    part = make_partition(LABELS, "subset", 5, 0, num_classes=10)
    counts = count_matrix(LABELS, part, 10)
    assert (np.diag(counts[:, :5]) == 495).all()
    assert counts[:, 5:].sum(axis=0).tolist() == [5] * 5  # only the minor shares of 5..9
    assert (counts.argmax(axis=1) == np.arange(5)).all()


@pytest.mark.parametrize(
    ("num_classes", "num_clients", "k"), [(10, 10, 2), (10, 7, 3), (100, 30, 5)]
)
def test_nclass_gives_exactly_k_classes(num_classes: int, num_clients: int, k: int) -> None:
    labels = cifar_like(50, num_classes)
    part = make_partition(
        labels, "nclass", num_clients, 0, num_classes=num_classes, classes_per_client=k
    )
    counts = count_matrix(labels, part, num_classes)
    assert ((counts > 0).sum(axis=1) == k).all()
    for i in range(num_clients):
        assert counts[i, i % num_classes] > 0
    owners = (counts > 0).sum(axis=0)
    for c in np.flatnonzero(owners):  # each owned class split equally among its owners
        shares = counts[counts[:, c] > 0, c]
        assert shares.max() - shares.min() <= 1 and shares.sum() == 50


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    labels = cifar_like(500)
    entropies = []
    for alpha in (10.0, 0.5, 0.05):
        values = [
            _entropy(
                count_matrix(
                    labels,
                    make_partition(labels, "dirichlet", 10, seed, num_classes=10, alpha=alpha),
                    10,
                )
            )
            for seed in range(3)
        ]
        entropies.append(np.mean(values))
    assert entropies[0] > entropies[1] > entropies[2]
    assert entropies[0] > 0.9 * np.log(10)


def test_dirichlet_respects_min_size() -> None:
    for seed in range(5):
        part = make_partition(LABELS, "dirichlet", 20, seed, num_classes=10, alpha=0.1)
        assert part.sizes.min() >= 10  # default min_size = num_classes
        part = make_partition(
            LABELS, "dirichlet", 20, seed, num_classes=10, alpha=1.0, min_size=150
        )
        assert part.sizes.min() >= 150


def test_dirichlet_cap_stops_big_clients_growing() -> None:
    labels = cifar_like(500)
    limit = labels.size / 10
    part = make_partition(labels, "dirichlet", 10, 1, num_classes=10, alpha=0.05)
    counts = count_matrix(labels, part, 10)
    # A client over N/K gets nothing of any later class (classes are processed in order).
    for k in range(10):
        running = np.cumsum(counts[k])
        over = np.flatnonzero(running >= limit)
        if over.size:
            assert counts[k, over[0] + 1 :].sum() == 0


def test_impossible_dirichlet_fails_naming_parameters() -> None:
    """(How fast it gives up is printed by ci/cpu-bench.py.)"""
    with pytest.raises(PartitionError) as err:
        make_partition(LABELS, "dirichlet", 100, 0, num_classes=10, min_size=60)
    assert "min_size" in str(err.value) and "num_clients" in str(err.value)
    with pytest.raises(PartitionError) as err:
        make_partition(
            LABELS, "dirichlet", 200, 0, num_classes=10, alpha=0.001, min_size=20, max_tries=200
        )
    msg = str(err.value)
    assert all(name in msg for name in ("alpha", "num_clients", "min_size"))


@pytest.mark.parametrize(
    ("scheme", "params", "needle"),
    [
        ("nclass", {"classes_per_client": 11}, "classes_per_client"),
        ("nclass", {"classes_per_client": 0}, "classes_per_client"),
        ("dirichlet", {"alpha": 0}, "alpha"),
        ("dirichlet_client", {"prior": "other"}, "prior"),
        ("subset", {"dominant_fraction": 1.5}, "dominant_fraction"),
        ("rotation", {"rotation_mode": "spin"}, "rotation_mode"),
        ("rotation", {"rotation_mode": "mixture", "rotation_alpha": -1}, "rotation_alpha"),
        ("iid", {"alpha": 0.1}, "alpha"),
        ("rotation", {"base": "iid", "alpha": 0.1}, "alpha"),
    ],
)
def test_bad_parameters_raise_naming_them(scheme: str, params: dict, needle: str) -> None:
    with pytest.raises(PartitionError, match=needle):
        make_partition(LABELS, scheme, 8, 0, num_classes=10, **params)


def test_bad_inputs_raise() -> None:
    with pytest.raises(PartitionError, match="num_clients"):
        make_partition(LABELS, "iid", 0, 0, num_classes=10)
    with pytest.raises(PartitionError, match="num_classes"):
        make_partition(LABELS, "iid", 2, 0, num_classes=5)
    with pytest.raises(PartitionError, match="domains"):
        make_partition(LABELS, "iid", 2, 0, num_classes=10, domains=DOMAINS[:10])
    with pytest.raises(KeyError, match="valid"):
        make_partition(LABELS, "nope", 2, 0, num_classes=10)


def test_dirichlet_client_equal_sizes() -> None:
    labels = cifar_like(500)
    for prior in ("uniform", "remaining"):
        for num_clients in (10, 7, 33):
            part = make_partition(
                labels, "dirichlet_client", num_clients, 0, num_classes=10, alpha=0.1, prior=prior
            )
            assert (part.sizes == labels.size // num_clients).all()
    # Small alpha concentrates each client on few classes.
    counts = count_matrix(
        labels, make_partition(labels, "dirichlet_client", 10, 0, num_classes=10, alpha=0.05), 10
    )
    assert _entropy(counts) < 0.5 * np.log(10)


def test_domain_one_domain_per_client() -> None:
    part = make_partition(LABELS, "domain", 4, 0, num_classes=10, domains=DOMAINS)
    for i, idx in enumerate(part.client_indices):
        assert set(DOMAINS[idx]) == {i}
        assert idx.size == (DOMAINS == i).sum()
    part = make_partition(LABELS, "domain", 8, 0, num_classes=10, domains=DOMAINS)
    for k, idx in enumerate(part.client_indices):
        assert set(DOMAINS[idx]) == {k % 4}
    assert part.sizes.max() - part.sizes.min() <= 1
    with pytest.raises(PartitionError, match="num_clients"):
        make_partition(LABELS, "domain", 6, 0, num_classes=10, domains=DOMAINS)
    with pytest.raises(PartitionError, match="domain ids"):
        make_partition(LABELS, "domain", 4, 0, num_classes=10)


def test_rotation_fixed_angles() -> None:
    part = make_partition(LABELS, "rotation", 12, 0, num_classes=10, rotation_mode="fixed")
    assert part.client_angles is not None
    for i, (idx, angles) in enumerate(zip(part.client_indices, part.client_angles)):
        assert angles.shape == idx.shape
        assert (angles == P.DEFAULT_ANGLES[i % 10]).all()
    base = make_partition(LABELS, "dirichlet", 12, 0, num_classes=10)
    assert all(np.array_equal(x, y) for x, y in zip(part.client_indices, base.client_indices))


def test_rotation_mixture_angles() -> None:
    angles = (0.0, 90.0, 180.0)
    part = make_partition(
        LABELS,
        "rotation",
        5,
        0,
        num_classes=10,
        base="iid",
        rotation_mode="mixture",
        angles=angles,
        rotation_alpha=1.0,
    )
    assert part.client_angles is not None
    seen = set()
    for idx, a in zip(part.client_indices, part.client_angles):
        assert a.shape == idx.shape and set(np.unique(a)) <= set(angles)
        seen.add(tuple(np.bincount((a // 90).astype(int), minlength=3)))
    assert len(seen) == 5  # each client has its own angle mixture
    peaked = make_partition(
        LABELS,
        "rotation",
        5,
        0,
        num_classes=10,
        base="iid",
        rotation_mode="mixture",
        rotation_alpha=0.01,
    )
    assert peaked.client_angles is not None
    top = [np.bincount((a // 15).astype(int)).max() / a.size for a in peaked.client_angles]
    assert np.mean(top) > 0.9


def test_save_load_round_trip(tmp_path: Path) -> None:
    part = make_partition(LABELS, "rotation", 6, 0, num_classes=10, rotation_mode="mixture")
    path = tmp_path / "sub" / "p.npz"
    part.save(path)
    assert [f.name for f in path.parent.iterdir()] == ["p.npz"]  # no temp file left
    back = Partition.load(path)
    assert {k: v for k, v in back.meta.items() if k != "params"} == {
        k: v for k, v in part.meta.items() if k != "params"
    }
    assert back.meta["params"]["angles"] == list(P.DEFAULT_ANGLES)
    assert all(np.array_equal(x, y) for x, y in zip(part.client_indices, back.client_indices))
    assert back.client_angles is not None and part.client_angles is not None
    assert all(np.array_equal(x, y) for x, y in zip(part.client_angles, back.client_angles))
    plain = Partition([np.array([3, 1]), np.array([], dtype=np.int64), np.array([0])])
    plain.save(path)
    again = Partition.load(path)
    assert again.client_angles is None and again.sizes.tolist() == [2, 0, 1]


def test_count_matrix() -> None:
    labels = np.array([0, 1, 1, 2, 2, 2])
    part = Partition([np.array([0, 3]), np.array([1, 2, 4, 5])])
    assert count_matrix(labels, part, 4).tolist() == [[1, 0, 1, 0], [0, 2, 2, 0]]


def test_partition_key_is_safe_and_ignores_unused_settings() -> None:
    base = {"scheme": "iid", "num_clients": 10}
    key = partition_key("cifar/10 x", base, 0)
    assert "/" not in key and " " not in key and key.startswith("cifar_10_x-iid-n10-s0-")
    assert partition_key("cifar/10 x", {**base, "alpha": 0.5, "root": "elsewhere"}, 0) == key
    assert partition_key("cifar/10 x", base, 1) != key
    lda = {"scheme": "dirichlet", "num_clients": 10, "alpha": 0.1}
    assert "a0.1" in partition_key("c10", lda, 0)
    assert partition_key("c10", lda, 0) != partition_key("c10", {**lda, "alpha": 0.5}, 0)
    with pytest.raises(PartitionError, match="alhpa"):
        partition_key("c10", {"alhpa": 0.1}, 0)


@dataclass
class FakeData:
    name: str
    y_train: np.ndarray
    num_classes: int
    domain_train: np.ndarray | None = None


def test_load_or_make_partition_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = FakeData("toy", LABELS, 10)
    settings = {"scheme": "dirichlet", "num_clients": 5, "alpha": 0.3, "root": str(tmp_path)}
    first = load_or_make_partition(data, settings, 0)
    files = list(tmp_path.glob("*.npz"))
    assert [f.stem for f in files] == [partition_key("toy", settings, 0)]

    def fail(*args: object, **kwargs: object) -> Partition:
        raise AssertionError("should have read the cached file")

    monkeypatch.setattr(P, "make_partition", fail)
    second = load_or_make_partition(data, settings, 0)
    assert all(np.array_equal(x, y) for x, y in zip(first.client_indices, second.client_indices))
    monkeypatch.undo()

    # Same key, different labels: the stale file is rebuilt.
    other = FakeData("toy", LABELS[::-1].copy(), 10)
    rebuilt = load_or_make_partition(other, settings, 0)
    assert rebuilt.meta["labels_sha256"] == P.labels_checksum(other.y_train)


def test_load_or_make_partition_honours_file(tmp_path: Path) -> None:
    data = FakeData("toy", LABELS, 10, domain_train=DOMAINS)
    made = make_partition(LABELS, "domain", 4, 7, num_classes=10, domains=DOMAINS)
    path = tmp_path / "given.npz"
    made.save(path)
    settings = {
        "scheme": "domain",
        "num_clients": 4,
        "file": str(path),
        "root": str(tmp_path / "c"),
    }
    loaded = load_or_make_partition(data, settings, 0)
    assert all(np.array_equal(x, y) for x, y in zip(made.client_indices, loaded.client_indices))
    assert not (tmp_path / "c").exists()
    with pytest.raises(PartitionError, match="num_clients"):
        load_or_make_partition(data, {**settings, "num_clients": 5}, 0)
    with pytest.raises(PartitionError, match="scheme"):
        load_or_make_partition(data, {**settings, "scheme": "iid"}, 0)
    with pytest.raises(PartitionError, match="labels"):
        load_or_make_partition(FakeData("toy", LABELS[::-1].copy(), 10), settings, 0)
    with pytest.raises(FileNotFoundError):
        load_or_make_partition(data, {**settings, "file": str(tmp_path / "missing.npz")}, 0)


def test_load_or_make_partition_passes_options(tmp_path: Path) -> None:
    data = FakeData("toy", LABELS, 10)
    settings = {
        "scheme": "rotation",
        "num_clients": 5,
        "root": str(tmp_path),
        "options": {"base": "nclass", "rotation_mode": "fixed"},
        "classes_per_client": 3,
    }
    part = load_or_make_partition(data, settings, 0)
    counts = count_matrix(LABELS, part, 10)
    assert ((counts > 0).sum(axis=1) == 3).all()
    assert part.meta["params"]["base"] == "nclass" and "alpha" not in part.meta["params"]
