"""Challengers: methods of the user's own (usually from another installed package), or fedhet's
own under other settings, added to every comparable table of the papers, for the leaderboard
(torch-free, but checking a challenger imports its implementation).

A paper config marks a table comparable with `challengers: {<kind>: {axis, set, metric}}`: a
challenger of that kind (algorithm or plug-in) joins the table's `axis` as one more value, with
the declaration's `set` under its own settings (what every method of the paper's protocol runs
with), in every grid that has the axis. The workflow config names the challengers as entries
(`challengers: [{name, method, label, set, per_paper}]`, usually in a file of the user's own
given with `--configfile`): `name` is the entry's own (unique; its value on the axis and its
results' folder), `method` the installed algorithm or plug-in it runs (default: `name`), so
several settings of one method (a sweep) and several methods sit side by side, each with its
own cells, runs and label.

Each comparable table is expanded once more per entry, with the same protocol, scale and
seeds: its baseline cells resolve to the runs the paper's own table already uses (the same run
ids, trained once), its challenger cells to new ones (entries with the same settings share
them). The papers' own items are untouched, so a challenger changes no existing run id and
removing it leaves the DAG as it was. The scale may cut a comparable table further for the
leaderboard (`leaderboard.restrict`, on top of `restrict`).

An entry's leaderboard, once built, records what it is (`manifest`, its folder's `entry.json`):
another config giving the same name to another method or other settings is refused (the folder
is the entry's), and, given the folder of this scale's results, leaderboards on disk that the
config does not name are kept as entries as long as they are what they were built from (their
run ids unchanged and built), so that a later run's report still shows them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fedhet import catalog
from fedhet.config import ConfigError
from fedhet.declare import resolve_params
from fedhet.experiments.cells import Item
from fedhet.experiments.expansion import ExpansionContext, ValueClash, expand_item
from fedhet.experiments.loading import ExperimentError, Loader, merge_settings, plain_copy
from fedhet.names import PAPERS

# where the challengers come from, in errors, when the caller does not say which file
WHERE = "workflow config"
KINDS = ("algorithm", "plugin")
# an entry's name: its folder under results/<scale>/leaderboard/ and its value on the axis
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MANIFEST = "entry.json"


@dataclass(frozen=True)
class Challenger:
    """One entry of the leaderboard: its name, an installed method, its label and the settings
    its cells get."""

    name: str  # the entry's own: unique, its value on the joined axis and its results' folder
    label: str
    kind: str  # "algorithm" | "plugin"
    set: dict[str, Any]
    per_paper: dict[str, dict[str, Any]] = field(default_factory=dict)  # paper → set
    method: str = ""  # the installed method it runs ("" = `name`)
    where: str = WHERE  # the file that names it (errors)
    key: str = "challengers"  # its key in that file, e.g. challengers[2]

    def __post_init__(self) -> None:
        if not self.method:
            object.__setattr__(self, "method", self.name)

    def settings_for(self, paper: str) -> dict[str, Any]:
        """Its settings in one paper's tables: `set`, with that paper's `per_paper` set over it."""
        return merge_settings(self.set, self.per_paper.get(paper) or {})

    def identity(self) -> dict[str, Any]:
        """What the entry is: its method and settings (not its label, nor its code's version:
        an edited method rebuilds its entry in place)."""
        return {"method": self.method, "set": self.set, "per_paper": self.per_paper}


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
    tie_margin: float = 1.0  # of its ranking (`leaderboard.tie_margin`)
    stored: str = ""  # the folder it was kept from (an entry on disk the config does not name)

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


def _check_set(settings: Mapping[str, Any], where: str, file: str = WHERE) -> None:
    """Every method a challenger's settings name is installed, of the right kind and
    implemented, and its parameters are in their declared ranges."""
    other = sorted(set(settings) - {"algorithm", "plugins"})
    if other:
        raise ExperimentError(file, f"{where}.{other[0]}", "a challenger sets its methods only "
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
            raise ExperimentError(file, f"{at}.name", f"unknown {kind} '{name}'; installed "
                                  f"{kind}s: {', '.join(names)}{catalog.refusal_note()}")
        try:
            resolve_params(catalog.method(name).params, entry.get("params"), f"{at}.params.")
        except ConfigError as err:
            raise ExperimentError(file, f"{at}.params", str(err)) from None


def _own_set(name: str, kind: str, given: Mapping[str, Any] | None, where: str,
             file: str) -> dict[str, Any]:
    """A challenger's settings: `given`, or the method alone with its defaults; they must run
    the method the challenger names."""
    if not given:
        return {"algorithm": {"name": name}} if kind == "algorithm" else {"plugins": [{"name": name}]}
    runs_it = ((given.get("algorithm") or {}).get("name") == name if kind == "algorithm"
               else any(p.get("name") == name for p in given.get("plugins") or []))
    if not runs_it:
        shape = ("set: {algorithm: {name: %s, params: {...}}}" if kind == "algorithm"
                 else "set: {plugins: [{name: %s, params: {...}}]}") % name
        raise ExperimentError(file, f"{where}.set", f"does not run {kind} '{name}' that the "
                              f"challenger names; write {shape}")
    return plain_copy(dict(given))


def _methods_of(settings: Mapping[str, Any]) -> list[str]:
    """The training methods a challenger's settings name: its algorithm, then its plug-ins."""
    names = [(settings.get("algorithm") or {}).get("name"),
             *(p.get("name") for p in settings.get("plugins") or [])]
    return [n for n in dict.fromkeys(names) if n]


def _check_imports(settings: Mapping[str, Any], file: str, where: str) -> None:
    """Every method the settings name imports: a broken implementation is refused here, with
    its cause, before any job (it would fail each run of it)."""
    for name in _methods_of(settings):
        try:
            catalog.implementation(name)
        except Exception as err:  # a user's module may fail in any way
            origin = catalog.package(name)
            text = str(err) if origin is not None and isinstance(err, ImportError) else (
                f"{catalog.method(name).kind} '{name}' "
                f"({'fedhet' if origin is None else origin.label}): cannot import its "
                f"implementation {catalog.method(name).module}: {type(err).__name__}: {err}")
            raise ExperimentError(file, where, f"{text}; fix the module (or "
                                  "install the package again) and run again") from None


def parse_challengers(raw: Any, joins: list[Join], where: str = WHERE, *,
                      check_imports: bool = True) -> list[Challenger]:
    """The workflow config's `challengers` (from file `where`), checked before any job starts:
    each entry has a unique name and label and names an installed algorithm or plug-in that
    some comparable table (`joins`) accepts, with parameters in their declared ranges, whose
    implementation imports (unless not `check_imports`)."""
    if not raw:
        return []
    if not isinstance(raw, list):
        raise ExperimentError(where, "challengers", "must be a list of {name, method, label, set}")
    out: list[Challenger] = []
    for i, entry in enumerate(raw):
        key = f"challengers[{i}]"
        if not isinstance(entry, Mapping) or not entry.get("name"):
            raise ExperimentError(where, key, "must be a mapping with a `name`")
        name = str(entry["name"])
        if not NAME.match(name):
            raise ExperimentError(where, f"{key}.name", f"'{name}' is no entry name: give "
                                  "letters, digits, '_', '.' and '-', starting with a letter "
                                  "or digit (it names the entry's results folder)")
        if name in {c.name for c in out}:
            first = next(c.key for c in out if c.name == name)
            raise ExperimentError(where, f"{key}.name", f"'{name}' names {first} too: each entry "
                                  "needs a name of its own (several settings of one method: "
                                  "give each its name and `method: <the method>`)")
        method = str(entry.get("method") or name)
        at = f"{key}.method" if entry.get("method") else f"{key}.name"
        try:
            decl = catalog.method(method)
        except KeyError:
            raise ExperimentError(where, at, f"unknown method '{method}'; installed "
                                  f"methods: {_installed()}{catalog.refusal_note()} "
                                  "(`fedhet methods` lists them with their packages)") from None
        if decl.kind not in KINDS:
            raise ExperimentError(where, at, f"'{method}' is a {decl.kind} step; "
                                  "post-hoc methods are out of the leaderboard's scope: a "
                                  "challenger is an algorithm or a plug-in")
        if not decl.implemented:
            raise ExperimentError(where, at,
                                  f"{decl.kind} '{method}' is declared but not implemented")
        if not any(j.kind == decl.kind for j in joins):
            accepted = sorted({j.kind for j in joins})
            raise ExperimentError(where, at, f"'{method}' is a {decl.kind}; no "
                                  "comparable table of the configured papers accepts one "
                                  f"(they accept: {', '.join(accepted) or 'nothing'})")
        own = _own_set(method, decl.kind, entry.get("set"), key, where)
        _check_set(own, f"{key}.set", where)
        per_paper = {}
        for paper, over in (entry.get("per_paper") or {}).items():
            if paper not in PAPERS:
                raise ExperimentError(where, f"{key}.per_paper.{paper}",
                                      f"unknown paper; valid: {', '.join(PAPERS)}")
            per_paper[paper] = plain_copy((over or {}).get("set") or {})
            _check_set(merge_settings(own, per_paper[paper]), f"{key}.per_paper.{paper}.set",
                       where)
        label = str(entry.get("label") or name)
        if label in {c.label for c in out}:
            first = next(c.key for c in out if c.label == label)
            raise ExperimentError(where, f"{key}.label", f"'{label}' labels {first} too: each "
                                  "entry needs a label of its own (its row in the tables)")
        if check_imports:
            _check_imports(own, where, at)
            for paper, over in per_paper.items():
                _check_imports(merge_settings(own, over), where, f"{key}.per_paper.{paper}.set")
        out.append(Challenger(name, label, decl.kind, own, per_paper, method, where, key))
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


def _params_text(name: str, params: Mapping[str, Any] | None) -> str:
    """`name(k=v, ...)`: a method with its parameters, declared defaults filled in."""
    try:
        full = resolve_params(catalog.method(name).params, params, f"{name}.params.")
    except (ConfigError, KeyError):
        full = dict(params or {})
    inner = ", ".join(f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}"
                      for k, v in sorted(full.items()))
    return f"{name}({inner})" if inner else name


def settings_text(settings: Mapping[str, Any]) -> str:
    """A challenger's settings in words: "algorithm fedprox(mu=0.1); plug-ins
    logitpen(weight=0.05)", every parameter with its value (defaults filled in)."""
    parts = []
    algorithm = settings.get("algorithm")
    if algorithm:
        parts.append(f"algorithm {_params_text(algorithm['name'], algorithm.get('params'))}")
    plugins = settings.get("plugins") or []
    if plugins:
        parts.append(("plug-in " if len(plugins) == 1 else "plug-ins ") + " + ".join(
            _params_text(p["name"], p.get("params")) for p in plugins))
    return "; ".join(parts)


def about(challenger: Challenger, papers: Iterable[str] = ()) -> dict[str, Any]:
    """What the leaderboard says of an entry: its name, label, method and kind, the method's
    package, version and (another package's method) code hash with what it covers, and its
    settings, as given and in words (per paper where `per_paper` sets other ones)."""
    origin = catalog.origin(challenger.method)
    out = {"name": challenger.name, "label": challenger.label, "method": challenger.method,
           **origin, "set": challenger.set, "per_paper": challenger.per_paper,
           "settings": settings_text(challenger.set)}
    out["settings_per_paper"] = {p: settings_text(challenger.settings_for(p))
                                 for p in papers if p in challenger.per_paper}
    return out


def about_text(challenger: Challenger, paper: str | None = None) -> str:
    """One sentence on an entry: "Entry mine-a: plug-in logitpen of toy-methods 0.1 (code
    sha256 1a2b3c4d5e6f7a8b), settings: plug-in logitpen(weight=0.05)." (the settings of
    `paper`'s tables when given)."""
    info = catalog.origin(challenger.method)
    kind = "plug-in" if challenger.kind == "plugin" else challenger.kind
    code = f" (code sha256 {info['source']})" if "source" in info else ""
    settings = challenger.settings_for(paper) if paper else challenger.set
    return (f"Entry {challenger.name}: {kind} {challenger.method} of {info['package']} "
            f"{info['version']}{code}, settings: {settings_text(settings)}.")


def _joined_spec(spec: Mapping[str, Any], join: Join, challenger: Challenger,
                 file: str) -> dict[str, Any]:
    """The table's spec with the challenger's value appended to the join axis of every grid
    that has it, and a note saying so, and what the challenger is: its method, package,
    version, code hash and settings."""
    grids = []
    for grid in spec.get("grids") or []:
        axes = dict(grid.get("axes") or {})
        if join.axis in axes:
            values = axes[join.axis]
            axes[join.axis] = [*([values] if isinstance(values, str) else values), challenger.name]
        grids.append({**grid, "axes": axes})
    note = (f"Challenger {challenger.label} joins the {join.axis} axis, under the table's "
            f"protocol, scale and seeds. {about_text(challenger, join.paper)}")
    return {**spec, "grids": grids, "note": " ".join(filter(None, [spec.get("note"), note]))}


def _expand_board(ctx: ExpansionContext, joins: list[Join], challenger: Challenger,
                  tie_margin: float) -> Board:
    """The board of one entry: every comparable table of `joins` that accepts its kind (its
    runs and calibrations added to `ctx`'s)."""
    loader, scale = ctx.loader, ctx.scale
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
        try:
            items[join.target] = expand_item(
                replace(ctx, scale=joined_scale), join.paper, join.table, spec, False,
                vocabulary={join.axis: {challenger.name: value}},
            )
        except ValueClash as clash:
            raise ExperimentError(
                challenger.where, f"{challenger.key}.name",
                f"'{challenger.name}' is already a method of {join.paper} table {join.table} "
                f"(a value of its {clash.axis} axis): an entry's name must be new to the "
                f"tables it joins; name it otherwise (e.g. {challenger.name}-2) and set "
                f"`method: {challenger.method}`") from None
        used[join.target] = join
    return Board(challenger, items, used, tie_margin)


def manifest(board: Board, scale: str, seeds: Iterable[int]) -> dict[str, Any]:
    """What an entry's leaderboard records of itself (its folder's `entry.json`): the entry
    (`about`), the scale, seeds, tables, tie margin and run ids it was built from."""
    papers = list(dict.fromkeys(j.paper for j in board.joins.values()))
    return {**about(board.challenger, papers), "scale": scale, "seeds": [int(s) for s in seeds],
            "papers": papers, "tables": sorted(board.items), "tie_margin": board.tie_margin,
            "run_ids": sorted(board.run_ids()),
            "challenger_run_ids": sorted(board.challenger_run_ids())}


def entries_on_disk(folder: str | Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """The leaderboards built under `folder` (results/<scale>/leaderboard): entry name → (its
    manifest's path, the manifest); folders without a readable manifest are no entries."""
    out = {}
    for path in sorted(Path(folder).glob(f"*/{MANIFEST}")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("name") == path.parent.name:
            out[path.parent.name] = (path, data)
    return out


def _identity(data: Mapping[str, Any]) -> dict[str, Any]:
    return {"method": data.get("method"), "set": data.get("set") or {},
            "per_paper": data.get("per_paper") or {}}


def _refuse_overwrite(challenger: Challenger, path: Path, data: Mapping[str, Any]) -> None:
    """The entry of a config whose name a leaderboard on disk holds for another method or
    other settings is refused: its folder is that entry's."""
    if json.dumps(_identity(data), sort_keys=True) == json.dumps(challenger.identity(),
                                                                sort_keys=True):
        return
    was = f"{data.get('method')}, settings: {data.get('settings')}"
    if data.get("per_paper"):
        was += f", per paper: {json.dumps(data['per_paper'], sort_keys=True)}"
    now = f"{challenger.method}, settings: {settings_text(challenger.set)}"
    if challenger.per_paper:
        now += f", per paper: {json.dumps(challenger.per_paper, sort_keys=True)}"
    raise ExperimentError(challenger.where, f"{challenger.key}.name",
                          f"'{challenger.name}' names the leaderboard in {path.parent}/, built "
                          f"for {was}; this entry is {now}. Give it a name of its own (its "
                          f"results go to a folder of that name), or delete {path.parent}/ to "
                          "replace that leaderboard")


def _stale(board: Board, data: Mapping[str, Any], results: Path) -> str:
    """Why a leaderboard on disk is not what this config would build for it ('' if it is)."""
    if sorted(board.items) != sorted(data.get("tables") or []):
        return (f"it was built for tables {', '.join(sorted(data.get('tables') or []))}; this "
                f"run's papers give {', '.join(sorted(board.items)) or 'none'}")
    if sorted(board.run_ids()) != sorted(data.get("run_ids") or []):
        now = catalog.origin(board.challenger.method)
        if (now.get("source"), now["version"]) != (data.get("source"), data.get("version")):
            return (f"the code of {board.challenger.method} changed since it was built "
                    f"({data.get('package')} {data.get('version')}, code "
                    f"{data.get('source', '-')}; now {now['package']} {now['version']}, code "
                    f"{now.get('source', '-')}), so its runs are new ones")
        return "its runs are not those this run's settings give (seeds or scale changed)"
    missing = [r for r in board.challenger_run_ids()
               if not (results / "runs" / r / "final.json").is_file()]
    if missing:
        return f"{len(missing)} of its runs are no longer on disk (e.g. {missing[0]})"
    return ""


def expand_leaderboard(
    ctx: ExpansionContext,
    papers: Iterable[str],
    raw: Any,
    *,
    where: str = WHERE,
    tie_margin: float = 1.0,
    results: str | Path | None = None,
    left_out: dict[str, str] | None = None,
) -> dict[str, Board]:
    """Each entry of `raw` (the workflow config's `challengers`, from file `where`) → its
    board: every comparable table of `papers` that accepts its kind, with it added. New runs
    are added to `ctx.runs` (and calibrations to `ctx.calibrations`); the baselines' are
    already there.

    With `results` (this scale's results folder), the leaderboards built there are read: an
    entry whose name one of them holds for another method or other settings is refused, and
    each one the config does not name is kept as an entry (with its recorded tie margin) when
    its method is still installed and imports, its label is free, and it expands to the very
    tables and run ids it was built from, its own runs all built; else it is left out, with
    the reason in `left_out` (entry name → reason)."""
    # a scale's cut may name any paper's comparable table, selected in this run or not
    declared = comparable_tables(ctx.loader, PAPERS)
    joins = [j for paper in papers for j in declared if j.paper == paper]
    targets = {j.target for j in declared}
    for target in ((ctx.scale.get("leaderboard") or {}).get("restrict") or {}):
        if target not in targets:
            raise ExperimentError("config/scales", f"leaderboard.restrict.{target}",
                                  f"not a comparable table; valid: {', '.join(sorted(targets))}")
    stored = entries_on_disk(Path(results) / "leaderboard") if results is not None else {}
    boards: dict[str, Board] = {}
    for challenger in parse_challengers(raw, joins, where):
        if challenger.name in stored:
            _refuse_overwrite(challenger, *stored[challenger.name])
        boards[challenger.name] = _expand_board(ctx, joins, challenger, tie_margin)
    left_out = {} if left_out is None else left_out
    labels = {b.challenger.label: name for name, b in boards.items()}
    for name, (path, data) in stored.items():
        if name in boards:
            continue
        entry = {k: data[k] for k in ("name", "label", "method", "set", "per_paper") if k in data}
        try:
            [challenger] = parse_challengers([entry], joins, str(path))
        except (ExperimentError, ValueError) as err:
            left_out[name] = str(err)
            continue
        if challenger.label in labels:
            left_out[name] = (f"its label '{challenger.label}' is that of entry "
                              f"{labels[challenger.label]} of this run")
            continue
        scratch = replace(ctx, runs=dict(ctx.runs), calibrations=dict(ctx.calibrations))
        margin = float(data.get("tie_margin", tie_margin))
        try:
            board = _expand_board(scratch, joins, challenger, margin)
        except ExperimentError as err:
            left_out[name] = str(err)
            continue
        why = _stale(board, data, Path(results))
        if why:
            left_out[name] = why
            continue
        board.stored = str(path.parent)
        ctx.runs.update(scratch.runs)
        ctx.calibrations.update(scratch.calibrations)
        boards[name] = board
        labels[challenger.label] = name
    return boards
