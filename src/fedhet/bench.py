"""Local-training throughput: our engine against the usual FL-framework pipeline.

The reference is written the way most FL frameworks train a client: a DataLoader with
`num_workers = min(4, cores)` over a Dataset that turns each PIL image into a tensor with
per-sample torchvision transforms (RandomCrop with padding, RandomHorizontalFlip, ToTensor,
Normalize), and a deep copy of the global model per client. Both train the same model on
the same data with the same batch size; the command prints samples/s and the ratio.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedhet.config import resolve_run
from fedhet.data import load_dataset
from fedhet.engine.device import pick_device
from fedhet.engine.federation import Federation
from fedhet.models import build_model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _client_indices(n_total: int, clients: int, samples: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.choice(n_total, samples, replace=samples > n_total) for _ in range(clients)]


def engine_throughput(run: dict[str, Any], data: Any, indices: list[np.ndarray],
                      device: torch.device, rounds: int = 2) -> tuple[float, float]:
    """Samples/s of our engine, and seconds per round (after one warm-up round)."""
    fed = Federation(run, data, indices, device)
    fed.run_round(1)
    _sync(device)
    start = time.perf_counter()
    for r in range(2, rounds + 2):
        fed.run_round(r).train_loss.item()
    _sync(device)
    elapsed = (time.perf_counter() - start) / rounds
    return sum(len(ix) for ix in indices) / elapsed, elapsed


class _PILDataset(torch.utils.data.Dataset):
    """Per-sample PIL → tensor transforms, as torchvision's CIFAR datasets do."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform: Any) -> None:
        from PIL import Image

        self.images = [Image.fromarray(im.squeeze(-1) if im.shape[-1] == 1 else im)
                       for im in images]
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.images[i]), int(self.labels[i])


def reference_throughput(run: dict[str, Any], data: Any, indices: list[np.ndarray],
                         device: torch.device, rounds: int = 2) -> float:
    """Samples/s of the DataLoader + deep-copy pipeline (after one warm-up round)."""
    import torchvision.transforms as T

    size = int(data.x_train.shape[-1])
    transform = T.Compose([
        T.RandomCrop(size, padding=max(1, round(size / 8))), T.RandomHorizontalFlip(),
        T.ToTensor(), T.Normalize(data.mean, data.std),
    ])
    images = data.x_train.permute(0, 2, 3, 1).numpy()
    labels = data.y_train.numpy()
    workers = min(4, os.cpu_count() or 1)
    loaders = [torch.utils.data.DataLoader(
        _PILDataset(images[ix], labels[ix], transform), batch_size=run["training"]["batch_size"],
        shuffle=True, num_workers=workers, persistent_workers=False)
        for ix in indices]
    m = run["model"]
    global_model = build_model(m["name"], data.num_classes, int(data.x_train.shape[1]), size,
                               m["width"]).to(device)
    t = run["training"]

    def one_round() -> None:
        states = []
        for loader in loaders:
            model = copy.deepcopy(global_model)
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"],
                                  weight_decay=t["weight_decay"])
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            states.append(model.state_dict())
        avg = {k: sum(s[k].float() for s in states) / len(states) for k in states[0]}
        global_model.load_state_dict({k: v.to(states[0][k].dtype) for k, v in avg.items()})

    one_round()
    _sync(device)
    start = time.perf_counter()
    for _ in range(rounds):
        one_round()
    _sync(device)
    return sum(len(ix) for ix in indices) * rounds / (time.perf_counter() - start)


def main(args: argparse.Namespace) -> int:
    device = pick_device(args.device)
    data = load_dataset(args.dataset, "resources/datasets", args.options)
    indices = _client_indices(len(data.y_train), args.clients, args.samples)
    run = resolve_run({
        "dataset": {"name": args.dataset, "options": args.options},
        "model": {"name": args.model, "width": args.width},
        "partition": {"num_clients": args.clients},
        "training": {"batch_size": args.batch_size, "lr": 0.01, "momentum": 0.9,
                     "weight_decay": 1e-4, "clients_per_round": args.clients,
                     "augment": "crop_flip"},
        "runtime": {"device": str(device), "bf16": device.type == "cuda",
                    "channels_last": device.type == "cuda"},
    })
    print(f"device {device} | model {args.model} width {args.width} | {args.dataset} "
          f"{tuple(data.x_train.shape[1:])} | {args.clients} clients × {args.samples} samples, "
          f"batch {args.batch_size}")
    ours, _ = engine_throughput(run, data, indices, device)
    ref = reference_throughput(run, data, indices, device)
    print(f"engine     {ours:10.1f} samples/s")
    print(f"reference  {ref:10.1f} samples/s  (DataLoader, {min(4, os.cpu_count() or 1)} workers, "
          "PIL transforms, deep-copied model)")
    print(f"speed-up   {ours / ref:10.2f}x")
    if args.round_time:
        paper = _client_indices(len(data.y_train), 5, 5000)
        paper_run = resolve_run({**run, "model": {"name": "resnet18", "width": 1.0},
                                 "training": {**run["training"], "batch_size": 128,
                                              "clients_per_round": 5},
                                 "partition": {"num_clients": 5}})
        _, seconds = engine_throughput(paper_run, data, paper, device)
        print(f"FedAvg round, ResNet-18, 5 clients × 5000 images, batch 128: {seconds:.2f} s "
              "(paper anchor: about 32 s on an RTX 2080 Ti)")
    return 0
