"""Generators of virtual datasets: images that carry no information about the natural data.

Every generator takes the number of classes, images per class, image size and channels, a
seed, and its own options, and returns float images in [-1, 1]-ish range `[N, C, H, W]`
plus int64 labels; `fedhet.virtual.make_virtual_dataset` quantises them to uint8 as
torchvision's `save_image(normalize=True, value_range=(-1, 1))` does. All random draws come
from `torch.Generator`s seeded by `derive_seed(seed, kind, purpose, ...)` (network weights,
class means and each class's samples have their own keys), never from the global torch RNG,
so a dataset depends only on its settings, and the first n images of a class do not change
when more images per class are asked for.

Kinds (VHL, App. C.3 and Table 6; details of the authors' generation script where the paper
is silent). Their options and defaults are listed in `fedhet.virtual.spec`.

- `stylegan`: an untrained StyleGAN-v2 generator (our own implementation of the architecture:
  pixel norm + mapping MLP, constant 4×4 input, modulated 3×3 convolutions with weight
  demodulation, transposed-convolution upsampling followed by a [1,3,3,1] blur, noise injection,
  fused leaky ReLU, modulated 1×1 "to RGB" layers with an upsampled skip path). One latent
  mean per class μ_k ~ N(0, σ_m² I); each image uses z ~ N(μ_k, σ_z² I), the same style for
  every layer (truncation 1, no style mixing). As in the authors' code, noise injection weights
  start at 0, so the injected noise has no effect on an untrained generator and classes differ
  only through μ_k. Code defaults: style_dim 64, n_mlp 1, σ_m 0.5, σ_z 0.3; for ≥ 100 classes
  style_dim 256 and σ_z 0.2. The code's generator has 512 channels at every resolution up to
  32 px; here the channel count is the option `width`, default 128 (assumed: 10 × 200 images
  take about 3 s at 16 px and 30 s at 32 px on one CPU core, against about 5 min at width 512;
  set `width: 512` for the code's width). Sizes that are not a
  power of two are generated at the next power of two and resized (antialiased bilinear).
- `noise`: upsampled Gaussian noise. Class mean in R^{C×8×8} ~ N(0, 1); samples
  N(mean, 0.5²), bilinearly upsampled to the image size.
- `cnn`: simple CNN generators, one randomly initialised decoder per class (a linear layer from
  z ∈ R^8 ~ N(0, I), a 4×4 transposed convolution, stride-2 transposed convolutions up to the
  image size, three 3×3 convolutions, tanh). Weights are He-normal with zero biases (the
  authors' published decoder cannot be built as it stands; He init keeps the activations at
  unit scale so an untrained decoder does not collapse to a constant image). Then, as the
  authors' script, each decoder is trained for `train_steps` (50) SGD steps (lr 0.01, momentum
  0.9, batch 64) to make its outputs diverse: the loss is the mean squared off-diagonal
  correlation between the (centred, L2-normalised) flattened outputs of a batch. Normalising
  stops the trivial solution of shrinking the outputs. `ngf` (width of the last layers) is 16
  by default (the code's is 64; assumed for CPU speed).
- `tinyimagenet10`: real images: the first `num_classes` classes of a real dataset (default
  `tinyimagenet`, 10 classes; wnids sorted as in `fedhet.data`), `images_per_class` training
  images per class drawn at random by the seed, converted to the requested channels and size.
  Option `dataset` names another registered dataset to use instead — the offline demo uses
  `digits100` (its classes 0..9: a 0 next to each digit, coloured when channels = 3) as a
  stand-in for Tiny-ImageNet.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedhet.engine.seeding import derive_seed

SQRT2 = math.sqrt(2.0)
BLUR_KERNEL = (1.0, 3.0, 3.0, 1.0)


def _gen(seed: int, *keys: object) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(derive_seed(seed, *keys))
    return g


def _randn(gen: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=gen)


# =========================================================================================
# StyleGAN-v2 (untrained)
# =========================================================================================


def _blur_kernel(factor: float = 1.0) -> Tensor:
    k = torch.tensor(BLUR_KERNEL)
    k2 = k[:, None] * k[None, :]
    return k2 / k2.sum() * factor


def _depthwise(x: Tensor, kernel: Tensor, pad: tuple[int, int]) -> Tensor:
    """Pad by (pad0, pad1) on each spatial side and convolve every channel with `kernel`
    (FIR filtering as StyleGAN's upfirdn2d with up = down = 1; the kernel is symmetric)."""
    c = x.shape[1]
    x = F.pad(x, (pad[0], pad[1], pad[0], pad[1]))
    weight = kernel.to(x.dtype).expand(c, 1, *kernel.shape)
    return F.conv2d(x, weight, groups=c)


def _upsample2(x: Tensor) -> Tensor:
    """StyleGAN's `Upsample` (factor 2, [1,3,3,1] kernel): zero insertion + FIR filter."""
    b, c, h, w = x.shape
    up = x.new_zeros(b, c, 2 * h, 2 * w)
    up[:, :, ::2, ::2] = x
    return _depthwise(up, _blur_kernel(4.0), (2, 1))


def _fused_lrelu(x: Tensor, bias: Tensor) -> Tensor:
    shape = (1, -1) + (1,) * (x.dim() - 2)
    return F.leaky_relu(x + bias.view(shape), 0.2) * SQRT2


class _EqualLinear(nn.Module):
    """Equalised-lr linear layer at initialisation: weight N(0, 1)/sqrt(in) (the lr multiplier
    of the mapping network cancels out before training), bias `bias_init`."""

    def __init__(self, in_dim: int, out_dim: int, gen: torch.Generator, bias_init: float = 0.0,
                 activation: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(_randn(gen, out_dim, in_dim))
        self.bias = nn.Parameter(torch.full((out_dim,), float(bias_init)))
        self.scale = 1.0 / math.sqrt(in_dim)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        out = F.linear(x, self.weight * self.scale)
        if self.activation:
            return _fused_lrelu(out, self.bias)
        return out + self.bias


class _ModulatedConv(nn.Module):
    """Modulated convolution: per-sample input-channel scales from the style, optional weight
    demodulation, optional ×2 upsampling (transposed convolution + blur)."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, style_dim: int,
                 gen: torch.Generator, demodulate: bool = True, upsample: bool = False) -> None:
        super().__init__()
        self.in_ch, self.out_ch, self.kernel = in_ch, out_ch, kernel
        self.weight = nn.Parameter(_randn(gen, 1, out_ch, in_ch, kernel, kernel))
        self.scale = 1.0 / math.sqrt(in_ch * kernel * kernel)
        self.modulation = _EqualLinear(style_dim, in_ch, gen, bias_init=1.0)
        self.demodulate = demodulate
        self.upsample = upsample

    def forward(self, x: Tensor, style: Tensor) -> Tensor:
        # Modulating the weight per sample equals scaling the input channels by the style and
        # the output channels by the demodulation factor around a convolution with the shared
        # weight (StyleGAN2's non-fused path); a plain convolution is much faster on a CPU.
        b = x.shape[0]
        s = self.modulation(style)  # [b, in]
        weight = self.weight[0] * self.scale  # [out, in, k, k]
        x = x * s.view(b, -1, 1, 1)
        if self.upsample:
            # transposed conv (stride 2) gives 2h+1; the blur (pad 1 each side, 4×4) gives 2h
            out = F.conv_transpose2d(x, weight.transpose(0, 1), stride=2)
        else:
            out = F.conv2d(x, weight, padding=self.kernel // 2)
        if self.demodulate:
            demod = torch.rsqrt(s.pow(2) @ weight.pow(2).sum(dim=(2, 3)).t() + 1e-8)  # [b, out]
            out = out * demod.view(b, -1, 1, 1)
        if self.upsample:
            out = _depthwise(out, _blur_kernel(4.0), (1, 1))
        return out


class _StyledConv(nn.Module):
    """Modulated conv → noise injection (weight starts at 0) → fused leaky ReLU."""

    def __init__(self, in_ch: int, out_ch: int, style_dim: int, gen: torch.Generator,
                 upsample: bool = False, noise_weight: float = 0.0) -> None:
        super().__init__()
        self.conv = _ModulatedConv(in_ch, out_ch, 3, style_dim, gen, upsample=upsample)
        self.noise_weight = nn.Parameter(torch.full((1,), float(noise_weight)))
        self.bias = nn.Parameter(torch.zeros(out_ch))

    def forward(self, x: Tensor, style: Tensor, noise_gen: torch.Generator) -> Tensor:
        out = self.conv(x, style)
        b, _, h, w = out.shape
        noise = torch.randn(b, 1, h, w, generator=noise_gen)
        out = out + self.noise_weight * noise
        return _fused_lrelu(out, self.bias)


class _ToRGB(nn.Module):
    def __init__(self, in_ch: int, channels: int, style_dim: int, gen: torch.Generator) -> None:
        super().__init__()
        self.conv = _ModulatedConv(in_ch, channels, 1, style_dim, gen, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, x: Tensor, style: Tensor, skip: Tensor | None) -> Tensor:
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + _upsample2(skip)
        return out


class StyleGAN2Generator(nn.Module):
    """An untrained StyleGAN-v2 generator (rosinality layout) with `width` channels."""

    def __init__(self, size: int, channels: int, style_dim: int, n_mlp: int, width: int,
                 gen: torch.Generator, noise_weight: float = 0.0) -> None:
        super().__init__()
        log_size = int(math.log2(size))
        if 2**log_size != size or size < 4:
            raise ValueError(f"StyleGAN generator size must be a power of two >= 4, got {size}")
        self.style_dim = style_dim
        self.mapping = nn.ModuleList(
            _EqualLinear(style_dim, style_dim, gen, activation=True) for _ in range(n_mlp)
        )
        self.const = nn.Parameter(_randn(gen, 1, width, 4, 4))
        self.conv1 = _StyledConv(width, width, style_dim, gen, noise_weight=noise_weight)
        self.to_rgb1 = _ToRGB(width, channels, style_dim, gen)
        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        for _ in range(3, log_size + 1):
            self.convs.append(_StyledConv(width, width, style_dim, gen, upsample=True,
                                          noise_weight=noise_weight))
            self.convs.append(_StyledConv(width, width, style_dim, gen, noise_weight=noise_weight))
            self.to_rgbs.append(_ToRGB(width, channels, style_dim, gen))

    def style(self, z: Tensor) -> Tensor:
        w = z * torch.rsqrt(z.pow(2).mean(dim=1, keepdim=True) + 1e-8)  # pixel norm
        for layer in self.mapping:
            w = layer(w)
        return w

    def forward(self, z: Tensor, noise_gen: torch.Generator) -> Tensor:
        w = self.style(z)
        out = self.const.expand(z.shape[0], -1, -1, -1)
        out = self.conv1(out, w, noise_gen)
        skip = self.to_rgb1(out, w, None)
        for i, to_rgb in enumerate(self.to_rgbs):
            out = self.convs[2 * i](out, w, noise_gen)
            out = self.convs[2 * i + 1](out, w, noise_gen)
            skip = to_rgb(out, w, skip)
        return skip


def _generation_size(size: int) -> int:
    return max(4, 2 ** math.ceil(math.log2(size)))


def _to_size(x: Tensor, size: int) -> Tensor:
    if x.shape[-1] == size:
        return x
    shrink = size < x.shape[-1]
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                         antialias=shrink)


def generate_stylegan(num_classes: int, images_per_class: int, size: int, channels: int,
                      seed: int, *, style_dim: int, n_mlp: int, sigma_m: float, sigma_z: float,
                      width: int, noise_weight: float, batch: int) -> tuple[Tensor, Tensor]:
    gsize = _generation_size(size)
    net = StyleGAN2Generator(gsize, channels, style_dim, n_mlp, width,
                             _gen(seed, "stylegan", "weights"), noise_weight).eval()
    means = _randn(_gen(seed, "stylegan", "means"), num_classes, style_dim) * sigma_m
    xs, ys = [], []
    with torch.no_grad():
        for k in range(num_classes):
            zgen = _gen(seed, "stylegan", "z", k)
            ngen = _gen(seed, "stylegan", "noise", k)
            z = means[k] + sigma_z * _randn(zgen, images_per_class, style_dim)
            for start in range(0, images_per_class, batch):
                xs.append(_to_size(net(z[start:start + batch], ngen), size))
            ys.append(torch.full((images_per_class,), k, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


# =========================================================================================
# Upsampled Gaussian noise
# =========================================================================================


def generate_noise(num_classes: int, images_per_class: int, size: int, channels: int, seed: int,
                   *, base: int, mean_std: float, sample_std: float) -> tuple[Tensor, Tensor]:
    means = _randn(_gen(seed, "noise", "means"), num_classes, channels, base, base) * mean_std
    xs, ys = [], []
    for k in range(num_classes):
        eps = _randn(_gen(seed, "noise", "samples", k), images_per_class, channels, base, base)
        small = means[k] + sample_std * eps
        xs.append(F.interpolate(small, size=(size, size), mode="bilinear", align_corners=False))
        ys.append(torch.full((images_per_class,), k, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


# =========================================================================================
# Simple CNN generators (one decoder per class)
# =========================================================================================


class ConvDecoder(nn.Module):
    """z → linear → 4×4 transposed conv → stride-2 transposed convs → three 3×3 convs → tanh."""

    def __init__(self, size: int, channels: int, z_dim: int, h_dim: int, ngf: int) -> None:
        super().__init__()
        ups = int(math.log2(size)) - 2
        if 2 ** (ups + 2) != size or ups < 0:
            raise ValueError(f"CNN generator size must be a power of two >= 4, got {size}")
        self.fc = nn.Linear(z_dim, h_dim)
        widths = [min(ngf * 2 ** (ups - i), 8 * ngf) for i in range(ups + 1)]
        layers: list[nn.Module] = [nn.ConvTranspose2d(h_dim, widths[0], 4, 1, 0), nn.ReLU()]
        for a, b in pairwise(widths):
            layers += [nn.ConvTranspose2d(a, b, 4, 2, 1), nn.ReLU()]
        last = widths[-1]
        layers += [nn.Conv2d(last, last, 3, 1, 1), nn.ReLU(),
                   nn.Conv2d(last, last, 3, 1, 1), nn.ReLU(),
                   nn.Conv2d(last, channels, 3, 1, 1), nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.h_dim = h_dim

    def forward(self, z: Tensor) -> Tensor:
        h = F.relu(self.fc(z)).view(z.shape[0], self.h_dim, 1, 1)
        return self.net(h)


def _he_init(module: nn.Module, gen: torch.Generator) -> None:
    """He-normal weights (fan-in, ReLU gain), zero biases, from `gen`."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
                continue
            owner = _owner(module, name)
            fan_in = p.shape[1] * (p[0, 0].numel() if p.dim() > 2 else 1)
            if isinstance(owner, nn.ConvTranspose2d):
                # weight [in, out, k, k]: an output pixel sums in·(k/stride)² terms, or `in`
                # terms for the first layer (a 1×1 input)
                stride = owner.stride[0]
                fan_in = p.shape[0] * (p[0, 0].numel() // stride**2 if stride > 1 else 1)
            p.copy_(_randn(gen, *p.shape) * math.sqrt(2.0 / fan_in))


def _owner(module: nn.Module, dotted: str) -> nn.Module:
    for part in dotted.split(".")[:-1]:
        module = getattr(module, part)
    return module


def diversity_loss(out: Tensor) -> Tensor:
    """Mean squared off-diagonal correlation between the flattened samples of a batch."""
    flat = out.flatten(1)
    flat = F.normalize(flat - flat.mean(dim=1, keepdim=True), dim=1)
    gram = flat @ flat.t()
    b = gram.shape[0]
    off = gram - torch.diag_embed(torch.diagonal(gram))
    return off.pow(2).sum() / (b * (b - 1))


def generate_cnn(num_classes: int, images_per_class: int, size: int, channels: int, seed: int,
                 *, z_dim: int, h_dim: int, ngf: int, train_steps: int, train_lr: float,
                 train_momentum: float, train_batch: int, batch: int) -> tuple[Tensor, Tensor]:
    gsize = _generation_size(size)
    xs, ys = [], []
    for k in range(num_classes):
        net = ConvDecoder(gsize, channels, z_dim, h_dim, ngf)
        _he_init(net, _gen(seed, "cnn", "weights", k))
        if train_steps:
            tgen = _gen(seed, "cnn", "train", k)
            opt = torch.optim.SGD(net.parameters(), lr=train_lr, momentum=train_momentum)
            with torch.enable_grad():
                for _ in range(train_steps):
                    opt.zero_grad()
                    diversity_loss(net(_randn(tgen, train_batch, z_dim))).backward()
                    opt.step()
        net.eval()
        z = _randn(_gen(seed, "cnn", "z", k), images_per_class, z_dim)
        with torch.no_grad():
            for start in range(0, images_per_class, batch):
                xs.append(_to_size(net(z[start:start + batch]), size))
        ys.append(torch.full((images_per_class,), k, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


# =========================================================================================
# A real-image subset (Tiny-ImageNet, or a stand-in)
# =========================================================================================


def generate_real_subset(num_classes: int, images_per_class: int, size: int, channels: int,
                         seed: int, *, dataset: str, dataset_options: dict[str, Any],
                         dataset_root: str) -> tuple[Tensor, Tensor]:
    """The first `num_classes` classes of `dataset`, `images_per_class` random training images
    each, as floats in [-1, 1] (quantised back to the same uint8 values by the caller)."""
    from fedhet.data import load_dataset
    from fedhet.data.imageops import conform

    options = dict(dataset_options)
    if dataset.startswith("digits"):  # stand-ins build as many images per class as asked
        options.setdefault("train_per_class", images_per_class)
        options.setdefault("channels", channels)
    data = load_dataset(dataset, dataset_root, options)
    if num_classes > data.num_classes:
        raise ValueError(f"virtual data: '{dataset}' has {data.num_classes} classes, "
                         f"{num_classes} asked for")
    gen = _gen(seed, "real", dataset)
    xs, ys = [], []
    for k in range(num_classes):
        idx = torch.nonzero(data.y_train == k).flatten()
        if len(idx) < images_per_class:
            raise ValueError(f"virtual data: class {k} of '{dataset}' has {len(idx)} training "
                             f"images, {images_per_class} asked for")
        pick = idx[torch.randperm(len(idx), generator=gen)[:images_per_class]].sort().values
        x = conform(data.x_train[pick].clone(), channels, size)
        xs.append(x.float() / 127.5 - 1.0)
        ys.append(torch.full((images_per_class,), k, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


Generator = Callable[..., tuple[Tensor, Tensor]]

# kind → generate(num_classes, images_per_class, size, channels, seed, **options); the options
# and their defaults are in `fedhet.virtual.spec`.
GENERATORS: dict[str, Generator] = {
    "stylegan": generate_stylegan,
    "noise": generate_noise,
    "cnn": generate_cnn,
    "tinyimagenet10": generate_real_subset,
}
