"""Figure scripts: what a reader sees on the axes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "workflow" / "scripts" / "figures"
                                                  / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_round_axes_tick_whole_rounds(tmp_path):
    """Four rounds would get ticks at 1.5, 2.0, 2.5 by default; rounds are whole numbers."""
    curve = load_script("curve")
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"round": r, "test_acc": 0.1 * r}) + "\n" for r in range(1, 5)))
    payload = {"spec": {"metric": "test_acc", "title": "t", "hue": "algorithm"},
               "cells": [{"display": {"algorithm": "FedAvg"}, "pending": None,
                          "run_ids": ["r1"]}]}
    sm = SimpleNamespace(params=SimpleNamespace(payload=payload, note="demo"),
                         input=[str(run / "metrics.jsonl")], output=[str(tmp_path / "f.png")],
                         wildcards=SimpleNamespace(scale="demo"))
    plt.close("all")
    curve.main(sm)
    ticks = [t for t in plt.gcf().axes[0].get_xticks() if 1 <= t <= 4]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert (tmp_path / "f.png").stat().st_size > 0
