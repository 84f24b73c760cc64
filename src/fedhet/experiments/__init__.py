"""Paper configs → run settings and jobs (torch-free).

A paper config (`config/papers/<paper>.yaml`) describes each table and figure as one or more
*grids*: named axes whose values are patches of run settings, on top of a *protocol* (the paper's
base settings, its vocabulary of axis values and per-cell look-up tables such as a learning-rate
table). A scale config (`config/scales/<scale>.yaml`) then maps the paper-scale settings onto what
runs at that scale (stand-in datasets, narrower models, fewer rounds).

`load_experiment` expands everything into cells (one per table or figure position), runs (one
per distinct resolved run, shared by every cell that needs it) and the jobs the runs need
(datasets, partitions, cached artefacts, calibrations). The Snakemake workflow
(`workflow/rules/common.smk`) and the package use this one resolver; it must stay importable
without torch so that the DAG builds in seconds.

Modules: `loading` (YAML, protocols), `expansion` (grids → cells → runs), `scaling` (scales),
`jobs` (datasets, partitions, artefacts, calibrations), `cells` (the data classes),
`challengers` (the leaderboard: a user's method added to the comparable tables).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedhet import catalog
from fedhet.experiments.cells import Cell, Experiment, Item, Payload
from fedhet.experiments.challengers import expand_leaderboard
from fedhet.experiments.expansion import ExpansionContext, expand_item
from fedhet.experiments.jobs import (
    artefact_id,
    artefacts,
    calibration_job,
    cost_factor,
    dataset_epochs,
    training_images,
    dataset_key,
    extra_datasets,
    partition_args,
    partition_job,
)
from fedhet.experiments.kinds import RUNLESS_KINDS, TABLE_KINDS
from fedhet.experiments.loading import (
    ExperimentError,
    Loader,
    deep_merge,
    get_path,
    merge_settings,
    plain_copy,
    read_yaml,
    set_path,
    short_hash,
)
from fedhet.experiments.scaling import apply_scale, load_scale, scale_for_paper
from fedhet.names import PAPERS

__all__ = [
    "PAPERS",
    "RUNLESS_KINDS",
    "TABLE_KINDS",
    "Cell",
    "Experiment",
    "ExperimentError",
    "Item",
    "Payload",
    "apply_scale",
    "artefact_id",
    "artefacts",
    "calibration_job",
    "ci_selection",
    "cost_factor",
    "dataset_epochs",
    "training_images",
    "dataset_key",
    "deep_merge",
    "ExpansionContext",
    "expand_item",
    "extra_datasets",
    "get_path",
    "load_experiment",
    "load_scale",
    "merge_settings",
    "partition_args",
    "partition_job",
    "plain_copy",
    "read_yaml",
    "scale_for_paper",
    "set_path",
    "short_hash",
    "training_images",
]


def load_experiment(
    config: Mapping[str, Any],
    root: str | Path = ".",
    papers: Iterable[str] | None = None,
    *,
    origins: Mapping[str, str] | None = None,
    results: str | Path | None = None,
) -> Experiment:
    """Expand the workflow config (`config/config.yaml` plus overrides) into cells and runs.

    `papers` defaults to every paper with a config file, so targets such as `snakemake ccvr`
    exist even when `config['papers']` (what `snakemake` builds by default) leaves it out.
    `origins`: the file (or `--config`) each top-level key of `config` came from, which errors
    name. `results`: this scale's results folder, whose leaderboards on disk are checked
    against the config's challengers and kept (`fedhet.experiments.challengers`).
    """
    origins = origins or {}
    root = Path(root)
    scale_name = str(config.get("scale", "demo"))
    scale = load_scale(root, scale_name)
    seeds = config.get("seeds") or scale.get("seeds") or [0]
    seeds = [int(s) for s in seeds]
    skip = {str(p) for p in config.get("skip_plugins") or []}
    for name in skip:
        if name not in catalog.names("plugin"):
            raise ExperimentError(
                origins.get("skip_plugins", "config/config.yaml"),
                "skip_plugins",
                f"unknown plug-in '{name}'; valid: {', '.join(catalog.names('plugin'))}",
            )
    ctx = ExpansionContext(Loader(root), scale, seeds, frozenset(skip))
    loader = ctx.loader
    selected = list(papers) if papers is not None else list(PAPERS)
    for paper in config.get("papers") or []:
        loader.paper(paper)  # unknown names fail here, listing the valid ones
    items: dict[str, Item] = {}
    loaded: dict[str, dict[str, Any]] = {}
    for paper in selected:
        if not loader.paper_file(paper).exists():
            continue
        cfg = loader.paper(paper)
        loaded[paper] = cfg
        for section, is_figure in (("tables", False), ("figures", True)):
            for item_id, spec in (cfg.get(section) or {}).items():
                item = expand_item(ctx, paper, item_id, spec, is_figure)
                items[item.target] = item
        for ci, claim in enumerate(cfg.get("claims") or []):
            for side in ("better", "than"):
                table = (claim.get(side) or {}).get("table")
                if f"{paper}_{table}" not in items:
                    raise ExperimentError(
                        loader.paper_file(paper),
                        f"claims[{ci}].{side}.table",
                        f"unknown table '{table}'; valid: "
                        + ", ".join(i.id for i in items.values() if i.paper == paper),
                    )
    board_papers = [p for p in (config.get("papers") or loaded) if p in loaded]
    left_out: dict[str, str] = {}
    tie_margin = float((config.get("leaderboard") or {}).get("tie_margin", 1.0))
    boards = expand_leaderboard(ctx, board_papers, config.get("challengers"),
                                where=origins.get("challengers", "workflow config"),
                                tie_margin=tie_margin, results=results, left_out=left_out)
    runs = ctx.runs
    jobs = _jobs_of(runs)
    return Experiment(
        scale=scale_name,
        scale_config=scale,
        seeds=seeds,
        papers=loaded,
        items=items,
        runs=runs,
        calibrations=ctx.calibrations,
        leaderboard=boards,
        leaderboard_left_out=left_out,
        **jobs,
    )


def _jobs_of(runs: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Datasets, partitions and artefacts of every run, each keyed once (Experiment fields)."""
    jobs: dict[str, Any] = {
        "datasets": {},
        "run_dataset": {},
        "run_extra_datasets": {},
        "partitions": {},
        "run_partition": {},
        "artefacts": {},
        "run_artefacts": {},
    }

    def add_dataset(dataset: Mapping[str, Any]) -> str:
        key = dataset_key({"dataset": dataset})
        jobs["datasets"].setdefault(key, {"name": dataset["name"], "options": dataset["options"]})
        return key

    for rid, run in runs.items():
        jobs["run_dataset"][rid] = add_dataset(run["dataset"])
        for extra in extra_datasets(run):
            jobs["run_extra_datasets"].setdefault(rid, []).append(add_dataset(extra))
        pjob = partition_job(run)
        if pjob is not None:
            jobs["partitions"].setdefault(pjob[0], pjob[1])
            jobs["run_partition"][rid] = pjob[0]
        for artefact in artefacts(run):
            aid = artefact_id(artefact)
            if aid not in jobs["artefacts"]:
                sources = [add_dataset({"options": {}, **s}) for s in artefact.sources]
                jobs["artefacts"][aid] = {
                    "family": artefact.family,
                    "key": artefact.key,
                    "settings": artefact.settings,
                    "sources": sources,
                }
            jobs["run_artefacts"].setdefault(rid, []).append(aid)
    return jobs


def ci_selection(exp: Experiment, ci: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The `ci` target: whole items plus the runs of selected cells (`config.yaml` → ci)."""
    items = []
    for name in ci.get("targets") or []:
        if name not in exp.items:
            raise ExperimentError(
                "config/config.yaml",
                "ci.targets",
                f"unknown target '{name}'; valid: {', '.join(sorted(exp.items))}",
            )
        items.append(name)
    run_ids: dict[str, None] = {}
    for i, sel in enumerate(ci.get("cells") or []):
        name = sel.get("target")
        if name not in exp.items:
            raise ExperimentError(
                "config/config.yaml",
                f"ci.cells[{i}].target",
                f"unknown target '{name}'; valid: {', '.join(sorted(exp.items))}",
            )
        where = sel.get("where") or {}
        for cell in exp.items[name].cells:
            if all(cell.labels.get(k) == str(v) for k, v in where.items()):
                for rid in cell.run_ids:
                    run_ids[rid] = None
    return items, list(run_ids)
