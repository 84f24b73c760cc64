"""A tiny federated run on the digits stand-in (seconds on a CPU) and its federation, shared by
the engine's and the methods' tests."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from fedhet.config import resolve_run
from fedhet.data import load_dataset
from fedhet.engine.federation import Federation
from fedhet.partition import client_partition

BASE = {
    "seed": 1,
    "dataset": {"name": "digits10", "options": {"train_per_class": 12, "test_per_class": 3}},
    "model": {"name": "cnn4", "width": 0.25},
    "partition": {"num_clients": 4, "min_size": 2},
    "training": {"rounds": 2, "clients_per_round": 2, "batch_size": 8, "local_steps": 3,
                 "lr": 0.05},
    "runtime": {"device": "cpu"},
}


def tiny_run(data: str | Path, parts: str | Path) -> dict:
    """A copy of BASE whose dataset is cached under `data` and partitions under `parts`."""
    run = copy.deepcopy(BASE)
    run["dataset"]["root"] = str(data)
    run["partition"]["root"] = str(parts)
    return run


def federation_of(run: dict) -> Federation:
    """The federation of `run` (resolved here) on the CPU, with its data and partition."""
    run = resolve_run(run)
    data = load_dataset(run["dataset"]["name"], run["dataset"]["root"], run["dataset"]["options"])
    indices, angles = client_partition(run, data)
    return Federation(run, data, indices, torch.device("cpu"), angles)
