"""A table's long lines (`compute_table`): per-cell metrics through the metric registry, the
targets of rounds-to-target tables, the paper's "Average" rows, and the CSV they are written to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedhet.registry import UnknownNameError
from fedhet.tables.maths import (
    _nested,
    mean_std,
    near_chance,
    parse_reference,
    rounds_to_target,
    target_from_best,
)
from fedhet.tables.metrics import (
    METRICS,
    TARGET,
    CellState,
    Value,
    analytic_value,
    lookup,
    setting_value,
    uses_rounds,
)
from fedhet.tables.results import RunResult
from fedhet.tables.schema import (
    CONFIG,
    DIVERGED,
    NAN,
    NEVER,
    OK,
    PENDING,
    QUOTED,
    SCHEMA,
    is_nan,
)


def _line(payload, scale, row, column, metric, paper, paper_std, mean, std, n, status, note="",
          near_chance=False):
    delta = NAN
    known = lookup(metric)
    comparable = (known is not None and known.scale_free) or scale == "paper"
    if status in (OK, CONFIG) and comparable and not is_nan(paper) and not is_nan(mean):
        delta = mean - paper
    return {
        "scale": scale,
        "paper": payload["paper"],
        "table": payload["id"],
        "row": row,
        "column": column,
        "metric": metric,
        "paper_value": paper,
        "our_mean": mean,
        "our_std": std,
        "seeds": n,
        "delta": delta,
        "status": status,
        "paper_std": paper_std,
        "note": note,
        "near_chance": near_chance,  # ours lies near chance: the run learnt (almost) nothing
    }


def _check_metrics(payload: Mapping[str, Any]) -> None:
    """Every metric of every cell is registered, settings metrics only in settings tables and
    analytic metrics only in analytic tables (and those tables show nothing else)."""
    for cell in payload["cells"]:
        for name in cell["metrics"]:
            try:
                metric = METRICS.get(name)
            except UnknownNameError as err:
                raise ValueError(f"table {payload['id']}: {err}") from None
            if metric.kind == "settings" and payload["kind"] != "settings":
                raise ValueError(
                    f"table {payload['id']}: metric '{name}' is a run setting, shown only in "
                    "settings tables"
                )
            if (metric.kind == "analytic") != (payload["kind"] == "analytic"):
                raise ValueError(
                    f"table {payload['id']}: metric '{name}' is not shown in tables of kind "
                    f"{payload['kind']} (analytic metrics go in analytic tables only)"
                )


def _targets(
    payload: Mapping[str, Any], acc: Mapping[int, Value], scale: str
) -> dict[tuple, tuple[float, float | None, str, str, int]]:
    """A rounds-to-target table's targets: group → (ours, paper's, how ours was set, the group's
    label, the reference's seeds). Ours is the paper's printed target at paper scale, else the
    reference cell's best accuracy, floored (`target_from_best`)."""
    spec = payload["spec"]
    tspec = spec["target"]
    group_by = tspec["group_by"]
    ref_where = tspec["cell"]
    targets: dict[tuple, tuple[float, float | None, str, str, int]] = {}
    for i, cell in enumerate(payload["cells"]):
        labels = cell["labels"]
        if not all(a in labels for a in group_by):
            continue
        if not all(labels.get(k) == v for k, v in ref_where.items()):
            continue
        if not uses_rounds(cell["metrics"]):
            continue
        key = tuple(labels[a] for a in group_by)
        paper_t = parse_reference(_nested(tspec.get("paper") or {}, key))[0]
        if scale == "paper":
            ours, how = paper_t, "printed target"
        else:
            ours = target_from_best(acc[i][0]) if i in acc else NAN
            how = "ours: reference best, floored"
        label = " · ".join(cell["display"][a] for a in group_by)
        targets[key] = (ours, paper_t, how, label, len(cell["run_ids"]))
    return targets


def _rounds_to_target(
    payload: Mapping[str, Any],
    acc: Mapping[int, Value],
    results: Mapping[str, RunResult],
    scale: str,
) -> tuple[list[dict[str, Any]], dict[int, Value], dict[tuple, float]]:
    """A rounds-to-target table's target lines (one per group of cells), each cell's rounds to
    its group's target over the seeds (by cell index) and each group's reference rounds."""
    cells = payload["cells"]
    group_by = payload["spec"]["target"]["group_by"]
    ref_where = payload["spec"]["target"]["cell"]
    targets = _targets(payload, acc, scale)
    rounds: dict[int, Value] = {}
    ref_rounds: dict[tuple, float] = {}
    lines: list[dict[str, Any]] = []
    per_run = _run_rounds(payload, targets, results)
    for i, cell in enumerate(cells):
        if i not in acc or not uses_rounds(cell["metrics"]):
            continue
        m, s, n = mean_std([per_run[r] for r in cell["run_ids"]])
        rounds[i] = (m, s, n, NEVER if is_nan(m) else OK)
    for ours, paper_t, how, label, n_ref in targets.values():
        # one line per group: row = the group's label, column and metric "target"
        target = (paper_t, None, ours, NAN, n_ref, how)
        lines.append(_line(payload, scale, label, "target", TARGET.name, *target))
    for i, cell in enumerate(cells):
        if i in rounds and all(cell["labels"].get(k) == v for k, v in ref_where.items()):
            ref_rounds[tuple(cell["labels"].get(a) for a in group_by)] = rounds[i][0]
    return lines, rounds, ref_rounds


def _cell_accuracies(
    payload: Mapping[str, Any], results: Mapping[str, RunResult]
) -> dict[int, Value]:
    """Each cell's best accuracy over its seeds (cells with runs of ours), by cell index."""
    acc: dict[int, Value] = {}
    if payload["kind"] in ("settings", "analytic"):
        return acc
    for i, cell in enumerate(payload["cells"]):
        if cell["pending"] or cell.get("quoted"):
            continue
        runs = [results[r] for r in cell.get("calibrations") or cell["run_ids"]]
        m, s, n = mean_std([r.best_acc for r in runs])
        status = DIVERGED if any(r.status == "diverged" for r in runs) else OK
        acc[i] = (m, s, n, status)
    return acc


def _run_rounds(
    payload: Mapping[str, Any], targets: Mapping[tuple, tuple], results: Mapping[str, RunResult]
) -> dict[str, float]:
    """Run id → its first round at its group's target (`_targets`), for the runs of every cell
    with runs of ours that shows a rounds metric; NaN: never reached, or no target."""
    group_by = payload["spec"]["target"]["group_by"]
    out: dict[str, float] = {}
    for cell in payload["cells"]:
        if cell["pending"] or cell.get("quoted") or not uses_rounds(cell["metrics"]):
            continue
        target = targets.get(tuple(cell["labels"].get(a) for a in group_by), (NAN,))[0]
        for rid in cell["run_ids"]:
            out[rid] = rounds_to_target(results[rid].curve, target)
    return out


def seed_rounds(
    payload: Mapping[str, Any], results: Mapping[str, RunResult], scale: str
) -> dict[str, float]:
    """Each run's rounds to its group's target in a rounds-to-target table, one seed at a time
    (run id → first round at the target; NaN: never reached, or the group has no target). The
    targets are the table's own (`compute_table`'s target lines)."""
    targets = _targets(payload, _cell_accuracies(payload, results), scale)
    return _run_rounds(payload, targets, results)


def compute_table(
    payload: Mapping[str, Any], results: Mapping[str, RunResult], scale: str
) -> list[dict[str, Any]]:
    """Long rows of one table. `payload` is `fedhet.experiments.Item.payload()`; `results` maps
    run ids to their RunResult (every non-pending, non-quoted cell's runs must be there)."""
    _check_metrics(payload)
    spec = payload["spec"]
    kind = payload["kind"]
    cells = payload["cells"]
    lines: list[dict[str, Any]] = []
    acc = _cell_accuracies(payload, results)
    # cells whose runs learnt (almost) nothing: their numbers are marked, not compared (an
    # accuracy is judged on its own value, `_near`)
    chance = {i for i, (m, *_) in acc.items() if near_chance(m, cells[i].get("chance_acc"))}

    rounds: dict[int, Value] = {}
    ref_rounds: dict[tuple, float] = {}
    group_by: list[str] = []
    if kind == "rounds_to_target":
        group_by = spec["target"]["group_by"]
        target_lines, rounds, ref_rounds = _rounds_to_target(payload, acc, results, scale)
        lines.extend(target_lines)

    for i, cell in enumerate(cells):
        for metric in cell["metrics"]:
            paper, paper_std = parse_reference(cell["reference"].get(metric))
            state = CellState(metric, cell, results)
            note = ""
            if cell.get("quoted"):
                # the paper's number, quoted from elsewhere: no run of ours
                value, note = (NAN, NAN, 0, QUOTED), cell["quoted"]
            elif kind == "settings":
                value = setting_value(state)
            elif kind == "analytic":
                value = analytic_value(state)
            elif cell["pending"]:
                value, note = (NAN, NAN, 0, PENDING), cell["pending"]
            else:
                state.status = acc[i][3]
                state.rounds = rounds.get(i, state.rounds)
                if kind == "rounds_to_target":
                    key = tuple(cell["labels"].get(a) for a in group_by)
                    state.reference_rounds = ref_rounds.get(key, NAN)
                value = METRICS.get(metric).compute(state)
            row, column = cell["row"], cell["column"]
            near = _near(metric, value[0], cell.get("chance_acc"), i in chance)
            lines.append(_line(payload, scale, row, column, metric, paper, paper_std, *value,
                               note, near_chance=near))

    averages = spec.get("averages")
    if averages:
        lines.extend(_averages(payload, averages, lines, scale))
    return lines


def _near(metric: str, value: float, chance: float | None, runs_near: bool) -> bool:
    """Whether a line's number of ours is marked near chance: an accuracy when its own value
    lies near chance (one client's accuracy of a run may, another not), any other metric
    (rounds, speed-up, cost) when the best accuracy of the cell's runs does."""
    known = lookup(metric)
    if known is not None and known.accuracy:
        return near_chance(value, chance)
    return runs_near


def _averages(payload, averages, lines, scale):
    """Mean over one axis (the paper's "Average" rows), from the first grid's cells."""
    over = averages["over"]
    label = averages.get("label", "Average")
    spec = payload["spec"]
    by_rc = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    groups: dict[tuple, list] = {}
    chances: dict[tuple, float | None] = {}
    order: list[tuple] = []
    for cell in payload["cells"]:
        if cell["grid"] != 0 or over not in cell["labels"]:
            continue
        rows = [a for a in spec.get("rows", []) if a != over]
        cols = list(spec.get("columns", []))
        key = tuple(cell["labels"][a] for a in rows + cols)
        disp_row = " · ".join([*(cell["display"][a] for a in rows), label])
        disp_col = " · ".join(cell["display"][a] for a in cols)
        for metric in cell["metrics"]:
            gkey = (key, disp_row, disp_col, metric)
            if gkey not in groups:
                groups[gkey] = []
                order.append(gkey)
                chances[gkey] = cell.get("chance_acc")
            groups[gkey].append(by_rc[(cell["row"], cell["column"], metric)])
    out = []
    for gkey in order:
        key, disp_row, disp_col, metric = gkey
        members = groups[gkey]
        paper = parse_reference(_nested(averages.get("reference") or {}, key))[0]
        if any(m["status"] == PENDING for m in members):
            out.append(
                _line(payload, scale, disp_row, disp_col, metric, paper, NAN, NAN, NAN, 0, PENDING)
            )
            continue
        quoted = [m["note"] for m in members if m["status"] == QUOTED]
        if quoted:  # an average over numbers quoted from elsewhere: the paper's only
            note = ", ".join(dict.fromkeys(quoted))
            out.append(
                _line(
                    payload,
                    scale,
                    disp_row,
                    disp_col,
                    metric,
                    paper,
                    NAN,
                    NAN,
                    NAN,
                    0,
                    QUOTED,
                    note,
                )
            )
            continue
        vals = [m["our_mean"] for m in members]
        mean = NAN if any(is_nan(v) for v in vals) else sum(vals) / len(vals)
        n = min(m["seeds"] for m in members)
        missing = [m["status"] for m in members if m["status"] != OK]
        status = OK if not is_nan(mean) else (missing[0] if missing else DIVERGED)
        near = _near(metric, mean, chances[gkey], any(m["near_chance"] for m in members))
        out.append(
            _line(payload, scale, disp_row, disp_col, metric, paper, NAN, mean, NAN, n, status,
                  near_chance=near)
        )
    return out


def to_frame(lines: Sequence[Mapping[str, Any]]):
    """The long table as a pandas DataFrame in the CSV schema (`SCHEMA` columns first)."""
    import pandas as pd

    df = pd.DataFrame(list(lines))
    if df.empty:
        df = pd.DataFrame(columns=[*SCHEMA, "paper_std", "note"])
    return df


def write_csv(lines: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write the long lines as CSV (`SCHEMA` columns; NaN written as `NaN`)."""
    df = to_frame(lines)[SCHEMA]
    df.to_csv(path, index=False, float_format="%.6g", na_rep="NaN")


def read_csv(path: str | Path):
    """Read a long table written by `write_csv` (a pandas DataFrame)."""
    import pandas as pd

    frame = pd.read_csv(path, keep_default_na=True, na_values=["NaN"])
    # an empty row or column label (a table with one column, e.g. FedImpro Table 8) stays ""
    for label in ("row", "column"):
        frame[label] = frame[label].fillna("").astype(str)
    return frame
