"""Image corruptions in numpy (and Pillow for JPEG), after CIFAR-10-C's families.

`CORRUPTIONS` maps a name (as CIFAR-10-C names its files) to a function
`(images, severity, rng) -> images` on uint8 `[N, H, W, 3]` (channels last, as CIFAR-10-C
stores them), severity 1 (mild) to 5 (strong). They build the `digits_corrupted` stand-in,
so that it needs neither CIFAR-10-C nor the `imagecorruptions` package. The per-severity
parameters follow the spirit of Hendrycks & Dietterich (2019) for 32-pixel images; the
values are ours (assumed), not theirs.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np

Corruption = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
CORRUPTIONS: dict[str, Corruption] = {}


def corruption(name: str) -> Callable[[Corruption], Corruption]:
    """Register a corruption function under `name`."""

    def add(fn: Corruption) -> Corruption:
        CORRUPTIONS[name] = fn
        return fn

    return add


def apply_corruption(name: str, images: np.ndarray, severity: int,
                     rng: np.random.Generator) -> np.ndarray:
    """`images` (uint8 `[N, H, W, 3]`) under corruption `name` at `severity` (1-5)."""
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; known: {', '.join(CORRUPTIONS)}")
    if severity not in (1, 2, 3, 4, 5):
        raise ValueError(f"corruption severity must be 1..5, got {severity!r}")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"expected uint8 [N, H, W, 3] images, got {images.dtype} {images.shape}")
    return CORRUPTIONS[name](images, severity, rng)


def _level(values: tuple, severity: int):
    return values[severity - 1]


def _float(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) / 255.0


def _uint8(x: np.ndarray) -> np.ndarray:
    return np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)


def _filter(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Correlate float images `[N, H, W, C]` with a 2-D kernel (odd sides), edges reflected."""
    ry, rx = kernel.shape[0] // 2, kernel.shape[1] // 2
    h, w = x.shape[1], x.shape[2]
    padded = np.pad(x, ((0, 0), (ry, ry), (rx, rx), (0, 0)), mode="reflect")
    out = np.zeros_like(x)
    for i in range(kernel.shape[0]):
        for j in range(kernel.shape[1]):
            if kernel[i, j]:
                out += kernel[i, j] * padded[:, i : i + h, j : j + w]
    return out


def _gaussian_kernel(sigma: float) -> np.ndarray:
    radius = max(1, int(np.ceil(3 * sigma)))
    t = np.arange(-radius, radius + 1)
    k = np.exp(-(t**2) / (2 * sigma**2))
    k = np.outer(k, k)
    return k / k.sum()


def _disk_kernel(radius: float) -> np.ndarray:
    r = int(np.ceil(radius))
    yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
    k = (yy**2 + xx**2 <= radius**2).astype(np.float64)
    return k / k.sum()


# -- noise ----------------------------------------------------------------------------------


@corruption("gaussian_noise")
def gaussian_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Additive Gaussian noise (std in [0, 1] pixel units)."""
    std = _level((0.04, 0.06, 0.08, 0.10, 0.13), severity)
    return _uint8(_float(x) + rng.normal(0.0, std, x.shape))


@corruption("shot_noise")
def shot_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson (photon) noise: fewer photons per unit intensity is stronger."""
    photons = _level((500.0, 250.0, 100.0, 75.0, 50.0), severity)
    return _uint8(rng.poisson(_float(x) * photons) / photons)


@corruption("impulse_noise")
def impulse_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Salt-and-pepper noise: a share of the values set to 0 or 255."""
    share = _level((0.01, 0.02, 0.03, 0.05, 0.07), severity)
    out = x.copy()
    hit = rng.random(x.shape) < share
    out[hit] = np.where(rng.random(int(hit.sum())) < 0.5, 0, 255).astype(np.uint8)
    return out


@corruption("speckle_noise")
def speckle_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicative Gaussian noise: x + x·n."""
    std = _level((0.06, 0.10, 0.12, 0.16, 0.20), severity)
    v = _float(x)
    return _uint8(v + v * rng.normal(0.0, std, x.shape))


# -- blur -----------------------------------------------------------------------------------


@corruption("gaussian_blur")
def gaussian_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur (sigma in pixels)."""
    sigma = _level((0.4, 0.6, 0.7, 0.8, 1.0), severity)
    return _uint8(_filter(_float(x), _gaussian_kernel(sigma)))


@corruption("defocus_blur")
def defocus_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Defocus: the mean over a disk (radius in pixels), as an out-of-focus lens spreads."""
    radius = _level((1.0, 1.2, 1.5, 2.0, 2.5), severity)
    return _uint8(_filter(_float(x), _disk_kernel(radius)))


@corruption("glass_blur")
def glass_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Frosted glass: a light Gaussian blur, then every pixel swapped with a random
    neighbour up to `reach` pixels away, then blurred again."""
    sigma, reach = _level(((0.3, 1), (0.4, 1), (0.5, 1), (0.4, 2), (0.5, 2)), severity)
    kernel = _gaussian_kernel(sigma)
    v = _filter(_float(x), kernel)
    n, h, w, _ = v.shape
    dy = rng.integers(-reach, reach + 1, (n, h, w))
    dx = rng.integers(-reach, reach + 1, (n, h, w))
    ys = np.clip(np.arange(h)[None, :, None] + dy, 0, h - 1)
    xs = np.clip(np.arange(w)[None, None, :] + dx, 0, w - 1)
    v = v[np.arange(n)[:, None, None], ys, xs]
    return _uint8(_filter(v, kernel))


# -- photometric and digital --------------------------------------------------------------


@corruption("brightness")
def brightness(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Raise the HSV value by `delta`, keeping hue and saturation."""
    delta = _level((0.1, 0.2, 0.3, 0.4, 0.5), severity)
    v = _float(x)
    value = v.max(axis=-1, keepdims=True)
    raised = np.clip(value + delta, 0.0, 1.0)
    scaled = v * np.divide(raised, value, out=np.zeros_like(value), where=value > 0)
    return _uint8(np.where(value > 0, scaled, raised))


@corruption("contrast")
def contrast(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Pull every pixel toward the image mean by a factor."""
    factor = _level((0.75, 0.5, 0.4, 0.3, 0.15), severity)
    v = _float(x)
    mean = v.mean(axis=(1, 2, 3), keepdims=True)
    return _uint8((v - mean) * factor + mean)


@corruption("saturate")
def saturate(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Scale the HSV saturation by `gain` and add `shift`, keeping hue and value
    (grey pixels, which have no hue, stay grey)."""
    gain, shift = _level(((0.3, 0.0), (0.1, 0.0), (2.0, 0.0), (5.0, 0.1), (20.0, 0.1)), severity)
    v = _float(x)
    value = v.max(axis=-1, keepdims=True)
    sat = np.divide(value - v.min(axis=-1, keepdims=True), value,
                    out=np.zeros_like(value), where=value > 0)
    new_sat = np.clip(sat * gain + shift, 0.0, 1.0)
    ratio = np.divide(new_sat, sat, out=np.ones_like(sat), where=sat > 0)
    return _uint8(value - (value - v) * ratio)


def _per_image(x: np.ndarray, fn: Callable) -> np.ndarray:
    """Apply a PIL image → PIL image function to every image of `x`."""
    from PIL import Image

    return np.stack([np.asarray(fn(Image.fromarray(img)), dtype=np.uint8) for img in x])


@corruption("pixelate")
def pixelate(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Shrink by a factor (box filter) and enlarge back (box filter)."""
    from PIL import Image

    factor = _level((0.95, 0.9, 0.85, 0.75, 0.65), severity)
    h, w = x.shape[1], x.shape[2]
    small = (max(1, int(w * factor)), max(1, int(h * factor)))
    box = Image.Resampling.BOX
    return _per_image(x, lambda im: im.resize(small, box).resize((w, h), box))


@corruption("jpeg_compression")
def jpeg_compression(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Encode as JPEG at a low quality and decode again (Pillow)."""
    from PIL import Image

    quality = _level((80, 65, 58, 50, 40), severity)

    def roundtrip(im):
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=quality)
        with Image.open(io.BytesIO(buf.getvalue())) as out:
            return out.convert("RGB")

    return _per_image(x, roundtrip)
