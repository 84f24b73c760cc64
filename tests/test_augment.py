"""The augmenter's inputs: uint8 pixels (0 to 255) or float images already in [0, 1], turned
into the same normalised batch, without touching the caller's tensor."""

from __future__ import annotations

import pytest
import torch

from fedhet.engine.augment import Augmenter
from fedhet.engine.evaluation import PreparedTestSet

MEAN, STD = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)


def images(n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Random uint8 images and the same images as floats in [0, 1]."""
    pixels = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    return pixels, pixels.to(torch.float32) / 255


def test_uint8_pixels_are_divided_by_255_then_normalised():
    pixels, _ = images()
    expected = (pixels.to(torch.float32) / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) \
        / torch.tensor(STD).view(1, 3, 1, 1)
    out = Augmenter("none", MEAN, STD, 16, torch.device("cpu")).test(pixels)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("mode", ["none", "crop_flip"])
def test_float_images_are_taken_as_0_to_1_and_left_unchanged(mode):
    pixels, floats = images()
    given = floats.clone()
    aug = Augmenter(mode, MEAN, STD, 16, torch.device("cpu"))
    assert torch.equal(aug.test(floats[:10]), aug.test(pixels[:10]))
    train_f = aug.train(floats, torch.Generator().manual_seed(1))
    train_u8 = aug.train(pixels, torch.Generator().manual_seed(1))
    assert torch.equal(train_f, train_u8)
    assert torch.equal(floats, given)


def test_a_float_test_set_evaluates_the_same_every_time():
    """Evaluation hands the augmenter slices (views) of the test set, pass after pass."""
    pixels, floats = images()
    given = floats.clone()
    aug = Augmenter("none", MEAN, STD, 16, torch.device("cpu"))
    y = torch.zeros(len(floats), dtype=torch.long)
    test_set = PreparedTestSet(floats, y, aug, batch_size=16)
    first, second = [xb for xb, _ in test_set], [xb for xb, _ in test_set]
    as_uint8 = [xb for xb, _ in PreparedTestSet(pixels, y, aug, batch_size=16)]
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(first, as_uint8, strict=True))
    assert torch.equal(floats, given)


def test_other_image_types_are_refused_naming_the_type():
    aug = Augmenter("none", MEAN, STD, 16, torch.device("cpu"))
    with pytest.raises(TypeError, match=r"uint8 .* or floats in \[0, 1\], not torch.int16"):
        aug.test(torch.zeros(2, 3, 16, 16, dtype=torch.int16))
