"""The leaderboard in the workflow: it builds its tables and ranking with the fake `fedhet` of
tests/fake_fedhet.py, reusing the papers' runs; a bad challenger stops the DAG before any job; a
sweep costs its entries' runs and nothing more; and one of its cells trains for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from leaderboard_helpers import ROOT, TOY_PLUGIN, experiment, toy_site, weight
from test_workflow import fake_workflow, job_counts, snakemake

from fedhet import catalog
from fedhet import experiments as X


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The toy method package installed in a site folder on sys.path."""
    yield from toy_site(tmp_path, monkeypatch)


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
