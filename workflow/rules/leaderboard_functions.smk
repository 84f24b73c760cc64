# The leaderboard rules' functions (leaderboard.smk): each entry's outputs and inputs, the
# payloads of its tables, ranking and the overview, its report entries, and the plan printed
# before anything runs.
import sys

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from fedhet import experiments as X
from fedhet import papers
from fedhet.experiments import challengers

BOARDS = EXP.leaderboard
CHALLENGERS = sorted(BOARDS)
LEADERBOARD = f"results/{SCALE}/leaderboard"


def leaderboard_outputs(name):
    """Files of one entry's leaderboard: each comparable table with it, the ranking and what
    the entry is (entry.json)."""
    base = f"{LEADERBOARD}/{name}"
    out = [f"{base}/leaderboard.{ext}" for ext in ("csv", "md", "html")]
    out += [f"{base}/cells.csv", f"{base}/entry.json"]
    for item in BOARDS[name].items.values():
        out.extend(
            f"{base}/{item.paper}/{item.id}.{ext}" for ext in ("csv", "md", "html")
        )
    return out


def overview_outputs():
    """The entries side by side (with any entry)."""
    if not CHALLENGERS:
        return []
    return [f"{LEADERBOARD}/overview.{ext}" for ext in ("csv", "md", "html")]


def all_leaderboards():
    out = [path for name in CHALLENGERS for path in leaderboard_outputs(name)]
    return out + overview_outputs()


def leaderboard_targets(wildcards):
    """Input function of the `leaderboard` target, every entry's leaderboard, the overview and
    the report."""
    if not CHALLENGERS:
        raise WorkflowError(
            "snakemake leaderboard: no challenger configured; name your method in a YAML file, "
            "e.g. mine.yaml with `challengers: [{name: mine, label: Mine}]`, and run "
            "snakemake leaderboard --configfile mine.yaml (`fedhet methods` lists the "
            "installed methods)"
        )
    out = all_leaderboards()
    if config["report_after_run"]:
        out.append(f"reports/{SCALE}/report.html")
    return out


def board_item(wildcards):
    """A comparable table with a challenger added (wildcards challenger, paper, table)."""
    board = BOARDS[wildcards.challenger]
    target = f"{wildcards.paper}_{wildcards.table}"
    if target not in board.items:
        raise WorkflowError(
            f"no leaderboard table '{target}' for challenger {wildcards.challenger}; "
            f"valid: {', '.join(board.items)}"
        )
    return board.items[target]


def board_table_inputs(wildcards):
    item = board_item(wildcards)
    runs = [f for rid in item.run_ids() for f in run_outputs(rid)]
    return runs + [calibration_output(cid) for cid in item.calibration_ids()]


def board_table_payload(wildcards):
    return board_item(wildcards).payload()


def board_category(wildcards):
    """The report's sidebar entry of a challenger's leaderboard, after the papers'."""
    return papers.leaderboard_category(BOARDS[wildcards.challenger].challenger.label)


def board_table_labels(wildcards):
    item = board_item(wildcards)
    return {"table": papers.item_label(item.id, item.spec.get("title", item.id))}


def board_inputs(wildcards):
    """What a challenger's ranking reads: its tables, and every run's results, settings (its
    training work) and calibrations."""
    board = BOARDS[wildcards.challenger]
    base = f"{LEADERBOARD}/{wildcards.challenger}"
    tables = [f"{base}/{i.paper}/{i.id}.csv" for i in board.items.values()]
    runs = []
    for rid in board.run_ids():
        runs.extend(run_outputs(rid))
        runs.append(f"results/{SCALE}/runs/{rid}/resolved.yaml")
    cids = {c for i in board.items.values() for c in i.calibration_ids()}
    return {
        "tables": tables,
        "runs": runs,
        "calibrations": [calibration_output(c) for c in sorted(cids)],
    }


def board_payload(wildcards):
    """Params function: the entry (what it is: method, package, version, code hash, settings;
    and what it was built from: entry.json), each comparable table's payload with the axis it
    joined and the metric scored, the tie margin and the scale's warning."""
    board = BOARDS[wildcards.challenger]
    tables = []
    for target, item in board.items.items():
        join = board.joins[target]
        seeds = [int(s) for s in item.spec.get("seeds") or EXP.seeds]
        tables.append(
            {
                "payload": item.payload(),
                "axis": join.axis,
                "metric": join.metric,
                "seeds": seeds,
            }
        )
    ch = board.challenger
    content = {
        "challenger": {"name": ch.name, "label": ch.label, "kind": ch.kind},
        "entry": challengers.manifest(board, SCALE, EXP.seeds),
        "about": challengers.about_text(ch),
        "tables": tables,
        "tie_margin": board.tie_margin,
        "warning": config["scale_warning"],
    }
    return X.Payload(content, f"{ch.name}: {len(tables)} comparable tables")


def overview_inputs(wildcards):
    """Every entry's ranking and cells (the overview's rows)."""
    return {
        "rankings": [f"{LEADERBOARD}/{n}/leaderboard.csv" for n in CHALLENGERS],
        "cells": [f"{LEADERBOARD}/{n}/cells.csv" for n in CHALLENGERS],
    }


def overview_payload(wildcards):
    """Params function: what each entry is (`challengers.about`), in the order of the inputs."""
    entries = []
    for name in CHALLENGERS:
        board = BOARDS[name]
        papers_of = list(dict.fromkeys(j.paper for j in board.joins.values()))
        entries.append(challengers.about(board.challenger, papers_of))
    content = {"entries": entries, "warning": config["scale_warning"]}
    return X.Payload(content, f"{len(entries)} leaderboard entries")


def announce_leaderboard():
    """Before anything runs, also under -n (at parse time: Snakemake runs `onstart` only for a
    real run): the leaderboards on disk left out and why, and per entry the runs it adds that
    are not built yet, their training work and GPU-hours (`fedhet cost`'s model), and the
    baseline runs still to train. Not in jobs, nor in the report's own Snakemake run."""
    if workflow.subprocess_exec or "--report" in sys.argv:
        return
    for name, why in sorted(EXP.leaderboard_left_out.items()):
        logger.warning(
            f"leaderboard {LEADERBOARD}/{name}/ left out of this run and its report: {why}. "
            f"To show it again, run snakemake leaderboard with the config that names it"
        )
    if CHALLENGERS:
        from fedhet.leaderboard.plan import describe_plan

        logger.info(describe_plan(EXP, f"results/{SCALE}"))


announce_leaderboard()
