"""The paper round timed per precision mode: our engine (clients one at a time, and stacked) and
a reference loop defined exactly.

The paper round (`RoundSize` defaults): one FedAvg round of ResNet-18 on 5 clients × 5,000
random uint8 CIFAR-shaped images (3×32×32, 10 classes), batch 128, SGD with momentum 0.9 and
weight decay 1e-4, random crop and flip. Every variant trains the same images, in the same
batches (each client's 5,000 as 39 batches of 128 and one of 8), in the same mode.

- `engine`: `Federation.run_round`, clients one at a time (`runtime.client_workers` of them at
  once on a CPU).
- `eager`: `engine` with `runtime.cuda_graphs` false: each step launched op by op, the graph's
  gain measured beside it (on a CPU the same as `engine`).
- `stacked`: the same with `training.vectorise_clients` (torch.func.vmap over the clients).
- `reference`: the loop most FL code runs. Per client a `DataLoader` (shuffled, batch 128, no
  workers, pinned memory on a GPU) over a `TensorDataset` of the client's images as float32 in
  [0, 1] on the CPU; each batch moved to the device and augmented there by the engine's own
  functions (`random_crop`, `random_flip`, then normalised); a `copy.deepcopy` of the global
  model; `torch.optim.SGD`; cross-entropy. The server then averages the clients' state dicts
  (every entry, as float, cast back). Same precision mode as the engine (`apply_modes`: the
  same autocast and TF32 flags, channels-last model and inputs, cuDNN's algorithm search when
  asked).

Timing: a warm-up round on a few batches of each client with the same batch shapes (so cuDNN's
algorithm choice, the caching allocator's pool and lazy initialisations are paid before), then
`timed_rounds` rounds, each between two CUDA events after a synchronisation (`perf_counter` on a
CPU); the figure is their median. Images/s counts training images; TFLOP/s multiplies them by
`fedhet.models.flops.flops_per_image` (forward and backward, 2 FLOPs per multiply-accumulate);
peak memory is `torch.cuda.max_memory_allocated` over the timed rounds (the data included).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedhet import atomic
from fedhet.models.flops import flops_per_image
from fedhet.bench.gpucheck.records import append_record, device_name, make_record
from fedhet.config import resolve_run
from fedhet.data.core import FedData
from fedhet.engine.augment import Augmenter, random_crop, random_flip
from fedhet.engine.federation import Federation
from fedhet.engine.modes import CPU_MODES, GPU_MODES, Mode, apply_modes
from fedhet.engine.seeding import derive_seed, generator
from fedhet.engine.vectorised import vectorise_decision
from fedhet.models import build_model


@dataclass(frozen=True)
class RoundSize:
    """What one round trains: `clients` × `images` images in batches of `batch_size`."""

    clients: int = 5
    images: int = 5000
    batch_size: int = 128
    model: str = "resnet18"
    width: float = 1.0
    image_size: int = 32
    num_classes: int = 10
    channels: int = 3
    options: str = "{}"  # the model's options, JSON

    @property
    def warmup_images(self) -> int:
        """Images per client of the warm-up round: two full batches and the round's last,
        shorter one (so the warm-up sees every batch shape of the round)."""
        return min(self.images, 2 * self.batch_size + self.images % self.batch_size)


def random_data(size: RoundSize, seed: int = 0) -> FedData:
    """`size.clients × size.images` random uint8 images with random labels (a few test images
    too: the engine wants a test set), CIFAR's normalisation statistics (0.5 for other than three
    channels)."""
    gen = torch.Generator().manual_seed(seed)
    n = size.clients * size.images
    shape = (size.channels, size.image_size, size.image_size)
    cifar = size.channels == 3
    return FedData(
        name="random", num_classes=size.num_classes, checksum="random",
        x_train=torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=gen),
        y_train=torch.randint(0, size.num_classes, (n,), generator=gen),
        x_test=torch.randint(0, 256, (size.num_classes, *shape), dtype=torch.uint8, generator=gen),
        y_test=torch.arange(size.num_classes),
        mean=(0.4914, 0.4822, 0.4465) if cifar else (0.5,) * size.channels,
        std=(0.2470, 0.2435, 0.2616) if cifar else (0.5,) * size.channels,
    )


def client_indices(size: RoundSize, per_client: int) -> list[np.ndarray]:
    """The first `per_client` of each client's own `size.images` images."""
    return [np.arange(k * size.images, k * size.images + per_client) for k in range(size.clients)]


def round_run(size: RoundSize, mode: Mode, device: torch.device, stacked: bool = False,
              client_workers: int = 1, graphs: bool = True) -> dict[str, Any]:
    """The resolved run of the paper round in `mode` (every client trains every round;
    `graphs`: `runtime.cuda_graphs`)."""
    return resolve_run({
        "dataset": {"name": "cifar10"},
        "model": {"name": size.model, "width": size.width, "options": json.loads(size.options)},
        "partition": {"scheme": "iid", "num_clients": size.clients},
        "algorithm": {"name": "fedavg"},
        "training": {"rounds": 1, "clients_per_round": size.clients, "local_epochs": 1,
                     "batch_size": size.batch_size, "lr": 0.01, "momentum": 0.9,
                     "weight_decay": 1e-4, "augment": "crop_flip", "vectorise_clients": stacked},
        "runtime": {"device": str(device), "client_workers": client_workers,
                    "cuda_graphs": graphs, **mode.runtime()},
    })


Builder = Callable[[list[np.ndarray]], tuple[Callable[[], None], str]]


def engine_builder(size: RoundSize, mode: Mode, data: FedData, device: torch.device,
                   stacked: bool, client_workers: int = 1, graphs: bool = True) -> Builder:
    """Rounds of our engine on given client indices, and how its clients trained (the log's
    words, with a channels-last request it did not honour)."""
    run = round_run(size, mode, device, stacked, client_workers, graphs)

    def build(indices: list[np.ndarray]) -> tuple[Callable[[], None], str]:
        fed = Federation(run, data, indices, device)
        rounds = iter(range(1, 10**9))
        return lambda: fed.run_round(next(rounds)), f"{fed.execution}; {fed.modes.summary()}"

    return build


def reference_builder(size: RoundSize, mode: Mode, data: FedData,
                      device: torch.device) -> Builder:
    """Rounds of the reference loop (module docstring) on given client indices, in the modes
    the engine would set (`apply_modes`: the same flags and autocast)."""
    augmenter = Augmenter("crop_flip", data.mean, data.std, size.image_size, device)
    images = data.x_train.float().div_(255.0)
    cuda = device.type == "cuda"
    modes = apply_modes(round_run(size, mode, device), device)
    autocast = modes.autocast
    layout = torch.channels_last if modes.channels_last else torch.contiguous_format
    torch.manual_seed(derive_seed(0, "reference"))
    global_model = build_model(size.model, size.num_classes, size.channels, size.image_size,
                               size.width, **json.loads(size.options)
                               ).to(device, memory_format=layout)
    gen = generator(device, 0, "reference batches")

    def build(indices: list[np.ndarray]) -> tuple[Callable[[], None], str]:
        loaders = [torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(images[ix], data.y_train[ix]),
            batch_size=size.batch_size, shuffle=True, pin_memory=cuda) for ix in indices]

        def one_round() -> None:
            states = []
            for loader in loaders:
                model = copy.deepcopy(global_model)
                model.train()
                opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                                      weight_decay=1e-4)
                for x, y in loader:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    x = augmenter.normalize(random_flip(random_crop(x, augmenter.padding, gen),
                                                        gen))
                    x = x.contiguous(memory_format=layout)
                    opt.zero_grad(set_to_none=True)
                    with autocast:
                        loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    opt.step()
                states.append(model.state_dict())
            global_model.load_state_dict(average_state_dicts(states))

        return one_round, ("DataLoader over a TensorDataset (float32, CPU), the engine's "
                           "crop+flip on the device, deepcopy per client, torch.optim.SGD, "
                           f"state-dict average; {modes.summary()}")

    return build


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean of each entry over `states`, computed in float and cast back to its dtype."""
    return {k: torch.stack([s[k].float() for s in states]).mean(0).to(states[0][k].dtype)
            for k in states[0]}


def round_seconds(one_round: Callable[[], None], device: torch.device) -> float:
    """Seconds of one round: CUDA events around it on a GPU, `perf_counter` elsewhere."""
    if device.type != "cuda":
        start = time.perf_counter()
        one_round()
        return time.perf_counter() - start
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    one_round()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1000.0


@dataclass
class Measured:
    """The figures of one variant in one mode, and its round to run again (`profile`)."""

    seconds: float
    peak_mem_bytes: int | None
    note: str
    one_round: Callable[[], None]


def measure(build: Builder, size: RoundSize, device: torch.device,
            timed_rounds: int) -> Measured:
    """A warm-up round on `size.warmup_images` of each client, then the median seconds of
    `timed_rounds` full rounds, and the peak memory over them. The note adds the warm-up's
    seconds (cuDNN's algorithm search is paid there)."""
    began = time.perf_counter()
    warm, _ = build(client_indices(size, size.warmup_images))
    warm()
    del warm
    gc.collect()  # the warm-up's copies of the model and data go before the peak is measured
    warmup = time.perf_counter() - began
    one_round, note = build(client_indices(size, size.images))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    seconds = statistics.median(round_seconds(one_round, device) for _ in range(timed_rounds))
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    note += f"; warm-up {warmup:.1f} s"
    return Measured(seconds, peak, note, one_round)


def profile(one_round: Callable[[], None], device: torch.device, path: Path) -> str:
    """One more round under torch.profiler: its busiest operators by own time on the device
    (on a CPU: by own CPU time) to `path`; returns a line of what the device did: the kernels'
    summed time against the round's wall time (a GPU far from busy is waiting for the host)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=activities) as prof:
        seconds = round_seconds(one_round, device)
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    if cuda:  # the kernels' rows (an operator's row repeats its kernels' time)
        busy = sum(e.self_device_time_total for e in events
                   if e.device_type == DeviceType.CUDA) / 1e6
    else:
        busy = events.self_cpu_time_total / 1e6
    line = (f"profiled round {seconds:.3f} s (under the profiler), "
            f"{'kernels' if cuda else 'operators'} {busy:.3f} s: "
            f"{'device' if cuda else 'CPU'} busy {100 * busy / seconds:.0f} %")
    atomic.write_text(path, line + "\n\n" + events.table(sort_by=key, row_limit=30) + "\n")
    return line


VARIANTS: dict[str, str] = {
    "engine": "engine, clients one at a time",
    "eager": "engine, clients one at a time, eager (no CUDA graphs)",
    "stacked": "engine, stacked clients",
    "reference": "reference loop",
}


def variant_builder(variant: str, size: RoundSize, mode: Mode, data: FedData,
                    device: torch.device, client_workers: int) -> Builder:
    if variant == "reference":
        return reference_builder(size, mode, data, device)
    return engine_builder(size, mode, data, device, variant == "stacked", client_workers,
                          graphs=variant != "eager")


def bench_modes(size: RoundSize, modes: Sequence[Mode], variants: Sequence[str],
                device: torch.device, timed_rounds: int = 1, client_workers: int = 1,
                records: str | None = None, profile_dir: str | None = None,
                echo: Callable[[str], None] = print, label: str = "paper round",
                shape: str | None = None) -> list[dict[str, Any]]:
    """Time every variant in every mode (mode by mode, in the order given); returns the records
    and, with `records`, appends each to that file as soon as it is measured; with
    `profile_dir`, profiles one more round of each (`profile`). A variant that fails is
    recorded with ok false and the error, and the others go on. Records say `label: variant`
    and name the model's `shape` where given (`fedhet bench --models`)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; valid: {', '.join(VARIANTS)}")
    data = random_data(size)
    images = size.clients * size.images
    flops = flops_per_image(size.model, size.image_size, size.num_classes, size.channels,
                            width=size.width, options=json.loads(size.options))
    where, version = device_name(device), str(torch.__version__)
    echo(f"{label} on {where}, torch {version}: {size.model} width {size.width}, "
         f"{size.clients} clients × {size.images} images, batch {size.batch_size}, "
         f"{flops / 1e9:.2f} GFLOP per training image; {timed_rounds} timed round(s) after a "
         "warm-up")
    out = []
    for mode in modes:
        seconds: dict[str, float] = {}
        for variant in variants:
            unstacked = variant == "stacked" and _not_stacked(size, mode, device)
            if unstacked:  # it would time the engine's one-at-a-time path a second time
                echo(f"{mode.name:>20}  {label}: {VARIANTS[variant]}: not timed, {unstacked}")
                continue
            try:
                m = measure(variant_builder(variant, size, mode, data, device, client_workers),
                            size, device, timed_rounds)
                seconds[variant], peak, note = m.seconds, m.peak_mem_bytes, m.note
                if variant == "reference":
                    note += "".join(f"; {v} {m.seconds / s:.2f}x its speed"
                                    for v, s in seconds.items() if v != "reference")
                if profile_dir:
                    name = f"{variant}-{mode.name.replace('+', '_')}.txt"
                    note += "; " + profile(m.one_round, device, Path(profile_dir) / name)
                record = make_record(f"{label}: {VARIANTS[variant]}", mode.name, where, version,
                                     model=_engine_model(variant, size),
                                     shape=_engine_model(variant, size) and shape,
                                     seconds=seconds[variant], images=images,
                                     flops_per_image=flops,
                                     peak_mem_bytes=peak, note=note)
            except Exception as err:  # recorded; the other variants and modes still run
                record = make_record(f"{label}: {VARIANTS[variant]}", mode.name, where, version,
                                     model=_engine_model(variant, size),
                                     shape=_engine_model(variant, size) and shape, ok=False,
                                     note=f"{type(err).__name__}: {err}")
            finally:
                m = None  # the round's models and data go before the next variant's
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            out.append(record)
            if records:
                append_record(records, record)
            echo(_line(record))
    return out


def _engine_model(variant: str, size: RoundSize) -> str | None:
    """The model a variant's record names: the round's model where our engine trains it, None
    for the reference loop (its speed is not what a run of the engine costs)."""
    return None if variant == "reference" else size.model


def _not_stacked(size: RoundSize, mode: Mode, device: torch.device) -> str:
    """Why the engine would train the stacked variant's clients one at a time in `mode` (the
    engine's own reason), or "" where it stacks them."""
    run = round_run(size, mode, device, stacked=True)
    model = build_model(size.model, size.num_classes, size.channels, size.image_size, size.width,
                        **json.loads(size.options))
    stacked, why = vectorise_decision(run, model)
    return "" if stacked else why


def _line(r: dict[str, Any]) -> str:
    if not r["ok"]:
        return f"{r['mode']:>20}  {r['what']}: FAILED {r['note']}"
    mem = "" if r["peak_mem_gib"] is None else f", peak {r['peak_mem_gib']:.2f} GiB"
    return (f"{r['mode']:>20}  {r['what']}: {r['s_per_round']:.3f} s, "
            f"{r['img_per_s']:,.0f} images/s, {r['tflops']:.1f} TFLOP/s{mem} ({r['note']})")


def main(args: argparse.Namespace, device: torch.device) -> int:
    """`fedhet bench --round-time`: the paper round in each of `--modes`. Exit status 1 when a
    measurement failed, unless `--records` holds the failures (0 once all are recorded)."""
    size = replace(RoundSize(), clients=args.round_clients, images=args.round_samples,
                   batch_size=args.round_batch, model=args.round_model, width=args.round_width)
    given = args.modes or ",".join(GPU_MODES if device.type == "cuda" else CPU_MODES)
    modes = [Mode.parse(m) for m in given.split(",")]
    variants = [v.strip() for v in args.variants.split(",")]
    records = bench_modes(size, modes, variants, device, args.timed_rounds, args.client_workers,
                          args.records, args.profile)
    return 0 if args.records or all(r["ok"] for r in records) else 1
