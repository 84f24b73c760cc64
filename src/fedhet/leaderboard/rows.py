"""A challenger's leaderboard, from its comparable tables to the ranking's input: one row per run
(paper, table, setting, method, seed) with the table's scored metric, which way it is better,
and the run's costs (`fedhet.leaderboard.ranking.build_leaderboard` ranks them).

A rounds-to-target table is scored on each seed's rounds to the table's own target (fewer is
better; a seed that never reached it has no value and the status `never reached`).

A cell's *method* is its value on the axis the challenger joined; its *setting* every other
label. Cells of grids without that axis (a table's centralized or calibrated block that the
challenger does not join) are left out. Costs per run: training work in images × FLOPs
(`fedhet.experiments.training_images` × `fedhet.cost.estimate.image_flops`), bytes sent
per round (mean over rounds of down- and upload) and the measured seconds of the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedhet import experiments as X
from fedhet.leaderboard.ranking import COLUMNS, COSTS
from fedhet.tables.compute import seed_rounds
from fedhet.tables.maths import parse_reference
from fedhet.tables.metrics import METRICS, CellState
from fedhet.tables.results import RunResult
from fedhet.tables.schema import DIVERGED, NEVER, OK, is_nan

NAN = math.nan


def training_work(run: Mapping[str, Any]) -> tuple[float, float]:
    """(training images, their FLOPs) of one resolved run (imports torch to count FLOPs)."""
    from fedhet.cost.estimate import image_flops
    from fedhet.data import split_sizes

    train_size = split_sizes(run["dataset"]["name"], run["dataset"]["options"])[0]
    images = X.training_images(run, train_size)
    return images, images * image_flops(run, backward=True)


def run_costs(run_dir: str | Path) -> dict[str, float]:
    """Costs of one finished run from its directory: `resolved.yaml` (training work),
    `metrics.jsonl` (bytes per round, seconds)."""
    from fedhet.saved import read_settings

    run_dir = Path(run_dir)
    run = read_settings(run_dir).recorded
    sent, seconds = [], NAN
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if "bytes_down" in record or "bytes_up" in record:
            sent.append(float(record.get("bytes_down") or 0) + float(record.get("bytes_up") or 0))
        if record.get("seconds") is not None:
            seconds = float(record["seconds"])
    return {"train_flops": training_work(run)[1],
            "bytes_per_round": sum(sent) / len(sent) if sent else NAN,
            "seconds": seconds}


def _joined(payload: Mapping[str, Any], cell: Mapping[str, Any], axis: str) -> bool:
    """Whether the cell's grid has the axis the challenger joined (its default does not count)."""
    return axis in (payload["spec"]["grids"][cell["grid"]].get("axes") or {})


def table_rows(entry: Mapping[str, Any], results: Mapping[str, RunResult],
               costs: Mapping[str, Mapping[str, float]], scale: str) -> list[dict[str, Any]]:
    """The per-run rows of one comparable table (`entry`: its payload, the axis joined, the
    metric scored and its seeds) at `scale` (which sets a rounds-to-target table's target);
    cells pending, quoted or outside the joined grids give none."""
    payload, axis, metric = entry["payload"], entry["axis"], entry["metric"]
    declared = METRICS.get(metric)
    rounds = seed_rounds(payload, results, scale) if declared.needs_rounds else {}
    rows = []
    for cell in payload["cells"]:
        if cell["pending"] or cell.get("quoted") or not cell["run_ids"]:
            continue
        if not _joined(payload, cell, axis):
            continue
        setting = "; ".join(f"{a}={v}" for a, v in sorted(cell["labels"].items()) if a != axis)
        paper_value = parse_reference(cell["reference"].get(metric))[0]
        calibrations = cell.get("calibrations") or []
        for i, rid in enumerate(cell["run_ids"]):
            one = {**cell, "run_ids": [rid], "calibrations": calibrations[i:i + 1]}
            diverged = results[rid].status == DIVERGED
            state = CellState(metric, one, results, status=DIVERGED if diverged else OK)
            if rid in rounds:
                state.rounds = (rounds[rid], NAN, 1, NEVER if is_nan(rounds[rid]) else OK)
            value = declared.compute(state)[0]
            rows.append({
                "paper": payload["paper"],
                "table": payload["id"],
                "setting": setting,
                "method": cell["labels"][axis],
                "label": cell["display"][axis],
                "seed": int(entry["seeds"][i]),
                "value": value,
                # a rounds metric without a value: the seed never reached the target
                "status": DIVERGED if diverged else NEVER if is_nan(value) and
                declared.needs_rounds else "completed",
                "chance": cell.get("chance_acc", NAN),
                "paper_value": NAN if paper_value is None else paper_value,
                "metric": metric,
                "lower_is_better": declared.lower_is_better,
                **{name: costs[rid][name] for name in COSTS},
            })
    return rows


def results_frame(tables: Sequence[Mapping[str, Any]], results: Mapping[str, RunResult],
                  costs: Mapping[str, Mapping[str, float]], scale: str) -> pd.DataFrame:
    """One row per run of every comparable table (`COLUMNS`) at `scale`, the ranking's input."""
    rows = [row for entry in tables for row in table_rows(entry, results, costs, scale)]
    return pd.DataFrame(rows, columns=COLUMNS)
