"""Builders the table tests share: a run's result from its accuracy curve, and the demo's
experiment as the workflow loads it."""

from __future__ import annotations

from pathlib import Path

import yaml

from fedhet import experiments as X
from fedhet import tables as T

ROOT = Path(__file__).resolve().parents[1]


def curve(*accs, start=1):
    return [(start + i, a) for i, a in enumerate(accs)]


def result(best, accs, status="completed"):
    c = curve(*accs)
    return T.result_from(
        {
            "status": status,
            "best_acc": best / 100,
            "last_acc": accs[-1] / 100,
            "top5_mean_acc": best / 100,
        },
        c,
    )


def demo_experiment():
    """The demo's experiment with VHL's and FedImpro's cells pending, whatever is implemented."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["skip_plugins"] = ["vhl", "fedimpro"]
    return X.load_experiment(cfg, ROOT)


def small_payload(quoted=None, averages=False):
    """An accuracy table of two rows (FedAvg, FedNTD) × two datasets; FedNTD's cells may be
    quoted from elsewhere (no runs)."""
    cells = []
    for method, mlabel, ref in (("fedavg", "FedAvg", 70.0), ("fedntd", "FedNTD", 81.5)):
        for ds, dlabel in (("cifar10", "CIFAR-10"), ("svhn", "SVHN")):
            cell = {
                "calibrations": [],
                "grid": 0,
                "labels": {"algorithm": method, "dataset": ds},
                "display": {"algorithm": mlabel, "dataset": dlabel},
                "row": mlabel,
                "column": dlabel,
                "metrics": ["acc"],
                "run_ids": [] if (quoted and method == "fedntd") else [f"{method}-{ds}"],
                "pending": None,
                "reference": {"acc": [ref, 0.5] if ds == "svhn" else ref},
                "values": {},
            }
            if quoted and method == "fedntd":
                cell["quoted"] = quoted
            cells.append(cell)
    spec = {"title": "Table X", "rows": ["algorithm"], "columns": ["dataset"]}
    if averages:
        spec = {
            "title": "Table X",
            "rows": ["algorithm"],
            "columns": ["dataset"],
            "averages": {"over": "dataset", "reference": {"fedavg": 71.0, "fedntd": 82.0}},
        }
        for cell in cells:  # one row per algorithm and dataset, averaged over the datasets
            cell["row"] = f"{cell['display']['algorithm']} · {cell['display']['dataset']}"
            cell["column"] = ""
        spec["rows"] = ["algorithm", "dataset"]
        spec["columns"] = []
    return {"paper": "vhl", "id": "tx", "kind": "accuracy", "spec": spec, "cells": cells}


def small_results():
    return {
        f"fedavg-{ds}": result(best, [best / 2, best])
        for ds, best in (("cifar10", 72.0), ("svhn", 68.0))
    }
