"""Local-training throughput: our engine against the usual FL-framework pipeline.

The reference is written the way most FL frameworks train a client: a DataLoader over a Dataset
that turns each PIL image into a tensor with per-sample torchvision transforms (RandomCrop with
padding, RandomHorizontalFlip, ToTensor, Normalize), and a deep copy of the global model per
client. To be fair to it, it runs with 0 loader workers and with `min(4, cores)` persistent
workers, and the better of the two is the reference. Both train the same model on the same
data with the same batch size; every figure is the median of `--repeats` timed windows after a
warm-up round, and the command prints samples/s and the ratio.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedhet.config import resolve_run
from fedhet.data import load_dataset
from fedhet.engine.federation import Federation
from fedhet.models import build_model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _client_indices(n_total: int, clients: int, samples: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.choice(n_total, samples, replace=samples > n_total) for _ in range(clients)]


def timed(one_round: Callable[[], Any], device: torch.device, rounds: int,
          repeats: int) -> list[float]:
    """Seconds per round of `repeats` windows of `rounds` rounds each, after a warm-up round."""
    one_round()
    _sync(device)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(rounds):
            one_round()
        _sync(device)
        seconds.append((time.perf_counter() - start) / rounds)
    return seconds


def engine_round_seconds(run: dict[str, Any], data: Any, indices: list[np.ndarray],
                         device: torch.device, rounds: int = 2, repeats: int = 3) -> list[float]:
    """Seconds per round of our engine (`timed`); with `runtime.client_workers` N, the clients
    share this process's torch threads (each gets 1/N of them)."""
    cores = torch.get_num_threads()
    torch.set_num_threads(max(1, cores // run["runtime"]["client_workers"]))
    try:
        fed = Federation(run, data, indices, device)
        counter = iter(range(1, 10**9))
        return timed(lambda: fed.run_round(next(counter)).train_loss.item(), device, rounds,
                     repeats)
    finally:
        torch.set_num_threads(cores)


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


def reference_round_seconds(run: dict[str, Any], data: Any, indices: list[np.ndarray],
                            device: torch.device, workers: int, rounds: int = 2,
                            repeats: int = 3) -> list[float]:
    """Seconds per round of the DataLoader + deep-copy pipeline with `workers` loader workers
    (persistent: started once, not per round), timed as `timed`."""
    import torchvision.transforms as T

    size = int(data.x_train.shape[-1])
    transform = T.Compose([
        T.RandomCrop(size, padding=max(1, round(size / 8))), T.RandomHorizontalFlip(),
        T.ToTensor(), T.Normalize(data.mean, data.std),
    ])
    images = data.x_train.permute(0, 2, 3, 1).numpy()
    labels = data.y_train.numpy()
    loaders = [torch.utils.data.DataLoader(
        _PILDataset(images[ix], labels[ix], transform), batch_size=run["training"]["batch_size"],
        shuffle=True, num_workers=workers, persistent_workers=workers > 0)
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

    return timed(one_round, device, rounds, repeats)


def _spread(seconds: list[float], samples: int) -> str:
    rates = sorted(samples / s for s in seconds)
    return (f"{statistics.median(rates):10.1f} samples/s  "
            f"(min {rates[0]:.1f}, max {rates[-1]:.1f}, {len(rates)} repeats)")


def throughput_run(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The resolved run the throughput comparison trains: on a GPU in bf16 and channels-last,
    on a CPU in the default mode."""
    gpu = device.type == "cuda"
    return resolve_run({
        "dataset": {"name": args.dataset, "options": args.options},
        "model": {"name": args.model, "width": args.width},
        "partition": {"num_clients": args.clients},
        "training": {"batch_size": args.batch_size, "lr": 0.01, "momentum": 0.9,
                     "weight_decay": 1e-4, "clients_per_round": args.clients,
                     "augment": "crop_flip"},
        "runtime": {"device": str(device), "precision": "bf16" if gpu else "default",
                    "channels_last": gpu, "client_workers": args.client_workers},
    })


def throughput(args: argparse.Namespace, device: torch.device) -> None:
    """Samples/s of our engine against the PIL-transform reference (the module docstring)."""
    data = load_dataset(args.dataset, "resources/datasets", args.options)
    indices = _client_indices(len(data.y_train), args.clients, args.samples)
    run = throughput_run(args, device)
    samples = sum(len(ix) for ix in indices)
    timing = {"rounds": args.rounds, "repeats": args.repeats}
    print(f"device {device} | torch threads {torch.get_num_threads()} | model {args.model} "
          f"width {args.width} | {args.dataset} {tuple(data.x_train.shape[1:])} | "
          f"{args.clients} clients × {args.samples} samples, batch {args.batch_size}")
    ours = engine_round_seconds(run, data, indices, device, **timing)
    print(f"engine     {_spread(ours, samples)}  client_workers {args.client_workers} × "
          f"{max(1, torch.get_num_threads() // args.client_workers)} thread(s)")
    loader_workers = sorted({0, min(4, os.cpu_count() or 1)})
    refs = {}
    for workers in loader_workers:
        refs[workers] = reference_round_seconds(run, data, indices, device, workers, **timing)
        print(f"reference  {_spread(refs[workers], samples)}  (DataLoader, {workers} workers, "
              "PIL transforms, deep-copied model)")
    best = min(refs, key=lambda w: statistics.median(refs[w]))
    ratio = statistics.median(refs[best]) / statistics.median(ours)
    print(f"speed-up   {ratio:10.2f}x  (medians; against the reference with {best} workers)")

