"""A challenger's leaderboard, from its comparable tables to the ranking's input: one row per run
(paper, table, setting, method, seed) with the table's scored metric, which way it is better,
and the run's costs (`fedhet.analysis.leaderboard.build_leaderboard` ranks them); and, before
anything trains, what its leaderboard will train (`describe_plan`).

A rounds-to-target table is scored on each seed's rounds to the table's own target (fewer is
better; a seed that never reached it has no value and the status `never reached`).

A cell's *method* is its value on the axis the challenger joined; its *setting* every other
label. Cells of grids without that axis (a table's centralized or calibrated block that the
challenger does not join) are left out. Costs per run: training work in images × FLOPs
(`fedhet.experiments.training_images` × `fedhet.analysis.scale_cost.image_flops`), bytes sent
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
from fedhet.tables.compute import seed_rounds
from fedhet.tables.maths import parse_reference
from fedhet.tables.metrics import METRICS, CellState
from fedhet.tables.results import RunResult
from fedhet.tables.schema import DIVERGED, NEVER, OK, is_nan

NAN = math.nan
COSTS = ("train_flops", "bytes_per_round", "seconds")
COLUMNS = ["paper", "table", "setting", "method", "label", "seed", "value", "status", "chance",
           "paper_value", "metric", "lower_is_better", *COSTS]


def training_work(run: Mapping[str, Any]) -> tuple[float, float]:
    """(training images, their FLOPs) of one resolved run (imports torch to count FLOPs)."""
    from fedhet.analysis.scale_cost import image_flops
    from fedhet.data import split_sizes

    train_size = split_sizes(run["dataset"]["name"], run["dataset"]["options"])[0]
    images = X.training_images(run, train_size)
    return images, images * image_flops(run, backward=True)


def run_costs(run_dir: str | Path) -> dict[str, float]:
    """Costs of one finished run from its directory: `resolved.yaml` (training work),
    `metrics.jsonl` (bytes per round, seconds)."""
    import yaml

    run_dir = Path(run_dir)
    run = yaml.safe_load((run_dir / "resolved.yaml").read_text())
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


def plan_costs(exp: X.Experiment, run_ids: Sequence[str]) -> dict[str, float]:
    """Training images, training FLOPs (images × FLOPs) and GPU-hours of `run_ids`, as `fedhet
    cost` counts them (training and evaluation FLOPs at its default throughput:
    `fedhet.analysis.scale_cost.run_cost`)."""
    from fedhet.analysis.scale_cost import DEFAULT_THROUGHPUT, run_cost
    from fedhet.data import split_sizes

    sizes: dict[str, tuple[int, int]] = {}
    out = {"images": 0.0, "flops": 0.0, "gpu_hours": 0.0}
    for rid in run_ids:
        run = exp.runs[rid]
        key = exp.run_dataset[rid]
        if key not in sizes:
            sizes[key] = split_sizes(run["dataset"]["name"], run["dataset"]["options"])
        cost = run_cost(run, sizes[key], DEFAULT_THROUGHPUT)
        out["images"] += cost.train_images
        out["flops"] += cost.train_tflop * 1e12
        out["gpu_hours"] += cost.gpu_hours
    return out


def _work(cost: Mapping[str, float]) -> str:
    hours = cost["gpu_hours"]
    gpu = f"{hours:,.2f}" if hours >= 0.01 or hours == 0 else "under 0.01"
    return (f"{cost['images'] / 1e6:,.2f} M training images, {cost['flops'] / 1e12:,.2f} TFLOP "
            f"of training work (images × FLOPs), {gpu} GPU-hours")


def describe_plan(exp: X.Experiment, results: str | Path) -> str:
    """What the leaderboards of `exp` will train, said before anything does: per entry what it
    is (method, package, version, code hash, settings), its comparable tables and the runs it
    adds that are not built yet (under `results`/runs) with their training work and GPU-hours
    (`fedhet cost`'s model); with several entries the total, each run counted once (entries
    with the same settings share their runs); and the baseline runs not built yet either."""
    from fedhet.analysis.scale_cost import DEFAULT_THROUGHPUT
    from fedhet.experiments.challengers import about_text

    results = Path(results)

    def built(rid: str) -> bool:
        return (results / "runs" / rid / "final.json").is_file()

    lines = []
    own_all: dict[str, None] = {}
    others: dict[str, None] = {}
    kept = []
    for name, board in sorted(exp.leaderboard.items()):
        own = board.challenger_run_ids()
        new = [rid for rid in own if not built(rid)]
        shared = [rid for rid in new if rid in own_all]
        own_all.update(dict.fromkeys(own))
        others.update(dict.fromkeys(r for r in board.run_ids() if r not in set(own)
                                    and not built(r)))
        if board.stored and not new:
            kept.append(f"{board.challenger.label} ({name})")
            continue
        also = f", {len(shared)} of them also another entry's" if shared else ""
        lines.append(
            f"leaderboard of {board.challenger.label} ({name}): {len(board.items)} "
            f"comparable tables; {len(new)} new runs to train ({len(own) - len(new)} of its "
            f"{len(own)} already built{also}): {_work(plan_costs(exp, new))}")
        lines.append(f"  {about_text(board.challenger)}")
    new_all = [r for r in own_all if not built(r)]
    others_left = [r for r in others if r not in own_all]
    if len(lines) > 2:
        lines.append(f"all {len(lines) // 2} entries: {len(new_all)} new runs to train, "
                     f"each once: {_work(plan_costs(exp, new_all))}")
    if others_left:
        lines.append(f"and {len(others_left)} runs of the papers' own tables not built yet "
                     f"({_work(plan_costs(exp, others_left))}): they train too")
    if lines:
        lines.append(f"(GPU-hours: training and evaluation FLOPs at "
                     f"{DEFAULT_THROUGHPUT.tflops:g} TFLOP/s, the default throughput of `fedhet "
                     "cost`; on a CPU it takes longer)")
    if kept:
        lines.append(f"leaderboards kept from {results / 'leaderboard'}/ (built before, nothing "
                     f"to train; in the report too): {', '.join(kept)}")
    return "\n".join(lines)
