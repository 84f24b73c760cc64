"""What a config's leaderboards will train, said before anything does (`describe_plan`): per
entry what it is, its comparable tables, and the runs not built yet with their training work and
GPU-hours as `fedhet cost` counts them (`fedhet.cost.estimate.run_cost`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fedhet import experiments as X
from fedhet.cost.estimate import run_cost
from fedhet.cost.throughput import DEFAULT_THROUGHPUT
from fedhet.data import split_sizes
from fedhet.experiments.challengers import about_text


def plan_costs(exp: X.Experiment, run_ids: Sequence[str]) -> dict[str, float]:
    """Training images, training FLOPs (images × FLOPs) and GPU-hours of `run_ids`, as `fedhet
    cost` counts them (training and evaluation FLOPs at its default throughput:
    `fedhet.cost.estimate.run_cost`)."""
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
