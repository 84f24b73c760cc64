"""What a finished run wrote, read back for comparisons between runs (shared by the tests)."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def metrics_without_wall_times(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl without the wall times, which differ from run to run."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    for row in rows:
        row.pop("seconds"), row.pop("round_seconds"), row.pop("train_seconds")
    return rows


def without_step_time(final: dict) -> dict:
    """A final.json without its measured seconds per local step."""
    return {k: v for k, v in final.items() if k != "mean_step_seconds"}


def run_outputs(run_dir: Path) -> tuple[list[dict], dict[str, torch.Tensor]]:
    """A run's metrics (without wall times) and its saved model."""
    run_dir = Path(run_dir)
    return (metrics_without_wall_times(run_dir / "metrics.jsonl"),
            torch.load(run_dir / "model.pt", weights_only=True))
