"""Virtual datasets: deterministic by seed, separable classes, uint8 mapping, cache, grids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedhet.data.core import CacheError
from fedhet.virtual import (
    load_or_make_virtual,
    make_virtual_dataset,
    resolve_settings,
    to_uint8,
    virtual_grid_png,
    virtual_key,
)

# Small but faithful settings: every code path of each generator, a few seconds in all.
KINDS = {
    "stylegan": {"width": 16},
    "noise": {},
    "cnn": {"ngf": 8, "h_dim": 64, "train_steps": 3, "train_batch": 16},
}
PER_CLASS = 30


pytestmark = pytest.mark.usefixtures("one_thread")


def linear_probe_accuracy(x: torch.Tensor, y: torch.Tensor) -> float:
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    feats = x.flatten(1).float().numpy() / 255.0
    labels = y.numpy()
    test = np.arange(len(labels)) % 3 == 0  # class-major order: every class in both splits
    with threadpool_limits(1):  # a tiny fit: threads only contend on a busy machine
        clf = LogisticRegression(max_iter=500).fit(feats[~test], labels[~test])
        return float(clf.score(feats[test], labels[test]))


@pytest.mark.parametrize("kind", list(KINDS))
def test_generator_is_deterministic_and_separable(kind):
    x, y = make_virtual_dataset(kind, 10, PER_CLASS, 16, 3, seed=0, **KINDS[kind])
    assert x.dtype == torch.uint8 and x.shape == (10 * PER_CLASS, 3, 16, 16)
    assert y.dtype == torch.int64 and torch.equal(torch.bincount(y), torch.full((10,), PER_CLASS))
    x2, y2 = make_virtual_dataset(kind, 10, PER_CLASS, 16, 3, seed=0, **KINDS[kind])
    assert torch.equal(x, x2) and torch.equal(y, y2)
    other, _ = make_virtual_dataset(kind, 2, 2, 16, 3, seed=1, **KINDS[kind])
    assert not torch.equal(x[:2], other[:2])
    assert float(x.float().std()) > 5  # not a constant image
    assert linear_probe_accuracy(x, y) > 0.8


def test_stylegan_other_sizes_and_one_channel():
    x, _ = make_virtual_dataset("stylegan", 2, 3, 28, 1, seed=0, width=8)
    assert x.shape == (6, 1, 28, 28)
    x, _ = make_virtual_dataset("stylegan", 2, 3, 32, 3, seed=0, width=8)
    assert x.shape == (6, 3, 32, 32)


def test_more_images_per_class_keep_the_first_ones():
    small, _ = make_virtual_dataset("noise", 3, 4, 16, 3, seed=2)
    large, y = make_virtual_dataset("noise", 3, 6, 16, 3, seed=2)
    for k in range(3):
        assert torch.equal(small[4 * k:4 * k + 4], large[y == k][:4])


def test_real_image_subset_with_a_stand_in(tmp_path):
    opts = {"dataset": "digits100", "dataset_root": str(tmp_path)}
    x, y = make_virtual_dataset("tinyimagenet10", 10, 12, 16, 3, seed=0, **opts)
    assert x.shape == (120, 3, 16, 16) and torch.equal(torch.bincount(y), torch.full((10,), 12))
    x2, _ = make_virtual_dataset("tinyimagenet10", 10, 12, 16, 3, seed=0, **opts)
    assert torch.equal(x, x2)


def test_uint8_mapping_is_save_image_of_minus_one_to_one():
    x = torch.tensor([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0])
    assert to_uint8(x).tolist() == [0, 0, 128, 191, 255, 255]


def test_unknown_kind_or_option_is_an_error():
    with pytest.raises(ValueError, match="valid"):
        make_virtual_dataset("gan", 2, 2, 16, 3, seed=0)
    with pytest.raises(ValueError, match="unknown option 'widht'"):
        make_virtual_dataset("stylegan", 2, 2, 16, 3, seed=0, widht=8)


def test_cache_roundtrip_key_and_corruption(tmp_path):
    settings = {"kind": "noise", "num_classes": 4, "images_per_class": 5, "size": 16,
                "channels": 3, "seed": 3}
    first = load_or_make_virtual(settings, tmp_path)
    assert first.path.parent == tmp_path / "virtual" and first.path.exists()
    assert (first.path.parent / (first.path.name + ".sha256")).read_text().split()[0] == first.checksum
    x, y = make_virtual_dataset("noise", 4, 5, 16, 3, seed=3)
    assert torch.equal(first.x, x) and torch.equal(first.y, y)
    again = load_or_make_virtual(settings, tmp_path)
    assert again.checksum == first.checksum and torch.equal(again.x, first.x)
    # defaults are part of the key: spelling one out names the same file
    assert virtual_key(settings) == virtual_key({**settings, "options": {"base": 8}})
    assert virtual_key(settings) != virtual_key({**settings, "seed": 4})
    assert resolve_settings(settings)["options"]["sample_std"] == 0.5
    blob = bytearray(first.path.read_bytes())
    blob[-10] ^= 0xFF
    first.path.write_bytes(bytes(blob))
    with pytest.raises(CacheError, match="corrupt"):
        load_or_make_virtual(settings, tmp_path)


def test_grid_png(tmp_path):
    x, y = make_virtual_dataset("noise", 3, 5, 16, 3, seed=0)
    path = virtual_grid_png(x, y, tmp_path / "fig" / "grid.png", per_class=4, title="noise")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    gray, gy = make_virtual_dataset("noise", 2, 3, 16, 1, seed=0)
    assert virtual_grid_png(gray, gy, tmp_path / "gray.png").exists()


def test_settings_for_run_names_the_plugins_virtual_data():
    from fedhet.config import resolve_run
    from fedhet.virtual import settings_for_run

    def run(params):
        return resolve_run({"dataset": {"name": "digits10", "options": {"channels": 3}},
                            "plugins": [{"name": "vhl", "params": params}]})

    s = settings_for_run(run({"virtual_kind": "noise", "virtual_per_class": 50}))
    assert (s["kind"], s["num_classes"], s["images_per_class"], s["channels"], s["size"]) == (
        "noise", 10, 50, 3, 16)
    assert settings_for_run(run({"variant": "vfa"})) is None
    assert settings_for_run(run({"virtual_classes": 0, "virtual_batch_size": 0,
                                 "calibration_weight": 0.0})) is None
    assert settings_for_run(resolve_run({})) is None
