"""Offline stand-in datasets built from scikit-learn's handwritten digits.

`sklearn.datasets.load_digits()` ships 1,797 real 8×8 digits (10 classes) inside the
package, so these datasets need no download and build in a fraction of a second. They let
the whole pipeline (partitions, algorithms, workflow, report) run at a demo scale on a
laptop; their accuracies say nothing about the papers' numbers.

The 1,797 source digits are first split per class by a fixed seed into disjoint train and
test pools (70/30). Each split is then enlarged to the requested number of images per
class by a seeded light augmentation of its own pool only (rotation ±12°, scale 0.9–1.1,
shift ±0.75 source pixels, Gaussian noise), rendered at the requested size by bilinear
sampling. Everything runs in float64 numpy with `numpy.random.default_rng`, so the bytes
are the same on every run.

- `digits10`: the 10 digits.
- `digits100`: 100 classes `10*a + b`, the two digits a and b side by side.
- `digits_domains`: the 10 digits in 5 visual styles standing in for the DIGITS benchmark
  (MNIST, SVHN, USPS, SynthDigits, MNIST-M), with per-sample domain ids; option `domains`
  keeps some of the styles (e.g. 4 of them standing in for PACS's 4 domains), option
  `num_classes` the first n digits (2 classes in 4 styles stand in for FedLGD's RETINA).

With `channels: 3`, `digits10`/`digits100` draw each digit in a colour mixed from a fixed
per-class tint and a random colour over a random dark background, so colour is a
class-correlated but noisy cue, as in natural images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.core import DATASETS, Arrays, DatasetSpec

SPLIT_SEED = 20_240_601
TEST_FRACTION = 0.3
NOISE_STD = 0.04
MAX_ANGLE = 12.0
SCALE_RANGE = (0.9, 1.1)
MAX_SHIFT = 0.75  # in source (8×8) pixels
GOLDEN = 0.618033988749895
DOMAIN_NAMES = ("mnist", "svhn", "usps", "synthdigits", "mnistm")
SPLITS = {"train": 0, "test": 1}


def split_indices(target: np.ndarray) -> dict[str, list[np.ndarray]]:
    """Per split, per class: sorted indices into the 1,797 digits (a fixed stratified split)."""
    rng = np.random.default_rng(SPLIT_SEED)
    out: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(target == c))
        n_test = int(round(TEST_FRACTION * len(idx)))
        out["test"].append(np.sort(idx[:n_test]))
        out["train"].append(np.sort(idx[n_test:]))
    return out


def digit_pools() -> dict[str, list[np.ndarray]]:
    """Per split, per class: the source digits as float64 `[n, 8, 8]` in [0, 1].

    Train and test pools hold disjoint handwritten digits (see `split_indices`).
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float64) / 16.0
    return {
        split: [images[i] for i in per_class]
        for split, per_class in split_indices(digits.target).items()
    }


def warp(src: np.ndarray, size: int, rng: np.random.Generator, jitter: bool = True) -> np.ndarray:
    """Render square float images `[N, h, h]` at `size`×`size` by bilinear sampling.

    With `jitter`, each image gets a random rotation, scale and shift about its centre.
    Pixels sampled from outside the source are 0 (background).
    """
    n, h = src.shape[0], src.shape[1]
    if jitter:
        angle = np.deg2rad(rng.uniform(-MAX_ANGLE, MAX_ANGLE, n))
        scale = rng.uniform(*SCALE_RANGE, n)
        shift = rng.uniform(-MAX_SHIFT, MAX_SHIFT, (n, 2)) * (h / 8.0)
    else:
        angle, scale, shift = np.zeros(n), np.ones(n), np.zeros((n, 2))
    return warp_by(src, size, angle, scale, shift)


def warp_by(src: np.ndarray, size: int, angle: np.ndarray, scale: np.ndarray,
            shift: np.ndarray, shear: np.ndarray | None = None) -> np.ndarray:
    """`warp` with given per-image rotation (radians), scale, shift `[N, 2]` (source pixels)
    and optional horizontal shear."""
    h = src.shape[1]
    centred = (np.arange(size) + 0.5) * (h / size) - h / 2.0  # output pixel centres, source units
    gy, gx = np.meshgrid(centred, centred, indexing="ij")
    cos, sin = (np.cos(angle) / scale)[:, None, None], (np.sin(angle) / scale)[:, None, None]
    if shear is not None:
        gx = gx + shear[:, None, None] * gy
    xs = cos * gx + sin * gy - shift[:, 0, None, None] + h / 2.0 - 0.5
    ys = -sin * gx + cos * gy - shift[:, 1, None, None] + h / 2.0 - 0.5
    return _bilinear(np.pad(src, ((0, 0), (1, 1), (1, 1))), xs, ys)


def _bilinear(padded: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Sample zero-padded images at continuous pixel coordinates (unpadded frame)."""
    h = padded.shape[1] - 2
    x0, y0 = np.floor(xs), np.floor(ys)
    wx, wy = xs - x0, ys - y0
    n = np.arange(padded.shape[0])[:, None, None]

    def at(yi: np.ndarray, xi: np.ndarray) -> np.ndarray:
        yi = np.clip(yi, -1, h).astype(np.int64) + 1
        xi = np.clip(xi, -1, h).astype(np.int64) + 1
        return padded[n, yi, xi]

    top = at(y0, x0) * (1 - wx) + at(y0, x0 + 1) * wx
    bottom = at(y0 + 1, x0) * (1 - wx) + at(y0 + 1, x0 + 1) * wx
    return top * (1 - wy) + bottom * wy


def pick_sources(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` images from `pool`, each source used evenly often, in random order."""
    reps = -(-n // len(pool))
    order = np.concatenate([rng.permutation(len(pool)) for _ in range(reps)])[:n]
    return pool[order]


def hsv_to_rgb(h: np.ndarray, s: float, v: float) -> np.ndarray:
    """Vectorised HSV → RGB for hues `h` in [0, 1); returns `[len(h), 3]`."""
    k = (np.array([5.0, 3.0, 1.0]) + h[:, None] * 6.0) % 6.0
    return v - v * s * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)


def class_tints(num_classes: int) -> np.ndarray:
    """A distinct, fixed colour per class (hues spaced by the golden ratio)."""
    return hsv_to_rgb((np.arange(num_classes) * GOLDEN) % 1.0, 0.8, 1.0)


def colourise(
    gray: np.ndarray, labels: np.ndarray, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """`[N, H, W]` digit masks → `[N, 3, H, W]`: tinted foreground over a dark background."""
    n = len(gray)
    fg = 0.6 * class_tints(num_classes)[labels] + 0.4 * rng.uniform(0.3, 1.0, (n, 3))
    bg = rng.uniform(0.0, 0.35, (n, 3))
    return blend(gray, fg, bg)


def blend(gray: np.ndarray, fg: np.ndarray, bg: np.ndarray) -> np.ndarray:
    """Mix per-sample colours `[N, 3]` (or per-pixel `[N, 3, H, W]`) by a mask `[N, H, W]`."""
    g = gray[:, None]
    fg = fg[:, :, None, None] if fg.ndim == 2 else fg
    bg = bg[:, :, None, None] if bg.ndim == 2 else bg
    return g * fg + (1.0 - g) * bg


def to_uint8(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Add the sensor noise, clip to [0, 1], and quantise."""
    noisy = x + rng.normal(0.0, NOISE_STD, x.shape)
    return np.rint(np.clip(noisy, 0.0, 1.0) * 255.0).astype(np.uint8)


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng([SPLIT_SEED, *keys])


def _shuffled(rng: np.random.Generator, *arrays: np.ndarray) -> list[np.ndarray]:
    order = rng.permutation(len(arrays[0]))
    return [a[order] for a in arrays]


def _gray_to_channels(gray: np.ndarray, channels: int) -> np.ndarray:
    return np.repeat(gray[:, None], channels, axis=1)


def _luma(rgb: np.ndarray) -> np.ndarray:
    return np.tensordot(np.array([0.299, 0.587, 0.114]), rgb, axes=([0], [1]))[:, None]


# -- digits10 / digits100 -------------------------------------------------------------------


def _canvas_single(
    pools: list[np.ndarray], label: int, n: int, rng: np.random.Generator
) -> np.ndarray:
    return pick_sources(pools[label], n, rng)


def _canvas_pair(
    pools: list[np.ndarray], label: int, n: int, rng: np.random.Generator
) -> np.ndarray:
    """Digits a and b of class `10*a + b` side by side, centred on a 16×16 canvas."""
    a, b = divmod(label, 10)
    canvas = np.zeros((n, 16, 16))
    canvas[:, 4:12, :8] = pick_sources(pools[a], n, rng)
    canvas[:, 4:12, 8:] = pick_sources(pools[b], n, rng)
    return canvas


Canvas = Callable[[list[np.ndarray], int, int, np.random.Generator], np.ndarray]


def _render_split(
    pools: list[np.ndarray],
    canvas: Canvas,
    num_classes: int,
    per_class: int,
    size: int,
    channels: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Images `[N, C, size, size]` uint8 and labels for one split of a digit stand-in."""
    images, labels = [], []
    for c in range(num_classes):
        images.append(warp(canvas(pools, c, per_class, rng), size, rng))
        labels.append(np.full(per_class, c, dtype=np.int64))
    gray, y = np.concatenate(images), np.concatenate(labels)
    if channels == 3:
        x = colourise(gray, y, num_classes, rng)
    else:
        x = _gray_to_channels(gray, channels)
    x, y = _shuffled(rng, to_uint8(x, rng), y)
    return x, y


def _digit_builder(num_classes: int, canvas: Canvas, stream: int):
    """A builder for a class-per-canvas stand-in (`stream` keeps their seeds apart)."""

    def build(root: Path, options: dict[str, Any]) -> Arrays:
        import torch

        pools = digit_pools()
        out = {}
        for split, split_id in SPLITS.items():
            x, y = _render_split(
                pools[split],
                canvas,
                num_classes,
                options[f"{split}_per_class"],
                options["size"],
                options["channels"],
                _rng(stream, split_id),
            )
            out[split] = (torch.from_numpy(x), torch.from_numpy(y))
        names = tuple(f"{c:0{len(str(num_classes - 1))}d}" for c in range(num_classes))
        return Arrays(*out["train"], *out["test"], class_names=names)

    return build


# -- digits_domains -------------------------------------------------------------------------


def _style_mnist(gray: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """MNIST: white digit on black."""
    return _gray_to_channels(gray, 3)


def _style_svhn(gray: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """SVHN: low-contrast coloured digit on a coloured background, extra noise."""
    n = len(gray)
    bg = rng.uniform(0.2, 0.8, (n, 3))
    delta = rng.uniform(0.3, 0.5, (n, 1)) * rng.choice([-1.0, 1.0], (n, 1))
    fg = np.clip(bg + delta + rng.normal(0, 0.1, (n, 3)), 0.0, 1.0)
    x = blend(gray, fg, bg)
    return x + rng.normal(0.0, 0.05, x.shape)


def _style_usps(gray: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """USPS: thick, blurred grayscale strokes."""
    padded = np.pad(gray, ((0, 0), (1, 1), (1, 1)))
    h, w = gray.shape[1:]
    windows = [padded[:, i : i + h, j : j + w] for i in range(3) for j in range(3)]
    thick = np.max(windows, axis=0)
    padded = np.pad(thick, ((0, 0), (1, 1), (1, 1)), mode="edge")
    blurred = np.mean([padded[:, i : i + h, j : j + w] for i in range(3) for j in range(3)], axis=0)
    return _gray_to_channels(blurred, 3)


def _style_synth(gray: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """SynthDigits: dark, coloured digit on a light coloured background (inverted)."""
    n = len(gray)
    return blend(gray, rng.uniform(0.0, 0.3, (n, 3)), rng.uniform(0.6, 1.0, (n, 3)))


def _style_mnistm(gray: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """MNIST-M: |texture − digit| over a smooth random colour texture (as MNIST-M blends)."""
    n, size = len(gray), gray.shape[1]
    coarse = rng.uniform(0.0, 1.0, (n * 3, 4, 4))
    texture = warp(coarse, size, rng, jitter=False).reshape(n, 3, size, size)
    return np.abs(texture - gray[:, None])


DOMAIN_STYLES = (_style_mnist, _style_svhn, _style_usps, _style_synth, _style_mnistm)


def _kept_styles(domains: Sequence[str | int] | None) -> list[int]:
    """Indices into `DOMAIN_NAMES` of the styles that option `domains` keeps, in its order.

    `None` keeps all five; otherwise a non-empty list of style names or ids (0-4), each once.
    Raises ValueError naming a bad entry and the valid ones.
    """
    if domains is None:
        return list(range(len(DOMAIN_NAMES)))
    valid = f"style names {list(DOMAIN_NAMES)} or ids 0..{len(DOMAIN_NAMES) - 1}"
    where = "option 'domains' of dataset 'digits_domains'"
    if isinstance(domains, str) or not isinstance(domains, Sequence) or not domains:
        raise ValueError(f"{where} must be null or a non-empty list of {valid}, got {domains!r}")
    kept: list[int] = []
    for entry in domains:
        if isinstance(entry, str) and entry in DOMAIN_NAMES:
            style = DOMAIN_NAMES.index(entry)
        elif isinstance(entry, (int, np.integer)) and not isinstance(entry, bool) and (
            0 <= entry < len(DOMAIN_NAMES)
        ):
            style = int(entry)
        else:
            raise ValueError(f"{where}: unknown style {entry!r}; use {valid}")
        if style in kept:
            raise ValueError(f"{where} names style '{DOMAIN_NAMES[style]}' twice")
        kept.append(style)
    return kept


def _build_domains(root: Path, options: dict[str, Any]) -> Arrays:
    """The 10 digits rendered in the kept domain styles; domain id per sample.

    Domain d is the d-th kept style. Each style draws from its own seed (keyed by its index in
    `DOMAIN_STYLES`), so a style's images are the same whichever other styles are kept, and
    `domains: null` gives the same tensors as before the option existed. Option
    `num_classes` keeps digits 0..n-1; at 10 the tensors are those from before it existed.
    """
    import torch

    styles = _kept_styles(options["domains"])
    num_classes = options["num_classes"]
    pools = digit_pools()
    out = {}
    for split, split_id in SPLITS.items():
        xs, ys, ds = [], [], []
        for d, style_id in enumerate(styles):
            rng = _rng(3, split_id, style_id)
            gray, y = [], []
            for c in range(num_classes):
                gray.append(
                    warp(
                        pick_sources(pools[split][c], options[f"{split}_per_class"], rng),
                        options["size"],
                        rng,
                    )
                )
                y.append(np.full(options[f"{split}_per_class"], c, dtype=np.int64))
            rgb = DOMAIN_STYLES[style_id](np.concatenate(gray), rng)
            x = rgb if options["channels"] == 3 else _luma(rgb)
            xs.append(to_uint8(x, rng))
            ys.append(np.concatenate(y))
            ds.append(np.full(len(ys[-1]), d, dtype=np.int64))
        x, y, dom = _shuffled(
            _rng(3, split_id, 99), np.concatenate(xs), np.concatenate(ys), np.concatenate(ds)
        )
        out[split] = (torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(dom))
    names = tuple(str(c) for c in range(num_classes))
    return Arrays(
        out["train"][0],
        out["train"][1],
        out["test"][0],
        out["test"][1],
        class_names=names,
        domain_train=out["train"][2],
        domain_test=out["test"][2],
        domain_names=tuple(DOMAIN_NAMES[i] for i in styles),
    )


def _per_class_sizes(num_classes: int) -> Callable[[dict[str, Any]], tuple[int, int]]:
    """`DatasetSpec.sizes` of a stand-in with `{split}_per_class` images of each class."""
    return lambda o: (o["train_per_class"] * num_classes, o["test_per_class"] * num_classes)


def _domain_sizes(options: dict[str, Any]) -> tuple[int, int]:
    """(train, test) images of `digits_domains`: per class, per kept style."""
    train, test = _per_class_sizes(options["num_classes"])(options)
    styles = len(_kept_styles(options["domains"]))
    return train * styles, test * styles


def _options(channels: int, train: int, test: int, stands_in_for: str) -> dict[str, Any]:
    return {
        "channels": channels,
        "size": 16,
        "train_per_class": train,
        "test_per_class": test,
        "stands_in_for": stands_in_for,
    }


_CHOICES = {"channels": (1, 3)}

DATASETS.add(
    "digits10",
    DatasetSpec(
        name="digits10",
        build=_digit_builder(10, _canvas_single, stream=1),
        num_classes=10,
        channels=1,
        size=16,
        source="stand-in",
        description="10 handwritten digits (scikit-learn), augmented; offline stand-in",
        options=_options(1, 300, 100, "cifar10"),
        choices=_CHOICES,
        sizes=_per_class_sizes(10),
    ),
)
DATASETS.add(
    "digits100",
    DatasetSpec(
        name="digits100",
        build=_digit_builder(100, _canvas_pair, stream=2),
        num_classes=100,
        channels=1,
        size=16,
        source="stand-in",
        description="100 classes of digit pairs (10*a + b) side by side; offline stand-in",
        options=_options(1, 50, 20, "cifar100"),
        choices=_CHOICES,
        sizes=_per_class_sizes(100),
    ),
)
DATASETS.add(
    "digits_domains",
    DatasetSpec(
        name="digits_domains",
        build=_build_domains,
        num_classes=10,
        channels=3,
        size=16,
        source="stand-in",
        description="10 digits in 5 styles standing in for MNIST/SVHN/USPS/SynthDigits/MNIST-M "
        "(option domains: a list of styles keeps only those; num_classes: the first n digits)",
        # domains: null = all five styles; a list of style names/ids keeps those (renumbered).
        options={**_options(3, 60, 20, "digits"), "domains": None, "num_classes": 10},
        choices={**_CHOICES, "num_classes": tuple(range(2, 11))},
        # num_classes came later: at 10 it keeps the earlier cache keys (and tensors)
        keyless={"num_classes": 10},
        sizes=_domain_sizes,
    ),
)
