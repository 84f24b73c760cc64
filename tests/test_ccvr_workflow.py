"""CCVR in the workflow: post-hoc cells (calibrations of trained runs) in Tables 1 and 2, gains,
shared runs and calibrations, and the calibrate rule's place in the DAG."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from fedhet import experiments as X
from fedhet import tables as T
from test_workflow import dry_run_in_a_copy

ROOT = Path(__file__).resolve().parents[1]


def config(**over):
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def demo():
    return X.load_experiment(config(scale="demo"), ROOT, papers=["ccvr"])


@pytest.fixture(scope="module")
def paper():
    return X.load_experiment(config(scale="paper"), ROOT, papers=["ccvr"])


@pytest.fixture(scope="module")
def two_seeds():
    return X.load_experiment(config(scale="demo", seeds=[0, 1]), ROOT, papers=["ccvr"])


def cells_by(item, *axes):
    return {tuple(c.labels[a] for a in axes): c for c in item.cells}


def test_t2_grid_expansion(paper):
    demo = paper  # the whole table (the demo scale leaves the CIFAR-100 column out)
    seeds = len(paper.seeds)
    t2 = demo.items["ccvr_t2"]
    assert len(t2.cells) == 3 * 4 * 5
    cells = cells_by(t2, "calibration", "algorithm", "data")
    for (calibration, algorithm, data), cell in cells.items():
        plain = cells[("none", algorithm, data)]
        # every cell of a column trains the same run: calibration never retrains
        assert cell.run_ids == plain.run_ids and len(cell.run_ids) == seeds
        if calibration == "none":
            assert cell.calibrations == [] and cell.metrics == ["last_acc"]
        else:
            assert cell.metrics == ["last_acc", "gain"]
            assert len(cell.calibrations) == seeds  # one calibration per training run
            for rid, cid in zip(cell.run_ids, cell.calibrations, strict=True):
                assert cid.startswith(f"{rid}/{calibration}-")
                assert demo.calibrations[cid]["run_id"] == rid
                assert demo.calibrations[cid]["settings"]["method"] == calibration
    assert len(t2.run_ids()) == 20 * seeds and len(t2.calibration_ids()) == 40 * seeds
    # M_c per dataset as §5.1 gives it; the oracle ignores it
    ccvr = {d: cells[("ccvr", "fedavg", d)].calibrations[0] for d in ("c10-a05", "c100", "cinic10")}
    per_class = {d: demo.calibrations[c]["settings"]["samples_per_class"] for d, c in ccvr.items()}
    assert per_class == {"c10-a05": 100, "c100": 500, "cinic10": 1000}
    fedavgm = demo.runs[cells[("none", "fedavgm", "c10-a05")].run_ids[0]]
    assert fedavgm["algorithm"] == {
        "name": "fedavgm",
        "params": {"server_momentum": 0.1, "server_lr": 1.0},
    }
    assert demo.runs[cells[("none", "moon", "c10-a05")].run_ids[0]]["algorithm"]["name"] == "moon"


@pytest.mark.parametrize("scale", ["demo", "paper"])
def test_t1_oracle_row_shares_t2_fedavg_runs_and_calibrations(scale, demo, paper):
    demo = {"demo": demo, "paper": paper}[scale]
    t1, t2 = demo.items["ccvr_t1"], demo.items["ccvr_t2"]
    t2_cells = cells_by(t2, "calibration", "algorithm", "data")
    oracle = [c for c in t1.cells if c.labels["calibration"] == "oracle"]
    assert len(oracle) == 3
    for cell in oracle:
        t2_cell = t2_cells[("oracle", "fedavg", cell.labels["data"])]
        assert cell.run_ids == t2_cell.run_ids
        assert cell.calibrations == t2_cell.calibrations
        assert cell.row == "FedAvg + calibration (whole data)"
    base = cells_by(t1, "method", "calibration", "data")
    for data in ("c10-a05", "c10-a01", "c10-a005"):
        assert base[("base", "none", data)].run_ids == t2_cells[("none", "fedavg", data)].run_ids
        plugins = {
            m: [p["name"] for p in demo.runs[base[(m, "none", data)].run_ids[0]]["plugins"]]
            for m in ("base", "clsnorm", "clsprox", "both")
        }
        assert plugins == {
            "base": [],
            "clsnorm": ["clsnorm"],
            "clsprox": ["clsprox"],
            "both": ["clsnorm", "clsprox"],
        }
    # 12 cells train 12 runs (per seed), of which 3 are T2's; the oracle row adds calibrations
    seeds = len(demo.seeds)
    assert len(t1.run_ids()) == 12 * seeds and len(t1.calibration_ids()) == 3 * seeds


def test_one_calibration_per_seed(two_seeds):
    for item in two_seeds.items.values():
        for cell in item.cells:
            if cell.calibrations:
                assert len(cell.calibrations) == len(cell.run_ids) == 2
                for rid, cid in zip(cell.run_ids, cell.calibrations, strict=True):
                    assert cid.split("/")[0] == rid


def test_figures_reuse_table_runs(demo):
    t2 = set(demo.items["ccvr_t2"].run_ids())
    fig_runs = {r for i in demo.items.values() if i.is_figure for r in i.run_ids()}
    assert len(fig_runs - t2) == 1  # only the IID run of Figs. 1–3 is extra
    t2_cal = set(demo.items["ccvr_t2"].calibration_ids())
    assert set(demo.items["ccvr_fig6"].calibration_ids()) <= t2_cal
    fig7 = demo.items["ccvr_fig7"]
    # the demo runs three of the six M_c (config/scales/demo.yaml → restrict)
    assert len(fig7.calibration_ids()) == 9 and len(set(fig7.run_ids())) == 3
    assert fig7.spec["scale_note"] == (
        "At this scale only M_c = 0, M_c = 100, M_c = 1000 (3 of 6) run; not run here: "
        "M_c = 50, M_c = 500, M_c = 2000.")
    # CKA needs the client models of the last round: asked for on the shared α=0.1 run
    rounds = demo.runs[fig7.cells[0].run_ids[0]]["training"]["rounds"]
    for rid in demo.items["ccvr_fig1"].run_ids():
        assert demo.runs[rid]["runtime"]["save_client_models"] == [rounds]


def test_restricted_items_say_what_they_keep_in_the_words_of_their_cells(demo, paper):
    """The note under a restricted figure or table (its footnote, its caption) names the kept
    values as the cells print them, never by their vocabulary keys."""
    fig4 = demo.items["ccvr_fig4"]
    assert fig4.spec["scale_note"].startswith(
        "At this scale only all of the data, 1/10 of the data, 1/50 of the data (3 of 6) run; "
        "not run here: ")
    t2 = demo.items["ccvr_t2"]
    columns = list(dict.fromkeys(c.display["data"] for c in t2.cells))
    left = list(dict.fromkeys(c["display"]["data"] for c in t2.left_out))
    assert "CINIC-10" in columns and "CIFAR-100" not in columns and "CIFAR-100" in left[0]
    assert not any("," in c for c in columns + left)
    assert t2.spec["scale_note"] == (
        f"At this scale only {', '.join(columns)} ({len(columns)} of "
        f"{len(columns) + len(left)}) run; not run here: {', '.join(left)}.")
    table = T.render_markdown([], t2.payload(), "demo")
    assert t2.spec["scale_note"] in table  # the table's caption carries the same note
    assert "scale_note" not in paper.items["ccvr_fig4"].spec  # nothing left out at full scale


def test_calibration_key_ignores_execution_settings():
    a = X.calibration_job("run-s0", {"method": "ccvr"}, "f", "w")
    b = X.calibration_job("run-s0", {"method": "ccvr", "device": "cuda"}, "f", "w")
    c = X.calibration_job("run-s0", {"method": "ccvr", "samples_per_class": 50}, "f", "w")
    assert a[0] == b[0] != c[0]
    with pytest.raises(X.ExperimentError, match="unknown setting 'calibration.mc'"):
        X.calibration_job("run-s0", {"method": "ccvr", "mc": 5}, "f", "w")


def write_calibration(path: Path, before: float, after: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"method": "ccvr", "acc_before": before, "acc_after": after}))
    return path


def completed_results(payload, tmp_path, acc, after):
    """Results of every cell: completed runs at `acc`, and calibrations of the k-th seed's run
    from `acc` to `after(k)`, read back from their files."""
    results = {}
    for cell in payload["cells"]:
        for rid in cell["run_ids"]:
            results[rid] = T.result_from({"status": "completed", "last_acc": acc}, [])
        for k, cid in enumerate(cell["calibrations"]):
            path = write_calibration(tmp_path / cid / "calibration.json", acc, after(k))
            assert T.calibration_key(path) == cid
            results[cid] = T.load_calibration(path)
    return results


def test_gain_is_after_minus_before(demo, tmp_path):
    payload = demo.items["ccvr_t2"].payload()
    results = completed_results(payload, tmp_path, 0.5, lambda k: 0.55 + 0.01 * k)
    lines = T.compute_table(payload, results, "demo")
    by = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    plain = by[("No calibration · FedAvg", "CIFAR-10 α=0.1", "last_acc")]
    ccvr = by[("CCVR · FedAvg", "CIFAR-10 α=0.1", "last_acc")]
    gain = by[("CCVR · FedAvg", "CIFAR-10 α=0.1", "gain")]
    assert math.isclose(plain["our_mean"], 50.0)
    assert math.isclose(ccvr["our_mean"], 55.0)
    assert math.isclose(gain["our_mean"], 5.0)
    assert gain["paper_value"] == 4.13 and math.isclose(gain["delta"], 5.0 - 4.13)
    assert ccvr["paper_value"] == 62.68 and ccvr["paper_std"] == 0.54
    assert ("No calibration · FedAvg", "CIFAR-10 α=0.1", "gain") not in by
    md = T.render_markdown(lines, payload, "demo")
    # the gain in parentheses inside the accuracy cell, as the paper prints it
    assert "62.68±0.54 (↑4.13) / 55.00 (↑5.00) (-7.68)" in md and "gain (pp)" not in md


def test_gain_mean_and_std_over_seeds(two_seeds, tmp_path):
    payload = two_seeds.items["ccvr_t1"].payload()
    results = completed_results(payload, tmp_path, 0.6, lambda k: 0.62 + 0.02 * k)
    lines = T.compute_table(payload, results, "demo")
    (gain,) = [
        ln
        for ln in lines
        if ln["metric"] == "gain" and ln["column"] == "CIFAR-10 α=0.05"
    ]
    assert gain["seeds"] == 2
    assert math.isclose(gain["our_mean"], 3.0) and math.isclose(gain["our_std"], math.sqrt(2))


@pytest.mark.workflow
def test_dry_run_calibrations_depend_on_model_only(demo, tmp_path):
    t2 = demo.items["ccvr_t2"]
    cid = next(c for c in t2.calibration_ids() if "/oracle-" in c)
    target = f"results/demo/calibrations/{cid}/calibration.json"
    proc = dry_run_in_a_copy(tmp_path, "--forceall", "-p", target)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    blocks = [b for b in out.split("\n\n") if "rule calibrate:" in b]
    assert len(blocks) == 1
    (inputs,) = [ln.split(":", 1)[1].strip() for ln in blocks[0].splitlines() if "input:" in ln]
    run_id = cid.split("/")[0]
    assert inputs == f"results/demo/runs/{run_id}/model.pt"
    assert f"fedhet calibrate --run results/demo/runs/{run_id}" in out
    # the calibration's only producer upstream is its run's training job
    trains = [b for b in out.split("\n\n") if "rule train:" in b]
    assert len(trains) == 1 and run_id in trains[0]
