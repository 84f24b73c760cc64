"""FedLGD's computation and communication costs (Tables 6–7), counted on the real models with
`fedhet.models.flops` (its FLOP convention).

Totals multiply per-image costs by the images each step processes. What one FedLGD step
processes (spec §1.4–1.6), per client k with n_k real images, C classes, ipc local and
server_ipc global images per class:
- vanilla FedAvg epoch: n_k training images;
- FedLGD local epoch: the C·ipc local plus C·server_ipc global virtual images (CE on both); in
  rounds outside τ every batch also runs the feature extractor forward and backward on all
  C·server_ipc global images (the regulariser's h(S̃), not detached);
- one DM iteration: the feature extractor forward on min(real_batch·C, n_k) real images (real_batch
  per class; classes assumed balanced) and forward + backward to the images on the C·ipc local
  virtual images;
- one server GM step: CE gradient of the C·server_ipc global images with ``create_graph``, then its
  gradient with respect to the images (a double backward).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fedhet.models.flops import STEPS, UNIT_FLOPS, meta_model, parameter_count, step_flops

UNIT_VALUES = "values (parameters or float32 pixels)"

# FedLGD Tables 12–14 and §3 of the spec; CIFAR10C: 57 clients of the average α=2 size.
PAPER_DATASETS: dict[str, dict[str, Any]] = {
    "DIGITS": {"image_size": 28, "num_classes": 10,
               "train_sizes": [60000, 73257, 7291, 10000, 10331]},
    "CIFAR10C": {"image_size": 28, "num_classes": 10, "train_sizes": [21790] * 57},
    "RETINA": {"image_size": 96, "num_classes": 2, "train_sizes": [82, 605, 385, 1000]},
}

# FedLGD Table 7: (image size, classes) of the 28×28 and 96×96 rows.
PAPER_COMMUNICATION = ((28, 10), (96, 2))


def global_virtual_size(image_size: int, num_classes: int, channels: int = 3, ipc: int = 1) -> int:
    """Values of the global virtual data the server sends: C·ipc images of channels·H·W floats
    (10·3·28·28 = 23 520 and 2·3·96·96 = 55 296 per IPC, Table 7)."""
    return num_classes * ipc * channels * image_size * image_size


def communication_table(
    settings: Sequence[tuple[int, int]] = PAPER_COMMUNICATION,
    models: Sequence[str] = ("convnet", "resnet18in"),
    channels: int = 3,
) -> dict[str, Any]:
    """FedLGD Table 7: per (image size, classes), each model's parameter count (a model upload)
    and the global virtual data per IPC (the extra download)."""
    rows = [
        {
            "image_size": size,
            "num_classes": classes,
            **{name: parameter_count(name, size, classes, channels) for name in models},
            "global_virtual_per_ipc": global_virtual_size(size, classes, channels),
        }
        for size, classes in settings
    ]
    return {"unit": UNIT_VALUES, "rows": rows}


def fedlgd_total(
    in_tau: float, dm_step: float, out_tau: float, local_steps: int, tau_rounds: int, rounds: int
) -> float:
    """Client computation over training: |τ| rounds of local training plus ``local_steps`` DM
    iterations, and the other rounds of regularised local training (the paper's §4 arithmetic)."""
    return tau_rounds * (in_tau + dm_step * local_steps) + (rounds - tau_rounds) * out_tau


def paper_arithmetic() -> dict[str, float]:
    """The paper's check on DIGITS, in its own Table 6 units: 10·(2.7K + 3.4K·100) + 90·4.8K =
    3.859M ("3.9M") against 100 epochs of vanilla FedAvg, 100·238K = 23.8M."""
    return {
        "fedlgd": fedlgd_total(2.7e3, 3.4e3, 4.8e3, local_steps=100, tau_rounds=10, rounds=100),
        "vanilla": 100 * 238e3,
    }


@dataclass(frozen=True)
class Schedule:
    """FedLGD's settings that set its cost (spec §1.1, §1.8; defaults as in the paper)."""

    ipc: int = 10
    server_ipc: int = 10
    local_steps: int = 100
    server_steps: int = 500
    real_batch: int = 256
    batch_size: int = 32
    tau_rounds: int = 10
    rounds: int = 100


def _dataset_row(
    name: str, spec: Mapping[str, Any], model_name: str, schedule: Schedule, channels: int
) -> dict[str, Any]:
    """One Table 6 row: FLOPs summed over the dataset's clients (one local epoch each)."""
    size, classes = int(spec["image_size"]), int(spec["num_classes"])
    sizes = [int(n) for n in spec["train_sizes"]]
    model = meta_model(model_name, size, classes, channels)
    per_image = {step: step_flops(model, step, 1) for step in STEPS}
    local, glob = classes * schedule.ipc, classes * schedule.server_ipc
    virtual = local + glob
    in_tau = len(sizes) * virtual * per_image["train"]
    regulariser = math.ceil(virtual / schedule.batch_size) * glob * per_image["features_train"]
    out_tau = len(sizes) * (virtual * per_image["train"] + regulariser)
    dm_step = sum(
        min(schedule.real_batch * classes, n) * per_image["features"]
        + local * per_image["features_to_images"]
        for n in sizes
    )
    vanilla = sum(sizes) * per_image["train"]
    gm_step = glob * per_image["gradient_matching"]
    total = fedlgd_total(in_tau, dm_step, out_tau, schedule.local_steps, schedule.tau_rounds,
                         schedule.rounds)
    return {
        "dataset": name,
        "model": model_name,
        "image_size": size,
        "num_classes": classes,
        "clients": len(sizes),
        "real_images": sum(sizes),
        "vanilla_epoch": vanilla,
        "fedlgd_train_in_tau": in_tau,
        "fedlgd_dm_step": dm_step,
        "fedlgd_round_in_tau": in_tau + schedule.local_steps * dm_step,
        "fedlgd_round_out_tau": out_tau,
        "server_gm_step": gm_step,
        "server_gm_round": schedule.server_steps * gm_step,
        "vanilla_total": schedule.rounds * vanilla,
        "fedlgd_total": int(total),
    }


def computation_table(
    datasets: Mapping[str, Mapping[str, Any]] = PAPER_DATASETS,
    model_name: str = "convnet",
    schedule: Schedule = Schedule(),
    channels: int = 3,
) -> dict[str, Any]:
    """FedLGD Table 6: per dataset (``image_size``, ``num_classes``, the clients' ``train_sizes``),
    FLOPs of a vanilla FedAvg epoch on the real data, of a FedLGD round in τ (local epoch on the
    virtual data + ``local_steps`` DM iterations) and outside τ, and of the server's GM step; all
    summed over clients, with totals over ``schedule.rounds`` (one local epoch per round)."""
    rows = [_dataset_row(name, spec, model_name, schedule, channels)
            for name, spec in datasets.items()]
    return {"unit": UNIT_FLOPS, "schedule": asdict(schedule), "rows": rows}
