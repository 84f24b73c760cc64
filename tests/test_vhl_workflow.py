"""VHL's part of the workflow: the grids of Tables 3, 6, 8 and 10 and Figs 2 and 4-7, the
rounds / speed-up / cost maths of VHL cells, and the cached virtual datasets shared by runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fedhet import tables as T
from fedhet.experiments import cost_factor, load_experiment
from fedhet.virtual.spec import real_source, resolve_settings
from test_workflow import dry_run_in_a_copy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exp():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return load_experiment(cfg, ROOT)


@pytest.fixture(scope="module")
def paper_exp():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["scale"] = "paper"
    return load_experiment(cfg, ROOT)


@pytest.mark.parametrize("target", ["vhl_t3", "vhl_t6", "vhl_t8", "vhl_t10", "vhl_fig2"])
def test_every_cell_maps_to_exactly_one_run(exp, target):
    item = exp.items[target]
    assert item.cells
    for cell in item.cells:
        assert cell.pending is None, cell.labels
        assert len(cell.run_ids) == len(exp.seeds) == 1
        assert cell.run_ids[0] in exp.runs


def test_table3_partitions(exp):
    schemes = {
        c.labels["setting"]: exp.runs[c.run_ids[0]]["partition"]
        for c in exp.items["vhl_t3"].cells
    }
    assert schemes["two-classes"]["scheme"] == "nclass"
    assert schemes["two-classes"]["classes_per_client"] == 2
    assert schemes["subset"]["scheme"] == "subset"
    assert len(exp.items["vhl_t3"].run_ids()) == 16  # 2 partitions × 4 algorithms × w/(w/o)


def test_table6_at_paper_scale_is_whole_and_shares_table1(paper_exp):
    item = paper_exp.items["vhl_t6"]
    assert len(item.cells) == 23 * 4 + 2 * 2 * 4
    t1 = {
        (c.labels["algorithm"], c.labels["method"]): c.run_ids[0]
        for c in paper_exp.items["vhl_t1"].cells
        if c.labels["setting"] == "a01-e1-k10"
    }
    by = {(c.labels.get("model"), c.labels["method"], c.labels["algorithm"]): c.run_ids[0]
          for c in item.cells}
    for algo in ("fedavg", "fedprox", "scaffold", "fednova"):
        assert by[("resnet18", "base", algo)] == t1[(algo, "base")]
        # the default virtual batch, calibration weight and layer are the VHL run itself
        for same in ("vhl", "vbs128", "cw1", "penultimate"):
            assert by[("resnet18", same, algo)] == t1[(algo, "vhl")]
    variants = {paper_exp.runs[r]["plugins"][0]["params"]["variant"]
                for r in item.run_ids() if paper_exp.runs[r]["plugins"]}
    assert variants == {"vhl", "naive", "vfa", "vftl"}
    models = {paper_exp.runs[r]["model"]["name"] for r in item.run_ids()}
    assert models == {"resnet10", "resnet18", "resnet34"}


def test_table6_is_restricted_at_demo_and_says_so(exp):
    item = exp.items["vhl_t6"]
    assert {c.labels["algorithm"] for c in item.cells} == {"fedavg"}
    note = item.spec["scale_note"]  # the algorithms as the cells print them
    assert " and FedAvg (1 of 4) run; " in note and note.endswith("; FedProx, SCAFFOLD, FedNova.")


def test_vhl_cells_evaluate_on_natural_classes(exp):
    for target in ("vhl_t1", "vhl_t3", "vhl_t6", "vhl_t8"):
        for rid in exp.items[target].run_ids():
            for plugin in exp.runs[rid]["plugins"]:
                if plugin["name"] == "vhl":
                    assert plugin["params"]["eval_protocol"] == "natural"


def test_table8_feddf_and_shared_runs(exp):
    item = exp.items["vhl_t8"]
    plugins = {c.labels["method"]: exp.runs[c.run_ids[0]]["plugins"] for c in item.cells}
    # FedDF's real unlabeled data (CIFAR-100) is mapped onto the scale's stand-in
    real = next(p for p in plugins["feddf-real"] if p["name"] == "feddf")["params"]
    assert real["unlabeled"] == "digits100"
    assert real["unlabeled_options"]["stands_in_for"] == "cifar100"
    noise = next(p for p in plugins["feddf-noise"] if p["name"] == "feddf")["params"]
    assert noise["unlabeled"] == "noise"
    t1 = set(exp.items["vhl_t1"].run_ids())
    shared = {c.labels["method"] for c in item.cells if c.run_ids[0] in t1}
    assert shared == {"base", "vhl"}  # α=0.1 FedAvg w/ and w/o VHL are Table 1's runs


def test_feddf_unlabeled_data_gets_its_own_prepare_job(paper_exp):
    """FedDF's unlabeled CIFAR-100 is prepared (and downloaded) by the DAG like a run's own
    dataset, and only the runs that read it while training wait for it."""
    by_method = {}
    for c in paper_exp.items["vhl_t8"].cells + paper_exp.items["vhl_t6"].cells:
        by_method.setdefault(c.labels["method"], set()).update(
            k for rid in c.run_ids for k in paper_exp.run_extra_datasets.get(rid, []))
    assert by_method["feddf-real"] == {"cifar100"}
    assert paper_exp.datasets["cifar100"] == {"name": "cifar100", "options": {}}
    # the Tiny-ImageNet row's run reads its virtual set, not Tiny-ImageNet itself
    for method in ("feddf-noise", "vhl", "base", "tinyimagenet"):
        assert by_method[method] == set(), method


def test_tinyimagenet_virtual_data_waits_for_its_source(tmp_path):
    """Table 6's Tiny-ImageNet virtual set is cut from the real dataset: its virtual-data job
    depends on that dataset's prepare-data job."""
    proc = dry_run_in_a_copy(tmp_path, "--forceall", "-p", "vhl_t6", "--config", "scale=paper")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    blocks = out.split("\nrule ")
    prepare = [b for b in blocks if b.startswith("prepare_data:")]
    assert any("resources/datasets/tinyimagenet.path" in b for b in prepare), out[-3000:]
    assert real_source(resolve_settings({
        "kind": "tinyimagenet10", "num_classes": 10, "size": 32, "channels": 3,
    })) == {"name": "tinyimagenet", "options": {}}
    assert real_source(resolve_settings({
        "kind": "stylegan", "num_classes": 10, "size": 32, "channels": 3,
    })) is None


def test_table10_is_derived_from_the_main_tables_runs_only(exp):
    t10 = exp.items["vhl_t10"]
    by_dataset = {"cifar10": "vhl_t1", "fmnist": "vhl_t2", "svhn": "vhl_t4", "cifar100": "vhl_t5"}
    shown = {c.labels["dataset"] for c in t10.cells}  # the demo restricts it to CIFAR-10
    assert "cifar10" in shown
    for dataset, target in by_dataset.items():
        if dataset not in shown:
            continue
        main = {
            (c.labels["setting"], c.labels["algorithm"], c.labels["method"]): c.run_ids
            for c in exp.items[target].cells
            if c.labels["setting"] != "centralized"
        }
        mine = {
            (c.labels["setting"], c.labels["algorithm"], c.labels["method"]): c.run_ids
            for c in t10.cells
            if c.labels["dataset"] == dataset
        }
        assert mine == main
    # no run of its own
    others = {r for t, i in exp.items.items() if t != "vhl_t10" for r in i.run_ids()}
    assert set(t10.run_ids()) <= others


def test_cost_factor_counts_sampled_share_epochs_and_virtual_batch(paper_exp):
    cells = {
        (c.labels["dataset"], c.labels["setting"], c.labels["algorithm"], c.labels["method"]): c
        for c in paper_exp.items["vhl_t10"].cells
    }
    factor = {k: c.values["cost_factor"] for k, c in cells.items()}
    assert factor[("cifar10", "a01-e1-k10", "fedavg", "base")] == 0.5
    assert factor[("cifar10", "a01-e1-k10", "fedavg", "vhl")] == 1.0
    assert factor[("cifar10", "a01-e5-k10", "fedavg", "base")] == 2.5
    assert factor[("cifar10", "a01-e1-k100", "fedavg", "vhl")] == pytest.approx(0.2)
    # the paper's own Table 10 follows from its Table 1 rounds with these factors
    ref = cells[("cifar10", "a01-e5-k10", "fedavg", "base")].reference["cost"]
    assert ref == 255 * 2.5
    run = paper_exp.runs[cells[("cifar10", "a01-e1-k10", "fedavg", "vhl")].run_ids[0]]
    assert cost_factor(run) == 1.0


def _result(curve):
    best = max(a for _, a in curve)
    return T.RunResult("completed", best, curve[-1][1], best, list(curve))


def test_rounds_speedup_and_cost_of_vhl_cells(exp):
    payload = exp.items["vhl_t1"].payload()
    results = {}
    for cell in payload["cells"]:
        labels = cell["labels"]
        if labels["setting"] != "a01-e1-k10":  # w/ VHL below the target: never reached
            curve = [(1, 10.0 if labels["method"] == "base" else 5.0)]
        elif labels["method"] == "base":  # FedAvg w/o VHL: best 50.4 % at round 20
            curve = [(r, min(50.4, 2.52 * r)) for r in range(1, 31)]
        else:  # w/ VHL: reaches 50 % at round 5
            curve = [(r, min(60.0, 10.0 * r)) for r in range(1, 31)]
        for rid in cell["run_ids"]:
            results[rid] = _result(curve)
    lines = T.compute_table(payload, results, "demo")
    get = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    row = "α=0.1, E=1, K=10 · FedAvg"
    target = [ln for ln in lines if ln["metric"] == "target" and ln["row"] == "α=0.1, E=1, K=10"]
    assert target[0]["our_mean"] == 50.0  # best of FedAvg w/o VHL, floored
    assert get[(row, "w/o VHL", "rounds")]["our_mean"] == 20  # 2.52 × 20 = 50.4
    assert get[(row, "w/ VHL", "rounds")]["our_mean"] == 5
    assert get[(row, "w/ VHL", "speedup")]["our_mean"] == 4.0
    assert get[(row, "w/o VHL", "speedup")]["our_mean"] == 1.0

    t10 = exp.items["vhl_t10"].payload()
    for cell in t10["cells"]:
        for rid in cell["run_ids"]:
            results.setdefault(rid, _result([(1, 10.0)]))
    lines = T.compute_table(t10, results, "demo")
    cost = {(ln["row"], ln["column"]): ln for ln in lines if ln["metric"] == "cost"}
    assert cost[("CIFAR-10 · α=0.1, E=1, K=10 · w/o VHL", "FedAvg")]["our_mean"] == 20 * 0.5
    assert cost[("CIFAR-10 · α=0.1, E=1, K=10 · w/ VHL", "FedAvg")]["our_mean"] == 5 * 0.5 * 2
    never = cost[("CIFAR-10 · α=0.05, E=1, K=10 · w/ VHL", "FedAvg")]
    assert math.isnan(never["our_mean"]) and never["status"] == T.NEVER
    md = T.render_markdown(lines, t10, "demo")
    assert "no runs of its own" in md


def test_figures_use_their_own_rules_and_runs(exp):
    fig2 = exp.items["vhl_fig2"]
    assert fig2.kind == "tsne"
    for rid in fig2.run_ids():
        run = exp.runs[rid]
        assert run["runtime"]["save_client_models"] == [run["training"]["rounds"]]
    kinds = {exp.items[f"vhl_fig{n}"].kind for n in (4, 5, 6, 7)}
    assert kinds == {"virtual_grid"}


def test_dry_run_shares_one_virtual_dataset_between_runs(exp, tmp_path):
    """Table 1's VHL runs of one dataset read one virtual dataset: one job, many consumers."""
    cells = [c for c in exp.items["vhl_t1"].cells
             if c.labels["method"] == "vhl" and c.labels["setting"] != "centralized"]
    targets = [f"results/demo/runs/{c.run_ids[0]}/final.json" for c in cells[:6]]
    proc = dry_run_in_a_copy(tmp_path, "--forceall", *targets)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    blocks = out.split("\nrule ")
    virtual = [b for b in blocks if b.startswith("artefact_virtual:")]
    train = [b for b in blocks if b.startswith("train:")]
    assert len(virtual) == 1 and len(train) == 6
    path = virtual[0].split("output: ")[1].split(",")[0].strip()
    assert path.startswith("resources/datasets/virtual/virtual-stylegan-")
    assert all(path in b for b in train)
