"""FedLGD's initial local virtual data, built once per setting and cached like a dataset.

For each client k (its partition of the training set, normalised as the run normalises it):
1. per-class statistics μ_c, σ_c of its images (`matching.class_statistics`);
2. `ipc` images per class drawn from N(μ_c, σ_c) (`init: normal`), N(0, 1) (`noise`) or its own
   real images (`real`); a class the client lacks starts from the global statistics and is
   left out of matching (assumed);
3. `warmup_steps` steps of distribution matching, each against a fresh randomly initialised
   ConvNet (frozen; the code uses a ConvNet whatever the run's model), with `real_batch` real
   images per class and one Siamese augmentation draw per class.
The server's initial global virtual data, `server_ipc` per class, is drawn from the plain mean
over the clients holding the class of their μ and σ.

`<root>/distilled/<key>.pt` holds a torch dict (format, settings, per-client `x` float32 and
`y`, `global_x`, `global_y`, the statistics and the warm-up's DM losses) next to
`<key>.pt.sha256`, both written atomically; loading checks the checksum. Every draw comes from
a generator keyed by (seed, purpose, client, step, class), so a CPU build is bit-reproducible.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedhet.data.core import CacheError, checksum_path, verify_checksum, write_checksummed
from fedhet.declare import BuildPlaces
from fedhet.distill.matching import class_statistics, dm_step_loss, images_from_statistics, match
from fedhet.distill.spec import CACHE_FORMAT, distilled_path
from fedhet.engine.augment import Augmenter
from fedhet.engine.seeding import derive_seed, generator


@dataclass
class Distilled:
    """Initial local virtual data of every client and the initial global virtual data."""

    x: list[Tensor]  # per client, float32 [C·ipc, ch, H, W], normalised input space
    y: list[Tensor]  # per client, int64 class-major labels
    global_x: Tensor
    global_y: Tensor
    settings: dict[str, Any]
    checksum: str
    path: Path | None = None


def _divide_by(params: Mapping[str, Any]) -> str:
    """`init_stats: fixed` divides the moments by the class's pixel count, `code` (the
    authors' code) by the client's."""
    return "client" if params["init_stats"] == "code" else "class"


def _embedding(num_classes: int, channels: int, size: int, width: float, depth: int,
               seed: int) -> torch.nn.Module:
    from fedhet.models import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = build_model("convnet", num_classes, channels, size, width, depth=depth)
    net.train()
    for p in net.parameters():
        p.requires_grad_(False)
    return net


def distill_client(x_real: Tensor, y_real: Tensor, num_classes: int, params: Mapping[str, Any],
                   seed: int, client: int, fallback: tuple[Tensor, Tensor]) -> dict[str, Any]:
    """One client's initial virtual images from its normalised real images (see the module
    note): {x, y, mu, sigma, counts, losses}."""
    p = params
    ipc, ch, size = int(p["ipc"]), x_real.shape[1], x_real.shape[-1]
    mu, sigma, counts = class_statistics(x_real, y_real, num_classes, _divide_by(p))
    present = counts > 0
    init_mu = torch.where(present[:, None], mu, fallback[0])
    init_sigma = torch.where(present[:, None], sigma, fallback[1])
    gen = generator(x_real.device, seed, "distill-init", client)
    if p["init"] == "normal":
        x, y = images_from_statistics(init_mu, init_sigma, ipc, size, gen)
    else:
        x, y = images_from_statistics(torch.zeros_like(mu), torch.ones_like(sigma), ipc, size,
                                      gen)
        if p["init"] == "real":  # the client's own images where it has enough of the class
            for c in range(num_classes):
                own = (y_real == c).nonzero().flatten()
                if len(own) >= ipc:
                    take = own[torch.randperm(len(own), generator=gen, device=own.device)[:ipc]]
                    x[c * ipc:(c + 1) * ipc] = x_real[take]
    ratios = dict(p["dsa"])

    def loss_of(images: Tensor, step: int) -> Tensor:
        net = _embedding(num_classes, ch, size, float(p["embed_width"]), int(p["embed_depth"]),
                         derive_seed(seed, "distill-embed", client, step))
        return dm_step_loss(net.features, x_real, y_real, images, ipc, int(p["real_batch"]),
                            ratios, (seed, "distill-real", client, step),
                            (seed, "dsa", client, step))

    steps = int(p["warmup_steps"]) if bool(present.any()) else 0
    x, losses = match(x, loss_of, steps, float(p["lr_img"]), float(p["img_momentum"]))
    return {"x": x.float().contiguous(), "y": y, "mu": mu, "sigma": sigma, "counts": counts,
            "losses": losses}


def make_distilled(settings: Mapping[str, Any], data: Any, client_indices: list[Any],
                   device: torch.device) -> dict[str, Any]:
    """The artefact's payload for a dataset (`fedhet.data.FedData`) and its partition."""
    p = settings["params"]
    seed = int(settings["seed"])
    augmenter = Augmenter("none", data.mean, data.std, int(data.x_train.shape[-1]), device)
    num_classes = int(data.num_classes)
    clients = []
    # global statistics first: the fallback of a class a client lacks
    stats = []
    for idx in client_indices:
        idx = torch.as_tensor(idx, dtype=torch.long)
        x = augmenter.test(data.x_train[idx].to(device))
        stats.append((x, data.y_train[idx].to(device)))
    moments = [class_statistics(x, y, num_classes, _divide_by(p)) for x, y in stats]
    holders = torch.stack([m[2] > 0 for m in moments]).float()  # [K, C]
    weight = holders / holders.sum(0).clamp(min=1)
    global_mu = torch.einsum("kc,kcj->cj", weight, torch.stack([m[0] for m in moments]))
    global_sigma = torch.einsum("kc,kcj->cj", weight, torch.stack([m[1] for m in moments]))
    for k, (x, y) in enumerate(stats):
        clients.append(distill_client(x, y, num_classes, p, seed, k, (global_mu, global_sigma)))
    gen = generator(device, seed, "distill-global")
    gx, gy = images_from_statistics(global_mu, global_sigma, int(p["server_ipc"]),
                                    int(data.x_train.shape[-1]), gen)
    return {
        "format": CACHE_FORMAT,
        "settings": dict(settings),
        "x": [c["x"].cpu() for c in clients],
        "y": [c["y"].cpu() for c in clients],
        "global_x": gx.float().cpu(),
        "global_y": gy.cpu(),
        "mu": torch.stack([c["mu"] for c in clients]).cpu(),
        "sigma": torch.stack([c["sigma"] for c in clients]).cpu(),
        "counts": torch.stack([c["counts"] for c in clients]).cpu(),
        "losses": [c["losses"] for c in clients],
    }


def load_or_make_distilled(settings: Mapping[str, Any], root: str | os.PathLike,
                           partitions: str | os.PathLike = "resources/partitions",
                           device: torch.device | str = "cpu") -> Distilled:
    """Load the artefact of `settings` from `<root>/distilled/`, building it first if needed
    (reading the dataset from `root` and the partition from `partitions`). Raises CacheError
    when the file does not match its recorded checksum or its settings."""
    path = distilled_path(settings, root)
    if not (path.exists() and checksum_path(path).exists()):
        from fedhet.data import load_dataset
        from fedhet.partition import load_or_make_partition

        d = settings["dataset"]
        data = load_dataset(d["name"], root, d["options"])
        part = load_or_make_partition(
            data, {**settings["partition"], "root": str(partitions)}, settings["partition_seed"])
        write_checksummed(path, make_distilled(settings, data, part.client_indices,
                                               torch.device(device)))
    actual = verify_checksum(path, "distilled data",
                             f"delete it and {checksum_path(path).name} to rebuild")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != CACHE_FORMAT or payload.get("settings") != dict(settings):
        raise CacheError(f"{path} does not hold the distilled data asked for; delete it to "
                         "rebuild")
    return Distilled(payload["x"], payload["y"], payload["global_x"], payload["global_y"],
                     dict(settings), actual, path)


def build_distilled(settings: Mapping[str, Any], places: BuildPlaces) -> tuple[Path, str]:
    """`fedhet distill`: the clients' cached initial virtual data of `settings` (built if
    needed) and what it holds."""
    data = load_or_make_distilled(settings, places.root, places.partitions, places.device)
    shapes = ", ".join(str(tuple(x.shape)) for x in data.x[:3])
    return data.path, (f"{len(data.x)} clients ({shapes}{', …' if len(data.x) > 3 else ''}), "
                       f"global {tuple(data.global_x.shape)}, sha256 {data.checksum}")
