"""Expanding one table or figure of a paper config: its grids' axes × vocabulary → cells, each
cell's run settings (protocol, grid and axis patches, look-up tables, the scale) → run ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from fedhet import catalog
from fedhet.config import ConfigError, resolve_run, run_id
from fedhet.experiments.cells import Cell, Item
from fedhet.experiments.jobs import calibration_job, cost_factor
from fedhet.experiments.kinds import RUNLESS_KINDS, TABLE_KINDS
from fedhet.experiments.loading import (
    ExperimentError,
    Loader,
    get_path,
    merge_settings,
    plain_copy,
    set_path,
)
from fedhet.experiments.ran import label_ran_as, scaled_setting
from fedhet.experiments.scaling import apply_scale, scale_for_paper
from fedhet.printed import join_labels


def _vocab_entry(proto: dict[str, Any], axis: str, key: str, file: str, where: str):
    values = proto["values"].get(axis)
    if values is None:
        raise ExperimentError(
            file,
            where,
            f"axis '{axis}' has no values in protocol {proto['name']}; "
            f"valid axes: {', '.join(sorted(proto['values']))}",
        )
    if key not in values:
        raise ExperimentError(
            file,
            where,
            f"unknown {axis} '{key}' in protocol {proto['name']}; valid: {', '.join(values)}",
        )
    entry = values[key] or {}
    return entry.get("label", key), entry.get("set") or {}


def _posthoc_of(proto: dict[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """Calibration settings of a cell: the `posthoc` patches of its axis values, in axis order
    (fedhet.posthoc.settings keys). A cell is post-hoc when they name a `method`."""
    out: dict[str, Any] = {}
    for axis, value in labels.items():
        entry = (proto["values"].get(axis) or {}).get(value) or {}
        out.update(entry.get("posthoc") or {})
    return out


def _merge_runtime(existing: dict[str, Any], new: Mapping[str, Any]) -> None:
    """Two cells naming one run may ask for different extras (runtime is not part of the id):
    keep the union of the rounds whose snapshots / client models are saved."""
    rt = existing.setdefault("runtime", {})
    for key in ("snapshot_rounds", "save_client_models"):
        extra = (new.get("runtime") or {}).get(key) or []
        if extra:
            rt[key] = sorted({*(rt.get(key) or []), *extra})


def _last_round_runtime(run: dict[str, Any]) -> dict[str, Any]:
    """`-1` in runtime.save_client_models / snapshot_rounds = the last round at this scale."""
    rt = run.get("runtime") or {}
    rounds = (run.get("training") or {}).get("rounds", 10)
    for key in ("snapshot_rounds", "save_client_models"):
        if -1 in (rt.get(key) or []):
            rt[key] = sorted({rounds if r == -1 else int(r) for r in rt[key]})
    return run


def _lookup(
    values: Mapping[str, Any], by: list[str], labels: Mapping[str, str]
) -> tuple[bool, Any]:
    node: Any = values
    for axis in by:
        label = labels.get(axis)
        if not isinstance(node, Mapping) or label not in node:
            return False, None
        node = node[label]
    return True, node


def _set_looked_up(patch: dict[str, Any], key: str, value: Any) -> None:
    """A look-up table's value into a cell's settings. `plugins.<name>.<param>` fills in a
    parameter of the cell's plug-in <name> (when it runs it and its entries left the parameter
    unset: FedBR's λ per dataset); any other key is a run setting's path."""
    if not key.startswith("plugins."):
        set_path(patch, key, value)
        return
    _, name, param = key.split(".", 2)
    for plugin in patch.get("plugins") or []:
        if plugin.get("name") == name:
            params = plugin.setdefault("params", {})
            if get_path(params, param) is None:
                set_path(params, param, value)


def _looked_up_patch(own: Any, patch: Mapping[str, Any], key: str, value: Any) -> dict:
    """An axis value's own patch with what a look-up by that axis alone sets (`key` to
    `value`), for telling what the value ran with: a plug-in parameter lands in the plug-ins
    the cell runs (those of `patch`)."""
    out: dict[str, Any] = plain_copy(own) if own else {}
    if key.startswith("plugins."):
        name = key.split(".", 2)[1]
        if not any(p.get("name") == name for p in patch.get("plugins") or []):
            return out
        mine = next((p for p in out.setdefault("plugins", []) if p.get("name") == name), None)
        if mine is None:
            mine = {"name": name}
            out["plugins"].append(mine)
        _set_looked_up({"plugins": [mine]}, key, value)
    else:
        set_path(out, key, value)
    return out


def _check_lookup_keys(lookup: dict, proto: dict[str, Any], file: str, where: str) -> None:
    """Every key of a look-up table must be a vocabulary key (catches typos)."""

    def walk(node: Any, depth: int, path: str) -> None:
        if depth == len(lookup["by"]):
            return
        axis = lookup["by"][depth]
        valid = proto["values"].get(axis, {})
        if not isinstance(node, Mapping):
            raise ExperimentError(file, f"{where}{path}", f"expected a mapping keyed by {axis}")
        for key, child in node.items():
            if key not in valid:
                raise ExperimentError(
                    file,
                    f"{where}{path}.{key}",
                    f"unknown {axis} '{key}'; valid: {', '.join(valid)}",
                )
            walk(child, depth + 1, f"{path}.{key}")

    walk(lookup.get("values") or {}, 0, "")


def _axes_of(grid: dict[str, Any], file: str, where: str) -> list[tuple[str, list[str]]]:
    axes = []
    for axis, values in (grid.get("axes") or {}).items():
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list) or not values:
            raise ExperimentError(file, f"{where}.axes.{axis}", "must be a non-empty list")
        axes.append((axis, [str(v) for v in values]))
    return axes


def _row_column(
    grid: dict[str, Any], spec: dict[str, Any], display: dict[str, str], axes: list
) -> tuple[str, str]:
    names = [a for a, _ in axes]
    rows = grid.get("rows", [a for a in spec.get("rows", []) if a in names])
    cols = grid.get("columns", [a for a in spec.get("columns", []) if a in names])
    row_parts = [display[a] for a in rows]
    if grid.get("row_label"):
        row_parts.append(str(grid["row_label"]))
    col_parts = [display[a] for a in cols]
    if grid.get("column_label"):
        col_parts.append(str(grid["column_label"]))
    return " · ".join(row_parts), " · ".join(col_parts)


def _reference_axes(grid: dict[str, Any], spec: dict, axes: list) -> list[str]:
    """The axes a grid's `reference` is nested by: its row axes, then its column axes."""
    names = [a for a, _ in axes]
    rows = grid.get("rows", [a for a in spec.get("rows", []) if a in names])
    cols = grid.get("columns", [a for a in spec.get("columns", []) if a in names])
    return [*rows, *cols]


def _check_reference(grid: dict[str, Any], spec: dict, axes: list, metrics: list[str],
                     file: str, where: str) -> None:
    """Every key of the grid's `reference` is a label of its axis (or a metric at the last
    level), so a typo stops the DAG instead of silently dropping paper numbers."""
    ref = grid.get("reference")
    if ref is None:
        return
    values_of = {axis: [str(v) for v in values] for axis, values in axes}
    order = _reference_axes(grid, spec, axes)

    def walk(node: Any, depth: int, path: str) -> None:
        if depth == len(order):
            if isinstance(node, Mapping) and (len(metrics) > 1 or metrics[0] in node):
                for key in node:
                    if key not in metrics:
                        raise ExperimentError(
                            file, f"{path}.{key}",
                            f"unknown metric '{key}'; valid here: {', '.join(metrics)}",
                        )
            return
        axis = order[depth]
        if not isinstance(node, Mapping):
            raise ExperimentError(
                file, path, f"expected a mapping by {axis} ({', '.join(values_of[axis])}), "
                f"got {node!r}",
            )
        for key, sub in node.items():
            if str(key) not in values_of[axis]:
                raise ExperimentError(
                    file, f"{path}.{key}",
                    f"'{key}' is not a label of axis {axis}; valid: {', '.join(values_of[axis])}",
                )
            walk(sub, depth + 1, f"{path}.{key}")

    walk(ref, 0, f"{where}.reference")


def _reference_for(grid: dict[str, Any], spec: dict, labels: dict[str, str], axes: list, metrics):
    """Transcribed paper values of one cell: grid `reference` nested by row axes, column axes,
    then metric (the metric level is left out when the grid shows one metric)."""
    ref = grid.get("reference")
    if ref is None:
        return {}
    node: Any = ref
    for axis in _reference_axes(grid, spec, axes):
        if not isinstance(node, Mapping) or labels[axis] not in node:
            return {}
        node = node[labels[axis]]
    if len(metrics) == 1 and not (isinstance(node, Mapping) and metrics[0] in node):
        return {metrics[0]: node}
    if not isinstance(node, Mapping):
        return {}
    return {m: node[m] for m in metrics if m in node}


def _restrict(axes: list, scale: Mapping[str, Any], target: str) -> list | None:
    """Axis values kept at this scale: the scale's `restrict.<paper>_<id>.<axis>` list (a
    table too costly to run whole at a small scale), in the grid's order; None when the
    restriction leaves the grid no value (the item's other grids may still run)."""
    keep = (scale.get("restrict") or {}).get(target) or {}
    out = []
    for axis, values in axes:
        if axis in keep:
            wanted = {str(v) for v in keep[axis]}
            values = [v for v in values if v in wanted]
            if not values:
                return None
        out.append((axis, values))
    return out


def _restrict_note(kept: Mapping[str, Iterable[str]], dropped: Mapping[str, Iterable[str]]) -> str:
    """The note a restricted table or figure carries (its caption, its footnote): the values
    this scale runs of each restricted axis and those it leaves out, printed as the cells print
    them (the vocabulary's labels, not its keys); "" when it leaves nothing out."""
    axes = [axis for axis in dropped if list(dropped[axis])]
    if not axes:
        return ""
    runs_of = {a: list(kept.get(a) or []) for a in axes}
    left_of = {a: list(dropped[a]) for a in axes}
    runs = " and ".join(f"{join_labels(runs_of[a])} ({len(runs_of[a])} of "
                        f"{len(runs_of[a]) + len(left_of[a])})" for a in axes)
    left = "; ".join(join_labels(left_of[a]) for a in axes)
    return f"At this scale only {runs} run; not run here: {left}."


def _left_out(grid: dict[str, Any], spec: dict[str, Any], proto: dict[str, Any],
              all_axes: list, axes: list | None, metrics: list[str], file: str,
              where: str) -> list[dict[str, Any]]:
    """The cells of a grid this scale does not run (its `restrict`): labels, printed labels,
    row, column and the paper's numbers, so that a claim's check can tell the part of the
    paper it tested from the part it did not."""
    keep = dict(axes or [])
    out = []
    for combo in product(*[values for _, values in all_axes]):
        chosen = dict(zip([a for a, _ in all_axes], combo, strict=True))
        if axes is not None and all(v in keep[a] for a, v in chosen.items()):
            continue
        labels: dict[str, str] = {**proto["defaults"], **chosen}
        display = {a: str(_vocab_entry(proto, a, v, file, where)[0]) for a, v in labels.items()}
        row, column = _row_column(grid, spec, display, all_axes)
        cell = {"labels": labels, "display": display, "row": row, "column": column,
                "metrics": list(metrics),
                "reference": _reference_for(grid, spec, labels, all_axes, metrics)}
        quoted = next((q for a, v in labels.items() if (q := _quoted_of(proto, a, v))), None)
        if quoted:
            cell["quoted"] = quoted
        out.append(cell)
    return out


def figure_kinds() -> list[str]:
    """The figure kinds a paper file may name (`fedhet.figures.kinds`, which reads this package's
    cells, so it is imported when asked)."""
    from fedhet.figures.kinds import FIGURE_KINDS

    return FIGURE_KINDS.names()


@dataclass
class ExpansionContext:
    """What every table and figure of one expansion shares: the paper files' loader, the scale
    and seeds they run at, the plug-ins the config skips, and the runs and calibration jobs
    found so far (each item adds its own; run id or calibration id → its settings)."""

    loader: Loader
    scale: dict[str, Any]
    seeds: list[int]
    skip_plugins: frozenset[str] = frozenset()
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    calibrations: dict[str, dict[str, Any]] = field(default_factory=dict)


def expand_item(
    ctx: ExpansionContext,
    paper: str,
    item_id: str,
    spec: dict[str, Any],
    is_figure: bool,
    vocabulary: Mapping[str, Mapping[str, Any]] | None = None,
) -> Item:
    """One table or figure of a paper → its cells and their runs (added to `ctx.runs`, their
    calibrations to `ctx.calibrations`). `vocabulary` (axis → key → {label, set}) adds values to
    its protocols' vocabulary, never replacing one (a challenger joining the table,
    `fedhet.experiments.challengers`)."""
    loader, seeds, runs = ctx.loader, ctx.seeds, ctx.runs
    skip_plugins, calibrations = ctx.skip_plugins, ctx.calibrations
    file = str(loader.paper_file(paper))
    # which challengers a comparable table accepts concerns the leaderboard only: the table's
    # payload stays as it was
    spec = {key: value for key, value in spec.items() if key != "challengers"}
    scale = scale_for_paper(ctx.scale, paper)
    section = "figures" if is_figure else "tables"
    base = f"{section}.{item_id}"
    kind = spec.get("kind", "curve" if is_figure else "accuracy")
    valid_kinds = figure_kinds() if is_figure else TABLE_KINDS
    if kind not in valid_kinds:
        raise ExperimentError(
            file, f"{base}.kind", f"unknown kind '{kind}'; valid: {', '.join(valid_kinds)}"
        )
    default_metrics = [spec.get("metric", "test_acc")] if is_figure else spec.get("metrics", ["acc"])
    seeds = [int(s) for s in spec.get("seeds") or seeds]  # an item may run its own seeds
    cells: list[Cell] = []
    restricted = (scale.get("restrict") or {}).get(f"{paper}_{item_id}") or {}
    shown: dict[str, dict[str, None]] = {}  # restricted axis → printed values kept
    dropped: dict[str, dict[str, None]] = {}  # restricted axis → printed values left out
    left_out: list[dict[str, Any]] = []  # the cells this scale does not run
    paper_settings: list[tuple[dict[str, Any], dict[str, Any]]] = []  # per cell: paper, ours
    for g, grid in enumerate(spec.get("grids") or []):
        where = f"{base}.grids[{g}]"
        proto_name = grid.get("protocol", spec.get("protocol"))
        if not proto_name:
            raise ExperimentError(
                file, f"{where}.protocol", "missing (set it on the grid or table)"
            )
        if "/" not in proto_name:
            proto_name = f"{paper}/{proto_name}"
        proto = _with_vocabulary(loader.protocol(paper, proto_name, file), vocabulary, file, where)
        for li, lookup in enumerate(proto["lookups"]):
            _check_lookup_keys(lookup, proto, proto["file"], f"lookups[{li}]({lookup['key']})")
        all_axes = _axes_of(grid, file, where)
        metrics = grid.get("metrics", default_metrics)
        for axis, values in all_axes:  # every label names a vocabulary entry
            for value in values:
                _vocab_entry(proto, axis, value, file, f"{where}.axes.{axis}")
        _check_reference(grid, spec, all_axes, metrics, file, where)
        axes = _restrict(all_axes, scale, f"{paper}_{item_id}")
        if restricted:
            left_out += _left_out(grid, spec, proto, all_axes, axes, metrics, file, where)
        for axis, values in all_axes:  # what the restriction keeps, as the cells print it
            if axis in restricted:
                run = {str(v) for v in restricted[axis]}
                for v in values:
                    label = str(_vocab_entry(proto, axis, v, file, where)[0])
                    (shown if v in run else dropped).setdefault(axis, {})[label] = None
        if axes is None:
            continue
        for combo in product(*[values for _, values in axes]):
            labels: dict[str, str] = dict(proto["defaults"])
            labels.update({axis: value for (axis, _), value in zip(axes, combo, strict=True)})
            display: dict[str, str] = {}
            patch: dict[str, Any] = merge_settings(proto["settings"], grid.get("set") or {})
            quoted = None
            patches: dict[str, Any] = {}
            looked_up: dict[str, Any] = {}  # axis → its patch with its own look-ups' values
            printed = spec.get("value_labels") or {}  # the item's own names of axis values
            for axis, value in labels.items():
                label, vpatch = _vocab_entry(proto, axis, value, file, f"{where}.axes.{axis}")
                display[axis] = str(printed.get(axis, {}).get(value, label))
                patches[axis] = vpatch
                patch = merge_settings(patch, vpatch)
                quoted = quoted or _quoted_of(proto, axis, value)
            for lookup in proto["lookups"]:
                found, value = _lookup(lookup.get("values") or {}, lookup["by"], labels)
                if found:
                    _set_looked_up(patch, lookup["key"], value)
                    if len(lookup["by"]) == 1:  # what the one axis's value sets, for `runs_as`
                        by = lookup["by"][0]
                        looked_up[by] = _looked_up_patch(
                            looked_up.get(by, patches.get(by)), patch, lookup["key"], value)
                elif not lookup.get("partial", False):
                    missing = ".".join(labels.get(a, "?") for a in lookup["by"])
                    raise ExperimentError(
                        proto["file"],
                        f"lookups({lookup['key']}).values.{missing}",
                        f"no value for this cell of {paper} {item_id}",
                    )
            row, column = _row_column(grid, spec, display, axes)
            cell = Cell(
                paper=paper,
                item=item_id,
                grid=g,
                labels=labels,
                display=display,
                row=row,
                column=column,
                metrics=list(metrics),
                reference=_reference_for(grid, spec, labels, axes, metrics),
                quoted=quoted,
            )
            patch, pending = _without_pending(patch, skip_plugins, file, f"{where} cell {labels}")
            scaled = _last_round_runtime(apply_scale({**patch, "seed": seeds[0]}, scale, file))
            try:
                first = resolve_run(scaled)
            except ConfigError as err:
                raise ExperimentError(
                    file, f"{where} cell {labels}", f"{err} (after applying the scale)"
                ) from None
            cell.settings = first
            cell.paper_patch = {**patch, "seed": seeds[0]}
            if not quoted:
                paper_settings.append(({**patch, "seed": seeds[0]}, first))
            # axis → the numbers its value ran with where the scale changed them: a figure
            # ticks them (a table's notes say what the scale did); those its label states
            # ("IPC=10" ran with 2 images a class), for the scorecard to name what ran
            cell.runs_as = {
                axis: text for axis, vpatch in {**patches, **looked_up}.items()
                if vpatch and (text := label_ran_as(display[axis], vpatch, first)) is not None}
            if is_figure:
                cell.ran = {axis: text for axis, vpatch in patches.items()
                            if vpatch and (text := scaled_setting(vpatch, first)) is not None}
            if kind == "settings":
                key = spec.get("setting_key", "training.lr")
                cell.values = {m: get_path(first, key) for m in metrics}
            elif kind == "analytic":
                cell.values = {"function": _analytic_function(spec, file, base)}
            elif "cost" in metrics:
                cell.values = {"cost_factor": cost_factor(first)}
            domain = _domain_of(proto, labels)
            if domain is not None:
                cell.values = {**cell.values, "domain": domain}
            if not pending and not quoted and kind not in RUNLESS_KINDS:
                for seed in seeds:
                    # the seed changes nothing else of the resolved settings
                    resolved = first if seed == seeds[0] else {**plain_copy(first), "seed": seed}
                    rid = run_id(resolved)
                    _merge_runtime(runs.setdefault(rid, resolved), resolved)
                    cell.run_ids.append(rid)
                posthoc = _posthoc_of(proto, labels)
                if posthoc.get("method"):
                    for rid in cell.run_ids:
                        cid, job = calibration_job(rid, posthoc, file, f"{where} cell {labels}")
                        calibrations.setdefault(cid, job)
                        cell.calibrations.append(cid)
            if pending and not quoted and kind not in RUNLESS_KINDS:
                skipped = [n for n in pending if n in skip_plugins]
                cell.pending = (
                    f"method skipped by config (skip_plugins): {', '.join(skipped)}"
                    if skipped
                    else f"method not implemented yet: {', '.join(pending)}"
                )
            cells.append(cell)
    if not cells and restricted and spec.get("grids"):
        raise ExperimentError("config/scales", f"restrict.{paper}_{item_id}",
                              f"leaves no value in any grid of {base}")
    if not cells:
        raise ExperimentError(file, f"{base}.grids", "no grids: a table or figure needs one")
    note = _restrict_note(shown, dropped)
    if note:
        spec = {**spec, "scale_note": note}
    return Item(paper=paper, id=item_id, kind=kind, is_figure=is_figure, spec=spec, cells=cells,
                left_out=left_out, paper_settings=paper_settings, scale=scale)


class ValueClash(ExperimentError):
    """A value added to a protocol's axis (a challenger's name) that the axis already has."""

    def __init__(self, file: str, key: str, message: str, value: str, axis: str) -> None:
        super().__init__(file, key, message)
        self.value = value
        self.axis = axis


def _with_vocabulary(proto: dict[str, Any], vocabulary: Mapping[str, Mapping[str, Any]] | None,
                     file: str, where: str) -> dict[str, Any]:
    """The protocol with `vocabulary`'s values added to its axes; a key it already has stops
    the DAG (a challenger cannot take the name of a method the table has)."""
    if not vocabulary:
        return proto
    values = dict(proto["values"])
    for axis, entries in vocabulary.items():
        have = values.get(axis) or {}
        clash = sorted(set(entries) & set(have))
        if clash:
            raise ValueClash(file, f"{where}.axes.{axis}",
                             f"challenger '{clash[0]}' is already a value of axis {axis} "
                             f"in protocol {proto['name']}: a challenger is a method the "
                             "table does not have", clash[0], axis)
        values[axis] = {**have, **entries}
    return {**proto, "values": values}


def _without_pending(
    patch: dict[str, Any], skip: Iterable[str], file: str, where: str
) -> tuple[dict[str, Any], list[str]]:
    """The cell's settings without the methods that cannot run yet (declared but not
    implemented, or skipped by config), and their names. A pending algorithm is replaced by
    FedAvg so that the cell still shows its other settings."""
    pending = []
    algo = (patch.get("algorithm") or {}).get("name")
    if algo is not None:
        decl = _declared(algo, "algorithm", file, f"{where} → algorithm.name")
        if not decl.implemented:
            pending.append(algo)
            patch = {**patch, "algorithm": {"name": "fedavg"}}
    kept = []
    for plugin in patch.get("plugins") or []:
        decl = _declared(plugin.get("name"), "plugin", file, f"{where} → plugins")
        if not decl.implemented or decl.name in skip:
            pending.append(decl.name)
        else:
            kept.append(plugin)
    if "plugins" in patch:
        patch = {**patch, "plugins": kept}
    return patch, pending


def _declared(name: Any, kind: str, file: str, where: str):
    valid = catalog.names(kind)
    if name not in valid:
        raise ExperimentError(file, where, f"unknown {kind} '{name}'; valid: {', '.join(valid)}")
    return catalog.method(name)


def _analytic_function(spec: Mapping[str, Any], file: str, where: str) -> str:
    """The registered function an analytic table's cells are computed by (checked here, so a
    typo stops the DAG, not the table job)."""
    from fedhet.tables.analytic import ANALYTIC

    name = spec.get("function")
    if name not in ANALYTIC:
        raise ExperimentError(file, f"{where}.function",
                              f"unknown analytic function {name!r}; valid: "
                              f"{', '.join(ANALYTIC.names())}")
    return name


def _domain_of(proto: dict[str, Any], labels: Mapping[str, str]) -> str | None:
    """The test domain a cell reads (a vocabulary entry with `domain: <name>|mean`): its
    runs are scored per client domain and the cell shows that domain's accuracy, or their
    unweighted mean. The entry sets nothing else, so one run serves a whole row."""
    found = None
    for axis, value in labels.items():
        entry = (proto["values"].get(axis) or {}).get(value) or {}
        if entry.get("domain") is not None:
            found = str(entry["domain"])
    return found


def _quoted_of(proto: dict[str, Any], axis: str, value: str) -> str | None:
    """The source of a number the paper quotes from elsewhere (a vocabulary entry with
    `quoted: <source>`): such a cell shows the paper's number and has no run of ours."""
    entry = (proto["values"].get(axis) or {}).get(value) or {}
    return entry.get("quoted")
