"""Challengers: a method of the user's own (usually from another installed package) added to every
comparable table of the papers, for the leaderboard (torch-free).

A paper config marks a table comparable with `challengers: {<kind>: {axis, set, metric}}`: a
challenger of that kind (algorithm or plug-in) joins the table's `axis` as one more value, with
the declaration's `set` under its own settings (what every method of the paper's protocol runs
with), in every grid that has the axis. The workflow config names the challengers (`challengers:
[{name, label, set, per_paper}]`, usually in a file of the user's own given with `--configfile`).

Each comparable table is expanded once more per challenger, with the same protocol, scale and
seeds: its baseline cells resolve to the runs the paper's own table already uses (the same run
ids, trained once), its challenger cells to new ones. The papers' own items are untouched, so a
challenger changes no existing run id and removing it leaves the DAG as it was. The scale may cut
a comparable table further for the leaderboard (`leaderboard.restrict`, on top of `restrict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fedhet import catalog
from fedhet.papers import PAPERS
from fedhet.config import ConfigError
from fedhet.declare import resolve_params
from fedhet.experiments.cells import Item
from fedhet.experiments.expansion import expand_item
from fedhet.experiments.loading import ExperimentError, Loader, merge_settings, plain_copy
from fedhet.names import PAPERS

# where the challengers come from, in errors (the workflow config, often --configfile mine.yaml)
WHERE = "workflow config (config/config.yaml + --configfile)"
KINDS = ("algorithm", "plugin")


@dataclass(frozen=True)
class Challenger:
    """One challenger: an installed method, its label and the settings its cells get."""

    name: str
    label: str
    kind: str  # "algorithm" | "plugin"
    set: dict[str, Any]
    per_paper: dict[str, dict[str, Any]] = field(default_factory=dict)  # paper → set

    def settings_for(self, paper: str) -> dict[str, Any]:
        """Its settings in one paper's tables: `set`, with that paper's `per_paper` set over it."""
        return merge_settings(self.set, self.per_paper.get(paper) or {})


@dataclass(frozen=True)
class Join:
    """How a challenger of one kind joins one comparable table (its paper config)."""

    paper: str
    table: str
    kind: str
    axis: str
    set: dict[str, Any]
    metric: str  # scored per seed by the leaderboard

    @property
    def target(self) -> str:
        return f"{self.paper}_{self.table}"


@dataclass
class Board:
    """One challenger's comparable tables, each expanded with the challenger on its axis."""

    challenger: Challenger
    items: dict[str, Item]  # "<paper>_<table>" → the table with the challenger
    joins: dict[str, Join]  # "<paper>_<table>" → how the challenger joined it

    def run_ids(self) -> list[str]:
        """Every run of its tables, each once: the baselines' and the challenger's."""
        return list(dict.fromkeys(r for item in self.items.values() for r in item.run_ids()))

    def challenger_run_ids(self) -> list[str]:
        """The runs of its challenger cells (those the tables did not have)."""
        out: dict[str, None] = {}
        for target, item in self.items.items():
            axis = self.joins[target].axis
            for cell in item.cells:
                if cell.labels.get(axis) == self.challenger.name:
                    out.update(dict.fromkeys(cell.run_ids))
        return list(out)


def scored_per_seed(metric: Any) -> bool:
    """Whether a leaderboard can score a table metric seed by seed: one read from each seed's
    run, or the rounds to a rounds-to-target table's target (each seed's curve)."""
    return metric is not None and (metric.kind == "run" or metric.name == "rounds")


def _default_metric(spec: Mapping[str, Any]) -> str | None:
    """A table's first metric computed from each seed's run (what a leaderboard compares)."""
    from fedhet.tables.metrics import lookup

    for name in spec.get("metrics") or ["acc"]:
        metric = lookup(name)
        if metric is not None and metric.kind == "run":
            return name
    return None


def comparable_tables(loader: Loader, papers: Iterable[str]) -> list[Join]:
    """Every (table, kind) the paper configs of `papers` declare comparable, checked."""
    from fedhet.tables.metrics import lookup

    joins = []
    for paper in papers:
        file = str(loader.paper_file(paper))
        for table, spec in (loader.paper(paper).get("tables") or {}).items():
            for kind, decl in (spec.get("challengers") or {}).items():
                where = f"tables.{table}.challengers.{kind}"
                if kind not in KINDS:
                    raise ExperimentError(file, where, f"unknown kind; valid: {', '.join(KINDS)}"
                                          " (post-hoc methods are no challengers)")
                axes = {a for g in spec.get("grids") or [] for a in (g.get("axes") or {})}
                if decl["axis"] not in axes:
                    raise ExperimentError(file, f"{where}.axis",
                                          f"'{decl['axis']}' is an axis of no grid of this "
                                          f"table; valid: {', '.join(sorted(axes))}")
                metric = decl.get("metric") or _default_metric(spec)
                known = lookup(metric) if metric else None
                if not scored_per_seed(known):
                    raise ExperimentError(file, f"{where}.metric",
                                          f"{metric!r} is no metric scored seed by seed; name "
                                          "one read from each seed's run (acc, last_acc, "
                                          "top5_acc, domain_acc) or rounds (to the table's "
                                          "target)")
                joins.append(Join(paper, table, kind, decl["axis"], plain_copy(decl.get("set")
                                                                              or {}), metric))
    return joins


def _installed(kind: str | None = None) -> str:
    found = [f"{m.name} ({m.kind})" for m in catalog.methods(kind) if m.kind in KINDS
             and m.implemented]
    return ", ".join(found)


def _check_set(settings: Mapping[str, Any], where: str) -> None:
    """Every method a challenger's settings name is installed, of the right kind and
    implemented, and its parameters are in their declared ranges."""
    other = sorted(set(settings) - {"algorithm", "plugins"})
    if other:
        raise ExperimentError(WHERE, f"{where}.{other[0]}", "a challenger sets its methods only "
                              "(algorithm, plugins); the table's protocol sets the rest")
    methods = []
    if settings.get("algorithm") is not None:
        methods.append(("algorithm", settings["algorithm"], f"{where}.algorithm"))
    for j, plugin in enumerate(settings.get("plugins") or []):
        methods.append(("plugin", plugin, f"{where}.plugins[{j}]"))
    for kind, entry, at in methods:
        name = entry.get("name")
        names = catalog.names(kind, implemented=True)
        if name not in names:
            raise ExperimentError(WHERE, f"{at}.name", f"unknown {kind} '{name}'; installed "
                                  f"{kind}s: {', '.join(names)}{catalog.refusal_note()}")
        try:
            resolve_params(catalog.method(name).params, entry.get("params"), f"{at}.params.")
        except ConfigError as err:
            raise ExperimentError(WHERE, f"{at}.params", str(err)) from None


def _own_set(name: str, kind: str, given: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """A challenger's settings: `given`, or the method alone with its defaults; they must run
    the method the challenger names."""
    if not given:
        return {"algorithm": {"name": name}} if kind == "algorithm" else {"plugins": [{"name": name}]}
    runs_it = ((given.get("algorithm") or {}).get("name") == name if kind == "algorithm"
               else any(p.get("name") == name for p in given.get("plugins") or []))
    if not runs_it:
        shape = ("set: {algorithm: {name: %s, params: {...}}}" if kind == "algorithm"
                 else "set: {plugins: [{name: %s, params: {...}}]}") % name
        raise ExperimentError(WHERE, f"{where}.set", f"does not run {kind} '{name}' that the "
                              f"challenger names; write {shape}")
    return plain_copy(dict(given))


def parse_challengers(raw: Any, joins: list[Join]) -> list[Challenger]:
    """The workflow config's `challengers`, checked before any job starts: each names an
    installed algorithm or plug-in that some comparable table (`joins`) accepts, with
    parameters in their declared ranges."""
    if not raw:
        return []
    if not isinstance(raw, list):
        raise ExperimentError(WHERE, "challengers", "must be a list of {name, label, set}")
    out: list[Challenger] = []
    for i, entry in enumerate(raw):
        where = f"challengers[{i}]"
        if not isinstance(entry, Mapping) or not entry.get("name"):
            raise ExperimentError(WHERE, where, "must be a mapping with a `name`")
        name = str(entry["name"])
        if name in {c.name for c in out}:
            raise ExperimentError(WHERE, f"{where}.name", f"'{name}' is a challenger twice")
        try:
            decl = catalog.method(name)
        except KeyError:
            raise ExperimentError(WHERE, f"{where}.name", f"unknown method '{name}'; installed "
                                  f"methods: {_installed()}{catalog.refusal_note()} "
                                  "(`fedhet methods` lists them with their packages)") from None
        if decl.kind not in KINDS:
            raise ExperimentError(WHERE, f"{where}.name", f"'{name}' is a {decl.kind} step; "
                                  "post-hoc methods are out of the leaderboard's scope: a "
                                  "challenger is an algorithm or a plug-in")
        if not decl.implemented:
            raise ExperimentError(WHERE, f"{where}.name",
                                  f"{decl.kind} '{name}' is declared but not implemented")
        if not any(j.kind == decl.kind for j in joins):
            accepted = sorted({j.kind for j in joins})
            raise ExperimentError(WHERE, f"{where}.name", f"'{name}' is a {decl.kind}; no "
                                  "comparable table of the configured papers accepts one "
                                  f"(they accept: {', '.join(accepted) or 'nothing'})")
        own = _own_set(name, decl.kind, entry.get("set"), where)
        _check_set(own, f"{where}.set")
        per_paper = {}
        for paper, over in (entry.get("per_paper") or {}).items():
            if paper not in PAPERS:
                raise ExperimentError(WHERE, f"{where}.per_paper.{paper}",
                                      f"unknown paper; valid: {', '.join(PAPERS)}")
            per_paper[paper] = plain_copy((over or {}).get("set") or {})
            _check_set(merge_settings(own, per_paper[paper]), f"{where}.per_paper.{paper}.set")
        label = str(entry.get("label") or name)
        out.append(Challenger(name, label, decl.kind, own, per_paper))
    return out


def _restriction(scale: Mapping[str, Any], join: Join, name: str) -> dict[str, list[str]]:
    """The axis values a comparable table keeps in the leaderboard at this scale: its
    `restrict`, cut further by `leaderboard.restrict`; the challenger's value always stays."""
    keep = {a: [str(v) for v in vs]
            for a, vs in ((scale.get("restrict") or {}).get(join.target) or {}).items()}
    more = ((scale.get("leaderboard") or {}).get("restrict") or {}).get(join.target) or {}
    for axis, values in more.items():
        wanted = [str(v) for v in values]
        keep[axis] = [v for v in keep[axis] if v in wanted] if axis in keep else wanted
    if join.axis in keep:
        keep[join.axis] = [*keep[join.axis], name]
    return keep


def _joined_spec(spec: Mapping[str, Any], join: Join, challenger: Challenger,
                 file: str) -> dict[str, Any]:
    """The table's spec with the challenger's value appended to the join axis of every grid
    that has it, and a note saying so."""
    grids = []
    for grid in spec.get("grids") or []:
        axes = dict(grid.get("axes") or {})
        if join.axis in axes:
            values = axes[join.axis]
            axes[join.axis] = [*([values] if isinstance(values, str) else values), challenger.name]
        grids.append({**grid, "axes": axes})
    origin = catalog.package(challenger.name)
    source = "fedhet" if origin is None else origin.label
    note = (f"Challenger {challenger.label} ({challenger.kind} {challenger.name}, {source}) "
            f"joins the {join.axis} axis, under the table's protocol, scale and seeds.")
    return {**spec, "grids": grids, "note": " ".join(filter(None, [spec.get("note"), note]))}


def expand_leaderboard(
    loader: Loader,
    papers: Iterable[str],
    raw: Any,
    scale: dict[str, Any],
    seeds: list[int],
    runs: dict[str, dict[str, Any]],
    skip_plugins: Iterable[str] = (),
    calibrations: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Board]:
    """Each challenger of `raw` (the workflow config's `challengers`) → its board: every
    comparable table of `papers` that accepts its kind, with it added. New runs are added to
    `runs` (and calibrations to `calibrations`); the baselines' are already there."""
    # a scale's cut may name any paper's comparable table, selected in this run or not
    declared = comparable_tables(loader, PAPERS)
    joins = [j for paper in papers for j in declared if j.paper == paper]
    targets = {j.target for j in declared}
    for target in ((scale.get("leaderboard") or {}).get("restrict") or {}):
        if target not in targets:
            raise ExperimentError("config/scales", f"leaderboard.restrict.{target}",
                                  f"not a comparable table; valid: {', '.join(sorted(targets))}")
    boards: dict[str, Board] = {}
    for challenger in parse_challengers(raw, joins):
        items: dict[str, Item] = {}
        used: dict[str, Join] = {}
        for join in joins:
            if join.kind != challenger.kind:
                continue
            file = str(loader.paper_file(join.paper))
            spec = _joined_spec(loader.paper(join.paper)["tables"][join.table], join,
                                challenger, file)
            value = {"label": challenger.label,
                     "set": merge_settings(join.set, challenger.settings_for(join.paper))}
            keep = _restriction(scale, join, challenger.name)
            joined_scale = {**scale, "restrict": {**(scale.get("restrict") or {}),
                                                  join.target: keep}} if keep else scale
            items[join.target] = expand_item(
                loader, join.paper, join.table, spec, False, joined_scale, seeds, runs,
                skip_plugins, calibrations, vocabulary={join.axis: {challenger.name: value}},
            )
            used[join.target] = join
        boards[challenger.name] = Board(challenger, items, used)
    return boards
