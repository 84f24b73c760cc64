"""The leaderboard: a method of another package (the toy package of tests/data/toy_methods,
installed here through an entry point) named as a challenger joins every comparable table the
paper configs declare, on the declared axis, under the table's protocol, scale and seeds; its
baseline cells are the papers' own runs (no recorded run id changes, nothing retrains), bad
challengers stop the DAG before any job, and the workflow builds its tables and ranking (with
the fake `fedhet` of tests/fake_fedhet.py) and trains one of its cells for real."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_external_methods import TOY, Site, _forget, registered, unregister
from test_workflow import fake_workflow, job_counts, snakemake

from fedhet import experiments as X
from fedhet.leaderboard.rows import results_frame, table_rows
from fedhet import catalog
from fedhet.experiments import challengers
from fedhet.experiments.challengers import comparable_tables, parse_challengers
from fedhet.experiments.loading import ExperimentError, Loader
from fedhet.tables.results import RunResult

NAN = float("nan")

ROOT = Path(__file__).resolve().parents[1]
RUN_IDS = ROOT / "tests" / "data" / "run_ids.json"
RECORDED = ["vhl", "ccvr", "fedimpro"]  # the papers tests/data/run_ids.json records
TOY_PLUGIN = {"name": "logitpen", "label": "Toy", "set": {"plugins": [
    {"name": "logitpen", "params": {"weight": 0.05}}]}}

TOY_ALGO = ("from fedhet.declare import Method, Param\n"
            "DECLARATIONS = [Method(name='toyavg', kind='algorithm', summary='FedAvg, renamed',"
            " module='toy_algo.impl', params={'step': Param(1.0, 'server step', above=0)})]\n")
TOY_ALGO_IMPL = ("from fedhet.algorithms.base import ALGORITHMS, Algorithm\n"
                 "ALGORITHMS.add('toyavg', Algorithm)\n")

# the comparable tables and the axis each kind of challenger joins (the papers' main tables)
COMPARABLE = {
    ("vhl", t, "plugin"): "method" for t in ("t1", "t2", "t4", "t5")
} | {("vhl", t, "algorithm"): "algorithm" for t in ("t1", "t2", "t4", "t5")} | {
    ("fedimpro", t, k): "algorithm" for t in ("t1", "t2") for k in ("plugin", "algorithm")
} | {("fedbr", t, k): "method" for t in ("t1", "t3", "t5") for k in ("plugin", "algorithm")} | {
    ("fedbr", "t3", "plugin"): "addon"
} | {("fedlgd", t, k): "method" for t in ("t1", "t2", "t4", "t5")
     for k in ("plugin", "algorithm")} | {
    ("ccvr", "t1", "plugin"): "method", ("ccvr", "t2", "algorithm"): "algorithm"}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The toy method package installed in a site folder on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    made = Site(tmp_path / "site")
    made.install("toy-methods", "0.1", {"logitpen": "fedhet_toy"}, {"fedhet_toy": TOY})
    names = registered()
    yield made
    for name in [m for m in sys.modules if m.split(".")[0] in {
            p.name.removesuffix(".py") for p in made.root.iterdir()}]:
        del sys.modules[name]
    unregister(names)
    monkeypatch.undo()
    _forget()


def experiment(challengers=(), papers=RECORDED, scale="demo", *, origins=None, results=None,
               **over):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg.update(scale=scale, papers=list(papers), challengers=list(challengers), **over)
    given = {k: v for k, v in (("origins", origins), ("results", results)) if v is not None}
    return X.load_experiment(cfg, ROOT, **given)


def weight(w: float, name: str | None = None, label: str | None = None) -> dict:
    """An entry running the toy plug-in with weight `w`."""
    return {"name": name or f"lp-{w:g}", "method": "logitpen", "label": label or f"LP {w:g}",
            "set": {"plugins": [{"name": "logitpen", "params": {"weight": w}}]}}


# ----------------------------------------------------------------------------- declarations


def test_the_papers_main_tables_are_comparable_on_their_method_axes():
    joins = comparable_tables(Loader(ROOT), X.PAPERS)
    assert {(j.paper, j.table, j.kind): j.axis for j in joins} == COMPARABLE
    # every method of FedLGD's tables trains on the cached local virtual data: so does a challenger
    lgd = {j.kind: j.set for j in joins if j.paper == "fedlgd"}
    assert lgd["plugin"]["plugins"] == [{"name": "distilled"}]
    assert lgd["algorithm"] == {"plugins": [{"name": "distilled"}]}
    # FedImpro Table 2 prints rounds to a target: each seed's rounds to it are scored
    assert {(j.table, j.metric) for j in joins if j.paper == "fedimpro"} == {("t1", "acc"),
                                                                             ("t2", "rounds")}


def test_a_paper_table_and_its_runs_are_the_same_with_or_without_a_challenger(site):
    plain = experiment()
    joined = experiment([TOY_PLUGIN])
    assert {t: i.payload() for t, i in plain.items.items()} == \
        {t: i.payload() for t, i in joined.items.items()}
    assert plain.leaderboard == {}
    recorded = json.loads(RUN_IDS.read_text())["demo"]
    board = joined.leaderboard["logitpen"]
    new = set(board.challenger_run_ids())
    # the recorded ids hold with the challenger; what it adds is its own runs, and only those
    assert set(recorded["runs"]) <= set(joined.runs)
    assert set(joined.runs) - set(recorded["runs"]) == new
    assert set(plain.runs) == set(recorded["runs"])
    assert sorted(joined.partitions) == recorded["partitions"]
    for rid in new:
        run = joined.runs[rid]
        assert {"name": "logitpen", "params": {"weight": 0.05}} in run["plugins"]
        # its runs name it (centralized runs are named `central`, whatever their methods)
        assert "+logitpen-" in rid or (run["training"]["centralized"] and "-central-" in rid)
    assert sum("+logitpen-" in rid for rid in new) > len(new) / 2


def test_the_challenger_joins_each_table_on_its_axis_beside_the_papers_runs(site):
    exp = experiment([TOY_PLUGIN])
    board = exp.leaderboard["logitpen"]
    assert set(board.items) == {f"{p}_{t}" for (p, t, k) in COMPARABLE
                                if k == "plugin" and p in RECORDED}
    for target, item in board.items.items():
        axis = board.joins[target].axis
        own = {tuple(sorted(c.labels.items())): c for c in exp.items[target].cells}
        mine = [c for c in item.cells if c.labels.get(axis) == "logitpen"]
        assert mine and all(c.display[axis] == "Toy" and c.reference == {} for c in mine)
        for cell in item.cells:
            if cell.labels.get(axis) != "logitpen":  # a baseline: the paper table's own runs
                assert cell.run_ids == own[tuple(sorted(cell.labels.items()))].run_ids
        # under the same protocol and seeds: a challenger cell differs from its setting's
        # baseline cells by its own method only
        for cell in mine:
            assert len(cell.run_ids) == len(exp.seeds)
            assert cell.settings["seed"] == exp.seeds[0]
    # the demo's restriction of VHL Tables 2/4/5 (one setting) holds for the challenger too
    vhl_t2 = board.items["vhl_t2"]
    assert {c.labels["setting"] for c in vhl_t2.cells} == {"a01-e1-k10"}


def test_an_algorithm_challenger_joins_the_algorithm_axes(site):
    site.install("toy-algo", "0.2", {"toyalgo": "toy_algo"}, {"toy_algo": TOY_ALGO},
                 files={"toy_algo/impl.py": TOY_ALGO_IMPL})
    exp = experiment([{"name": "toyavg", "per_paper": {"ccvr": {"set": {
        "algorithm": {"name": "toyavg", "params": {"step": 0.5}}}}}}])
    board = exp.leaderboard["toyavg"]
    assert set(board.items) == {"vhl_t1", "vhl_t2", "vhl_t4", "vhl_t5", "fedimpro_t1",
                                "fedimpro_t2", "ccvr_t2"}
    ccvr = [c for c in board.items["ccvr_t2"].cells if c.labels["algorithm"] == "toyavg"]
    # calibrated before and after, as the table's other algorithms
    assert {c.labels["calibration"] for c in ccvr} == {"none", "ccvr", "oracle"}
    assert all(c.calibrations for c in ccvr if c.labels["calibration"] != "none")
    params = {exp.runs[c.run_ids[0]]["algorithm"]["params"]["step"] for c in ccvr}
    assert params == {0.5}  # its per-paper parameters
    vhl = [c for c in board.items["vhl_t1"].cells if c.labels.get("algorithm") == "toyavg"]
    assert {exp.runs[c.run_ids[0]]["algorithm"]["params"]["step"] for c in vhl} == {1.0}


def test_an_edited_challenger_gets_new_run_ids_and_its_baselines_keep_theirs(site):
    before = experiment([TOY_PLUGIN])
    plugin = site.root / "fedhet_toy" / "plugin.py"
    plugin.write_text(plugin.read_text().replace("pow(2)", "abs()"))
    _forget()
    after = experiment([TOY_PLUGIN])
    old = set(before.leaderboard["logitpen"].challenger_run_ids())
    new = set(after.leaderboard["logitpen"].challenger_run_ids())
    assert len(old) == len(new) and not old & new
    assert set(before.runs) - old == set(after.runs) - new


@pytest.mark.parametrize(("challenger", "message"), [
    ({"name": "mine"}, r"challengers\[0\]\.name': unknown method 'mine'; installed methods: .*"
                       r"fedavg \(algorithm\).*logitpen \(plugin\)"),
    ({"name": "ccvr"}, r"'ccvr' is a posthoc step; post-hoc methods are out of the "
                       r"leaderboard's scope"),
    ({"name": "logitpen", "set": {"plugins": [{"name": "logitpen", "params": {"weight": -1}}]}},
     r"challengers\[0\]\.set\.plugins\[0\]\.params.*is -1; allowed: a number >= 0"),
    ({"name": "logitpen", "per_paper": {"vhl": {"set": {"plugins": [
        {"name": "logitpen", "params": {"wieght": 1}}]}}}},
     r"per_paper\.vhl\.set\.plugins\[0\]\.params.*unknown setting.*wieght.*valid keys here: "
     r"weight"),
    ({"name": "logitpen", "set": {"plugins": [{"name": "logitpen"}], "training": {"lr": 1}}},
     r"challengers\[0\]\.set\.training': a challenger sets its methods only"),
    ({"name": "logitpen", "set": {"algorithm": {"name": "fedprox"}}},
     r"does not run plugin 'logitpen' that the challenger names"),
    ({"name": "logitpen", "set": {"plugins": [{"name": "logitpen"}, {"name": "vhll"}]}},
     r"unknown plugin 'vhll'; installed plugins: .*vhl"),
])
def test_a_bad_challenger_is_refused_with_the_fix(site, challenger, message):
    with pytest.raises(ExperimentError, match=message):
        experiment([challenger])


def test_a_kind_no_comparable_table_accepts_is_refused(site):
    joins = [j for j in comparable_tables(Loader(ROOT), ["ccvr"]) if j.kind == "algorithm"]
    with pytest.raises(ExperimentError, match="'logitpen' is a plugin; no comparable table of "
                                              r"the configured papers accepts one \(they accept: "
                                              "algorithm\\)"):
        parse_challengers([{"name": "logitpen"}], joins)


# ----------------------------------------------------------------------------- entries


def test_a_sweep_of_one_method_and_another_method_sit_side_by_side(site):
    """Named entries: three settings of one method and another method, in one leaderboard,
    each with its own cells, label and runs; a sweep of k settings costs k challengers' runs
    and nothing more (the same settings under two names share theirs)."""
    site.install("toy-algo", "0.2", {"toyalgo": "toy_algo"}, {"toy_algo": TOY_ALGO},
                 files={"toy_algo/impl.py": TOY_ALGO_IMPL})
    plain = experiment()
    one = experiment([weight(0.01)])
    sweep = [weight(0.01), weight(0.05), weight(0.1)]
    exp = experiment([*sweep, {"name": "toyavg"}])
    assert sorted(exp.leaderboard) == ["lp-0.01", "lp-0.05", "lp-0.1", "toyavg"]
    single = set(one.leaderboard["lp-0.01"].challenger_run_ids())
    own = {name: set(board.challenger_run_ids()) for name, board in exp.leaderboard.items()}
    for entry in sweep:
        board = exp.leaderboard[entry["name"]]
        assert board.challenger.method == "logitpen" and board.challenger.label == entry["label"]
        assert len(own[entry["name"]]) == len(single)
        for target, item in board.items.items():
            axis = board.joins[target].axis
            mine = [c for c in item.cells if c.labels.get(axis) == entry["name"]]
            assert mine and all(c.display[axis] == entry["label"] for c in mine)
            # no other entry's cells in its tables: each has its own rows
            assert not {c.labels.get(axis) for c in item.cells} & (set(own) - {entry["name"]})
            for cell in mine:
                w = entry["set"]["plugins"][0]["params"]["weight"]
                assert all({"name": "logitpen", "params": {"weight": w}} in
                           exp.runs[r]["plugins"] for r in cell.run_ids)
    assert own["lp-0.01"] == single
    assert not own["lp-0.01"] & own["lp-0.05"] and not own["lp-0.05"] & own["lp-0.1"]
    # the sweep's cost: its three entries' runs, nothing more (and the papers' runs unchanged)
    added = set(exp.runs) - set(plain.runs)
    assert added == set().union(*own.values())
    assert len(set().union(*(own[e["name"]] for e in sweep))) == 3 * len(single)
    # one setting under two names: two entries, one set of runs
    twice = experiment([weight(0.01), weight(0.01, name="again", label="Again")])
    assert set(twice.runs) - set(plain.runs) == single
    assert set(twice.leaderboard["again"].challenger_run_ids()) == single


def test_each_joined_table_says_what_its_challenger_is(site):
    exp = experiment([weight(0.01), weight(0.05)], papers=["ccvr", "fedbr"])
    source = catalog.package("logitpen").source.digest
    for name, w in (("lp-0.01", 0.01), ("lp-0.05", 0.05)):
        for item in exp.leaderboard[name].items.values():
            assert (f"Entry {name}: plug-in logitpen of toy-methods 0.1 (code sha256 {source}), "
                    f"settings: plug-in logitpen(weight={w:g}).") in item.payload()["spec"]["note"]
    # per-paper settings are the ones stated in that paper's tables
    exp = experiment([{**weight(0.01), "per_paper": {"fedbr": {"set": {"plugins": [
        {"name": "logitpen", "params": {"weight": 0.5}}]}}}}], papers=["ccvr", "fedbr"])
    board = exp.leaderboard["lp-0.01"]
    assert "logitpen(weight=0.5)" in board.items["fedbr_t1"].spec["note"]
    assert "logitpen(weight=0.01)" in board.items["ccvr_t1"].spec["note"]
    entry = challengers.manifest(board, "demo", exp.seeds)
    assert entry["package"] == "toy-methods" and entry["version"] == "0.1"
    assert entry["source"] == source and entry["settings"] == "plug-in logitpen(weight=0.01)"
    assert entry["settings_per_paper"] == {"fedbr": "plug-in logitpen(weight=0.5)"}


@pytest.mark.parametrize(("challengers_", "message"), [
    ([weight(0.01), weight(0.05, name="lp-0.01")],
     r"^mine\.yaml: 'challengers\[1\]\.name': 'lp-0\.01' names challengers\[0\] too"),
    ([weight(0.01), weight(0.05, label="LP 0.01")],
     r"^mine\.yaml: 'challengers\[1\]\.label': 'LP 0\.01' labels challengers\[0\] too"),
    ([{"name": "bad/name"}], r"^mine\.yaml: 'challengers\[0\]\.name': 'bad/name' is no entry name"),
    ([{"name": "x", "method": "mine"}],
     r"^mine\.yaml: 'challengers\[0\]\.method': unknown method 'mine'"),
    # a method of fedhet under a name the table has: the user's file is blamed, not the paper's
    ([{"name": "fedprox"}], r"^mine\.yaml: 'challengers\[0\]\.name': 'fedprox' is already a "
                            r"method of vhl table t1 \(a value of its algorithm axis\).*name it "
                            r"otherwise \(e\.g\. fedprox-2\) and set `method: fedprox`"),
])
def test_errors_name_the_file_the_entry_came_from(site, challengers_, message):
    with pytest.raises(ExperimentError, match=message):
        experiment(challengers_, origins={"challengers": "mine.yaml"})


def test_a_method_of_fedhet_under_settings_of_its_own_is_an_entry(site):
    exp = experiment([{"name": "fedprox-mu1", "method": "fedprox", "set": {
        "algorithm": {"name": "fedprox", "params": {"mu": 1.0}}}}])
    board = exp.leaderboard["fedprox-mu1"]
    cells = [c for c in board.items["vhl_t1"].cells if c.labels.get("algorithm") == "fedprox-mu1"]
    assert cells and all(exp.runs[r]["algorithm"] == {"name": "fedprox", "params": {"mu": 1.0}}
                         for c in cells for r in c.run_ids)
    assert "algorithm fedprox of fedhet" in board.items["vhl_t1"].spec["note"]


def test_the_example_sweep_is_three_entries_of_fedprox():
    raw = yaml.safe_load((ROOT / "examples" / "leaderboard.yaml").read_text())["challengers"]
    exp = experiment(raw)
    mus = {}
    for name, board in exp.leaderboard.items():
        runs = [exp.runs[r] for r in board.challenger_run_ids()]
        assert runs and {r["algorithm"]["name"] for r in runs} == {"fedprox"}
        mus[name] = {r["algorithm"]["params"]["mu"] for r in runs}
    assert mus == {"fedprox-mu0.001": {0.001}, "fedprox-mu0.1": {0.1}, "fedprox-mu1": {1.0}}


def test_an_implementation_that_cannot_be_imported_is_refused_with_its_cause(site):
    plugin = site.root / "fedhet_toy" / "plugin.py"
    plugin.write_text(plugin.read_text() + "\nimport lpmath_missing\n")
    _forget()
    with pytest.raises(ExperimentError, match=r"^mine\.yaml: 'challengers\[0\]\.method': plugin "
                       r"'logitpen' of toy-methods 0\.1: cannot import its module "
                       r"fedhet_toy\.plugin: ModuleNotFoundError: No module named "
                       r"'lpmath_missing'"):
        experiment([weight(0.01)], origins={"challengers": "mine.yaml"})


def _built(results: Path, exp, name: str) -> Path:
    """The leaderboard of entry `name` as the workflow leaves it in `results`: its manifest,
    and its challenger runs built."""
    board = exp.leaderboard[name]
    folder = results / "leaderboard" / name
    folder.mkdir(parents=True)
    (folder / "entry.json").write_text(json.dumps(challengers.manifest(board, "demo", exp.seeds)))
    for rid in board.challenger_run_ids():
        (results / "runs" / rid).mkdir(parents=True, exist_ok=True)
        (results / "runs" / rid / "final.json").write_text("{}")
    return folder


def test_another_config_cannot_take_a_built_entrys_folder(site, tmp_path):
    results = tmp_path / "results" / "demo"
    folder = _built(results, experiment([weight(0.01, name="lp")]), "lp")
    # the same entry again (an edited label too) rebuilds in place
    again = experiment([weight(0.01, name="lp", label="LP")], results=results)
    assert again.leaderboard["lp"].stored == ""
    with pytest.raises(ExperimentError, match=(
            r"^other\.yaml: 'challengers\[0\]\.name': 'lp' names the leaderboard in "
            rf"{re.escape(str(folder))}/, built for logitpen, settings: plug-in "
            r"logitpen\(weight=0\.01\); this entry is logitpen, settings: plug-in "
            r"logitpen\(weight=0\.05\)\. Give it a name of its own")):
        experiment([weight(0.05, name="lp")], results=results,
                   origins={"challengers": "other.yaml"})
    # under a name of its own, both leaderboards are entries
    both = experiment([weight(0.05, name="lp5")], results=results)
    assert sorted(both.leaderboard) == ["lp", "lp5"]
    assert both.leaderboard["lp"].stored == str(folder)


def test_leaderboards_on_disk_stay_entries_while_they_are_what_they_were_built_from(site,
                                                                                   tmp_path):
    results = tmp_path / "results" / "demo"
    built = experiment([weight(0.01), weight(0.05)], papers=["ccvr", "fedbr"])
    for name in built.leaderboard:
        _built(results, built, name)
    later = experiment(papers=["ccvr", "fedbr"], results=results)  # a plain run: no challengers
    assert sorted(later.leaderboard) == ["lp-0.01", "lp-0.05"]
    assert later.leaderboard_left_out == {}
    for name, board in later.leaderboard.items():
        assert board.challenger_run_ids() == built.leaderboard[name].challenger_run_ids()
        assert set(board.run_ids()) <= set(later.runs)
    # another run's papers: left out, saying why
    other = experiment(papers=["ccvr"], results=results)
    assert other.leaderboard == {}
    assert other.leaderboard_left_out["lp-0.01"].startswith(
        "it was built for tables ccvr_t1, fedbr_t1, fedbr_t3, fedbr_t5; this run's papers give "
        "ccvr_t1")
    # a run deleted since
    gone = sorted(built.leaderboard["lp-0.05"].challenger_run_ids())[0]
    shutil.rmtree(results / "runs" / gone)
    later = experiment(papers=["ccvr", "fedbr"], results=results)
    assert sorted(later.leaderboard) == ["lp-0.01"]
    assert later.leaderboard_left_out["lp-0.05"] == (f"1 of its runs are no longer on disk "
                                                     f"(e.g. {gone})")
    # the method's code edited: its runs would be new ones
    plugin = site.root / "fedhet_toy" / "plugin.py"
    plugin.write_text(plugin.read_text().replace("pow(2)", "abs()"))
    _forget()
    later = experiment(papers=["ccvr", "fedbr"], results=results)
    assert later.leaderboard == {}
    assert "the code of logitpen changed since it was built" in \
        later.leaderboard_left_out["lp-0.01"]


# ----------------------------------------------------------------------------- ranking input


def _result(acc: float, status: str = "completed") -> RunResult:
    return RunResult(status=status, best_acc=acc, last_acc=acc - 1, top5_acc=acc - 2)


def test_each_seed_of_each_joined_cell_is_one_row():
    grids = [{"axes": {"data": ["a", "b"], "method": ["base", "mine"]}},
             {"axes": {"data": ["a"], "calibration": ["oracle"]}}]  # no method axis: left out

    def cell(grid, data, method, rids, calibrations=()):
        return {"grid": grid, "labels": {"data": data, "method": method, "calibration": "none"},
                "display": {"data": data.upper(), "method": method.title()}, "run_ids": rids,
                "calibrations": list(calibrations), "pending": None, "metrics": ["last_acc"],
                "reference": {"last_acc": [70.0, 1.0]} if method == "base" else {},
                "values": {}, "chance_acc": 10.0}

    payload = {"paper": "ccvr", "id": "t1", "spec": {"grids": grids}, "cells": [
        cell(0, "a", "base", ["r1", "r2"]), cell(0, "a", "mine", ["m1", "m2"]),
        cell(0, "b", "base", ["r3", "r4"]), cell(0, "b", "mine", ["m3", "m4"]),
        cell(1, "a", "base", ["r1", "r2"], ["r1/oracle", "r2/oracle"])]}
    results = {f"{p}{i}": _result(50.0 + i) for p in "rm" for i in range(1, 5)}
    results["m4"] = _result(float("nan"), "diverged")
    costs = {rid: {"train_flops": 1e12, "bytes_per_round": 4e6, "seconds": 3.0} for rid in results}
    entry = {"payload": payload, "axis": "method", "metric": "last_acc", "seeds": [0, 1]}
    rows = pd.DataFrame(table_rows(entry, results, costs, "demo"))
    assert len(rows) == 8
    assert set(rows["setting"]) == {"calibration=none; data=a", "calibration=none; data=b"}
    first = rows.iloc[0]
    assert (first["method"], first["label"], first["seed"], first["value"]) == ("base", "Base",
                                                                                 0, 50.0)
    assert first["paper_value"] == 70.0 and first["chance"] == 10.0
    assert first["train_flops"] == 1e12
    mine = rows[rows["method"] == "mine"]
    assert list(mine["value"].iloc[:3]) == [50.0, 51.0, 52.0]  # last_acc of m1..m3
    assert mine["paper_value"].isna().all()
    assert list(mine["status"]) == ["completed"] * 3 + ["diverged"]
    frame = results_frame([entry], results, costs, "demo")
    assert list(frame.columns[:6]) == ["paper", "table", "setting", "method", "label", "seed"]


def test_a_rounds_table_is_scored_on_each_seeds_rounds_to_the_tables_target():
    grids = [{"axes": {"data": ["a"], "algorithm": ["fedavg", "mine"]}}]

    def cell(algorithm, rids):
        return {"grid": 0, "labels": {"data": "a", "algorithm": algorithm},
                "display": {"data": "A", "algorithm": algorithm}, "run_ids": rids,
                "calibrations": [], "pending": None, "metrics": ["rounds"],
                "reference": {"rounds": 80} if algorithm == "fedavg" else {},
                "values": {}, "chance_acc": 10.0}

    spec = {"grids": grids, "target": {"group_by": ["data"], "cell": {"algorithm": "fedavg"},
                                       "paper": {"a": 70.0}}}
    payload = {"paper": "fedimpro", "id": "t2", "kind": "rounds_to_target", "spec": spec,
               "cells": [cell("fedavg", ["f0", "f1"]), cell("mine", ["m0", "m1"])]}

    def run(curve, status="completed"):
        return RunResult(status=status, best_acc=max(a for _, a in curve), last_acc=curve[-1][1],
                         top5_acc=NAN, curve=curve)

    # FedAvg's best accuracies 61.5 and 60.9: our target 61 % (their mean, floored)
    results = {"f0": run([(1, 40.0), (2, 61.5), (3, 60.0)]),
               "f1": run([(1, 50.0), (2, 55.0), (3, 60.9)]),
               "m0": run([(1, 61.0), (2, 62.0), (3, 63.0)]),  # at the target in round 1
               "m1": run([(1, 30.0), (2, 40.0), (3, 50.0)])}  # never
    costs = {rid: {"train_flops": 1e12, "bytes_per_round": 4e6, "seconds": 3.0} for rid in results}
    entry = {"payload": payload, "axis": "algorithm", "metric": "rounds", "seeds": [0, 1]}
    rows = pd.DataFrame(table_rows(entry, results, costs, "demo")).set_index(["method", "seed"])
    assert rows["value"].to_dict() == pytest.approx(
        {("fedavg", 0): 2.0, ("fedavg", 1): NAN, ("mine", 0): 1.0, ("mine", 1): NAN},
        nan_ok=True)
    assert list(rows["status"]) == ["completed", "never reached", "completed", "never reached"]
    assert rows["lower_is_better"].all() and (rows["metric"] == "rounds").all()
    assert rows.loc[("fedavg", 0), "paper_value"] == 80.0
    # at paper scale the paper's printed target (70 %): nobody reaches it
    paper = pd.DataFrame(table_rows(entry, results, costs, "paper"))
    assert paper["value"].isna().all() and (paper["status"] == "never reached").all()


# ----------------------------------------------------------------------------- the workflow


def _env_with_site(env: dict[str, str], site: Path) -> dict[str, str]:
    """The jobs of a workflow run see the toy package as installed."""
    paths = [str(site), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.mark.workflow
def test_the_leaderboard_builds_with_the_fake_and_reuses_the_papers_runs(site, tmp_path):
    pytest.importorskip("fedhet.leaderboard.ranking")  # the ranking (its own tests)
    work = tmp_path / "wf"
    work.mkdir()
    env = _env_with_site(fake_workflow(work), site.root)
    papers = "papers=[ccvr,fedbr]"
    mine = work / "mine.yaml"
    # the leaderboard alone, without the report (which needs every paper's results)
    mine.write_text(yaml.safe_dump({"challengers": [TOY_PLUGIN], "report_after_run": False}))
    # the papers' own tables first, without the challenger
    snakemake(work, "--cores", "2", "ccvr_t1", "fedbr_t1", "--config", papers, env=env)
    trained = {line for line in (work / "calls.log").read_text().splitlines()
               if line.startswith("train ")}
    cfg = {**yaml.safe_load((ROOT / "config" / "config.yaml").read_text()),
           "papers": ["ccvr", "fedbr"], "challengers": [TOY_PLUGIN]}
    exp = X.load_experiment(cfg, work)
    board = exp.leaderboard["logitpen"]
    new = set(board.challenger_run_ids())
    plan = (f"leaderboard of Toy (logitpen): 4 comparable tables; {len(new)} new runs to train "
            f"(0 of its {len(new)} already built): ")
    # a dry run shows the plan too: where a user decides whether to spend the compute
    dry = snakemake(work, "leaderboard", "--configfile", str(mine), "-n", "--config", papers,
                    env=env)
    out = dry.stdout + dry.stderr
    assert plan in out and "GPU-hours" in out
    source = catalog.package("logitpen").source.digest
    about = (f"Entry logitpen: plug-in logitpen of toy-methods 0.1 (code sha256 {source}), "
             "settings: plug-in logitpen(weight=0.05).")
    assert about in out
    missing = [r for r in board.run_ids() if r not in new
               and not (work / "results" / "demo" / "runs" / r / "final.json").exists()]
    assert f"and {len(missing)} runs of the papers' own tables not built yet" in out
    assert job_counts(out)["train"] == len(new) + len(missing)
    proc = snakemake(work, "leaderboard", "--configfile", str(mine), "--cores", "2", "--config",
                     papers, env=env)
    out = proc.stdout + proc.stderr
    # said before anything trains: the new runs, their training work and GPU-hours
    announced = out.index(plan)
    assert "TFLOP of training work (images × FLOPs)" in out
    assert announced < out.index("rule train")
    calls = Counter(line for line in (work / "calls.log").read_text().splitlines()
                    if line.startswith("train "))
    assert all(calls[line] == 1 for line in trained)  # the papers' runs: trained once, before
    assert {line.split()[1] for line in calls} >= new
    base = work / "results" / "demo" / "leaderboard" / "logitpen"
    for target, item in board.items.items():
        table = pd.read_csv(base / item.paper / f"{item.id}.csv")
        assert table["row"].str.contains("Toy").any() or table["column"].str.contains("Toy").any()
        # the paper's own table is not rewritten with the challenger
        own = work / "results" / "demo" / "tables" / item.paper / f"{item.id}.csv"
        assert not own.exists() or "Toy" not in own.read_text()
    cells = pd.read_csv(base / "cells.csv")
    assert set(cells[cells["method"] == "logitpen"]["table"]) == {"t1", "t3", "t5"}
    assert len(cells) == sum(len(c.run_ids) for i in board.items.values() for c in i.cells
                             if board.joins[i.target].axis in
                             i.spec["grids"][c.grid]["axes"] and not c.pending)
    ranking = pd.read_csv(base / "leaderboard.csv")
    assert set(zip(ranking["paper"], ranking["table"])) == {("ccvr", "t1"), ("fedbr", "t1"),
                                                             ("fedbr", "t3"), ("fedbr", "t5")}
    assert (ranking["method"] != "logitpen").all()
    assert "Leaderboard of Toy" in (base / "leaderboard.html").read_text()
    # every row, page and joined table says what the challenger is
    assert (ranking["entry_package"] == "toy-methods").all()
    assert (ranking["entry_version"].astype(str) == "0.1").all()
    assert (ranking["entry_source"] == source).all()
    assert (ranking["entry_settings"] == "plug-in logitpen(weight=0.05)").all()
    assert "plug-in logitpen of toy-methods 0.1" in (base / "leaderboard.md").read_text()
    for item in board.items.values():
        assert about in (base / item.paper / f"{item.id}.md").read_text()
    entry = json.loads((base / "entry.json").read_text())
    assert (entry["method"], entry["source"]) == ("logitpen", source)
    assert entry["challenger_run_ids"] == sorted(new)
    overview = pd.read_csv(work / "results" / "demo" / "leaderboard" / "overview.csv")
    assert list(overview["entry"]) == ["logitpen"] * 4
    # nothing left to do; without the challenger the papers' DAG is as it was
    again = snakemake(work, "leaderboard", "--configfile", str(mine), "-n", "--config", papers,
                      env=env)
    assert job_counts(again.stdout + again.stderr) == {}
    plain = snakemake(work, "ccvr_t1", "fedbr_t1", "-n", "--config", papers, env=env)
    assert job_counts(plain.stdout + plain.stderr) == {}
    # a later plain run keeps the leaderboard on disk among the results its report shows
    summary = snakemake(work, "results", "--summary", "--config", papers, env=env).stdout
    kept = [line.split("\t") for line in summary.splitlines()
            if line.startswith("results/demo/leaderboard/")]
    assert {row[0] for row in kept} >= {f"results/demo/leaderboard/logitpen/leaderboard.html",
                                         "results/demo/leaderboard/overview.html"}
    assert all(row[-1] == "no update" for row in kept), kept


@pytest.mark.workflow
def test_a_bad_challenger_stops_the_workflow_before_any_job(site, tmp_path):
    work = tmp_path / "wf"
    work.mkdir()
    env = _env_with_site(fake_workflow(work), site.root)
    mine = work / "mine.yaml"
    bad = {"name": "logitpen", "set": {"plugins": [{"name": "logitpen", "params": {"weight": -2}}]}}
    mine.write_text(yaml.safe_dump({"challengers": [bad]}))
    proc = snakemake(work, "leaderboard", "--configfile", str(mine), "--cores", "1", env=env,
                     check=False)
    assert proc.returncode != 0
    # blamed on the file it came from, not config/config.yaml
    assert ("mine.yaml: 'challengers[0].set.plugins[0].params': setting "
            "'challengers[0].set.plugins[0].params.weight' is -2; allowed: a number >= 0") in \
        proc.stdout + proc.stderr
    assert not (work / "calls.log").exists()
    # a key the schema does not know: the schema's check names the file too
    mine.write_text(yaml.safe_dump({"challengers": [{"name": "logitpen", "sett": {}}]}))
    proc = snakemake(work, "leaderboard", "--configfile", str(mine), "-n", env=env, check=False)
    assert proc.returncode != 0
    assert "mine.yaml: invalid setting 'challengers.0': Additional properties are not allowed " \
           "('sett' was unexpected)" in proc.stdout + proc.stderr
    # an implementation that cannot be imported: refused with its cause, also under -n
    mine.write_text(yaml.safe_dump({"challengers": [TOY_PLUGIN]}))
    plugin = site.root / "fedhet_toy" / "plugin.py"
    plugin.write_text(plugin.read_text() + "\nraise RuntimeError('half-written')\n")
    for how in (["-n"], ["--cores", "1"]):
        proc = snakemake(work, "leaderboard", "--configfile", str(mine), *how, env=env,
                         check=False)
        assert proc.returncode != 0
        assert ("mine.yaml: 'challengers[0].name': plugin 'logitpen' of toy-methods 0.1: cannot "
                "import its module fedhet_toy.plugin: RuntimeError: half-written") in \
            proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
    assert not (work / "calls.log").exists()
    proc = snakemake(work, "leaderboard", "-n", env=env, check=False)
    assert proc.returncode != 0
    assert "no challenger configured" in proc.stdout + proc.stderr


@pytest.mark.workflow
def test_a_sweep_costs_its_entries_runs_and_nothing_more(site, tmp_path):
    """The DAG of a sweep of three settings of one method (a dry run, nothing built): per entry
    its own tables and ranking, three challengers' runs and no other job more than one
    entry's DAG has; the plan printed under -n says what each entry is and the total."""
    work = tmp_path / "wf"
    work.mkdir()
    env = _env_with_site(fake_workflow(work), site.root)
    papers = "papers=[ccvr,fedbr]"
    cfg = {**yaml.safe_load((ROOT / "config" / "config.yaml").read_text()),
           "papers": ["ccvr", "fedbr"]}

    def dry(entries: list[dict]) -> tuple[dict[str, int], str]:
        mine = work / "mine.yaml"
        mine.write_text(yaml.safe_dump({"challengers": entries, "report_after_run": False}))
        proc = snakemake(work, "leaderboard", "--configfile", str(mine), "-n", "--config",
                         papers, env=env)
        return job_counts(proc.stdout + proc.stderr), proc.stdout + proc.stderr

    one, _ = dry([weight(0.01)])
    sweep = [weight(0.01), weight(0.05), weight(0.1)]
    three, out = dry(sweep)
    exp = X.load_experiment({**cfg, "challengers": sweep}, work)
    single = len(exp.leaderboard["lp-0.01"].challenger_run_ids())
    tables = len(exp.leaderboard["lp-0.01"].items)
    assert three["train"] == one["train"] + 2 * single
    assert three["leaderboard_table"] == 3 * tables and one["leaderboard_table"] == tables
    assert three["leaderboard_ranking"] == 3 and one["leaderboard_ranking"] == 1
    assert three["leaderboard_overview"] == one["leaderboard_overview"] == 1
    changed = {"train", "leaderboard_table", "leaderboard_ranking", "total"}
    assert {k: v for k, v in three.items() if k not in changed} == \
        {k: v for k, v in one.items() if k not in changed}
    for entry in sweep:
        w = entry["set"]["plugins"][0]["params"]["weight"]
        assert (f"leaderboard of {entry['label']} ({entry['name']}): {tables} comparable tables; "
                f"{single} new runs to train") in out
        assert f"settings: plug-in logitpen(weight={w:g})." in out
    assert f"all 3 entries: {3 * single} new runs to train, each once: " in out


@pytest.mark.workflow
def test_one_challenger_cell_trains_for_real(site, tmp_path):
    """The cheapest challenger run of the demo leaderboard, trained by the real `fedhet train`
    with the toy package installed: it completes with the id the DAG planned."""
    from fedhet.leaderboard.rows import training_work

    exp = experiment([TOY_PLUGIN], papers=["ccvr", "fedbr"])
    board = exp.leaderboard["logitpen"]
    rid = min(board.challenger_run_ids(), key=lambda r: training_work(exp.runs[r])[0])
    env = _env_with_site(dict(os.environ), site.root)
    done = subprocess.run(
        [sys.executable, "-m", "fedhet.cli", "train", "--config-json",
         json.dumps(exp.runs[rid]), "--out", str(tmp_path / "run"), "--device", "cpu"],
        env={**env, "OMP_NUM_THREADS": "1"}, cwd=tmp_path, capture_output=True, text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    assert final["run_id"] == rid and final["status"] == "completed"
    assert 0.0 <= final["best_acc"] <= 1.0


def test_a_scale_may_cut_the_joined_tables_further(site, tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")
    scale = tmp_path / "config" / "scales" / "demo.yaml"
    data = yaml.safe_load(scale.read_text())
    data["leaderboard"] = {"restrict": {"vhl_t1": {"setting": ["a01-e1-k10"]},
                                        "vhl_t2": {"method": ["vhl"]}}}
    scale.write_text(yaml.safe_dump(data))
    cfg = {"scale": "demo", "papers": ["vhl"], "challengers": [TOY_PLUGIN]}
    exp = X.load_experiment(cfg, tmp_path)
    board = exp.leaderboard["logitpen"]
    t1 = board.items["vhl_t1"]
    assert {c.labels["setting"] for c in t1.cells} == {"a01-e1-k10"}
    assert {c.labels["method"] for c in t1.cells} == {"base", "vhl", "logitpen"}
    # on the joined axis the challenger's value stays, beside what the cut keeps
    assert {c.labels["method"] for c in board.items["vhl_t2"].cells} == {"vhl", "logitpen"}
    assert "At this scale only" in t1.spec["scale_note"]
    assert {c.labels["setting"] for c in exp.items["vhl_t1"].cells} > {"a01-e1-k10"}  # the paper's
    data["leaderboard"] = {"restrict": {"vhl_t8": {"setting": ["a01-e1-k10"]}}}
    scale.write_text(yaml.safe_dump(data))
    with pytest.raises(ExperimentError, match="leaderboard.restrict.vhl_t8': not a comparable "
                                              "table; valid: .*vhl_t1"):
        X.load_experiment(cfg, tmp_path)
